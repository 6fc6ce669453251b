"""Prompt caches for `Llama.set_cache`: states saved after a completion, keyed by their tokens, and restored
when a later prompt shares a longer prefix with one of them than with what the context holds."""
from __future__ import annotations

import hashlib
import os
import pickle
import weakref
from abc import ABC, abstractmethod  # noqa: F401  (llama_cpp.llama_cache has them, as 0.3.36)
from collections import OrderedDict
from typing import Iterable, Optional, Sequence, Tuple

import numpy as np

from ubatch.llama_cpp.llama_types import *  # noqa: F401,F403,E402  (llama_cpp.llama_cache re-exports them, as 0.3.36)


def token_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens a and b share (one vectorised comparison, not a loop per token)."""
    from ubatch.engine.prefix_index import common_prefix
    return common_prefix(np.asarray(a, np.int64), np.asarray(b, np.int64))


def _longest_prefix_key(keys: Iterable[Tuple[int, ...]], key: Tuple[int, ...]) -> Optional[Tuple[int, ...]]:
    """The cached key sharing the longest token prefix with `key` (the first of equals; None when none shares a
    token) — llama-cpp-python's lookup, one vectorised comparison per cached key."""
    best, best_len = None, 0
    for k in keys:
        n = token_prefix(k, key)
        if n > best_len:
            best, best_len = k, n
    return best


class BaseLlamaCache:
    def __init__(self, capacity_bytes: int = (2 << 30)) -> None:
        self.capacity_bytes = capacity_bytes

    @property
    def cache_size(self) -> int:
        raise NotImplementedError

    def __getitem__(self, key: Sequence[int]):
        raise NotImplementedError

    def __contains__(self, key: Sequence[int]) -> bool:
        raise NotImplementedError

    def __setitem__(self, key: Sequence[int], value) -> None:
        raise NotImplementedError


class LlamaRAMCache(BaseLlamaCache):
    """States kept in memory (least recently used dropped first beyond capacity_bytes, counted as
    llama-cpp-python counts them: the bytes of each state, llama_state_size)."""

    def __init__(self, capacity_bytes: int = (2 << 30)) -> None:
        super().__init__(capacity_bytes)
        self.cache_state: "OrderedDict[Tuple[int, ...], object]" = OrderedDict()

    @staticmethod
    def _size(state) -> int:
        return int(state.llama_state_size)

    @property
    def cache_size(self) -> int:
        return sum(self._size(s) for s in self.cache_state.values())

    def _find_longest_prefix_key(self, key: Tuple[int, ...]) -> Optional[Tuple[int, ...]]:
        return _longest_prefix_key(self.cache_state, key)

    def __getitem__(self, key: Sequence[int]):
        k = self._find_longest_prefix_key(tuple(key))
        if k is None:
            raise KeyError("Key not found")
        self.cache_state.move_to_end(k)
        return self.cache_state[k]

    def __contains__(self, key: Sequence[int]) -> bool:
        return self._find_longest_prefix_key(tuple(key)) is not None

    def _has_key(self, key: Tuple[int, ...]) -> bool:
        """Whether exactly `key` is an entry (ubatch: a Llama's holders of cached prefixes follow the entries)."""
        return key in self.cache_state

    def _entry_tag(self, key: Tuple[int, ...]):
        """Something that tells whether the entry `key` was replaced since (_entry_is)."""
        v = self.cache_state.get(key)
        return weakref.ref(v) if v is not None else None

    def _entry_is(self, key: Tuple[int, ...], tag) -> bool:
        v = self.cache_state.get(key)
        return tag is not None and v is not None and tag() is v

    def __setitem__(self, key: Sequence[int], value) -> None:
        key = tuple(key)
        if key in self.cache_state:
            del self.cache_state[key]
        self.cache_state[key] = value
        while self.cache_size > self.capacity_bytes and len(self.cache_state) > 0:
            self.cache_state.popitem(last=False)


LlamaCache = LlamaRAMCache


class LlamaDiskCache(BaseLlamaCache):
    """States kept on disk in cache_dir, one pickle per state (<sha256 of the tokens>.state) beside its key
    (.key: int32 tokens), so a new LlamaDiskCache on the same directory finds the states of an earlier process.
    llama-cpp-python keeps them in a `diskcache` database; ubatch needs no extra package for it. Beyond
    capacity_bytes the least recently written or read entries go first. Unlike 0.3.36, reading an entry keeps
    it in the cache (0.3.36 pops it)."""

    def __init__(self, cache_dir: str = ".cache/llama_cache", capacity_bytes: int = (2 << 30)) -> None:
        super().__init__(capacity_bytes)
        self.cache_dir = os.fspath(cache_dir)
        os.makedirs(self.cache_dir, exist_ok=True)
        self._keys: "OrderedDict[Tuple[int, ...], str]" = OrderedDict()
        found = []
        for name in os.listdir(self.cache_dir):
            if name.endswith(".key") and os.path.exists(os.path.join(self.cache_dir, name[:-4] + ".state")):
                path = os.path.join(self.cache_dir, name)
                key = tuple(np.fromfile(path, dtype=np.int32).tolist())
                found.append((os.path.getmtime(path), key, name[:-4]))
        for _, key, stem in sorted(found):
            self._keys[key] = stem

    @staticmethod
    def _stem(key: Tuple[int, ...]) -> str:
        return hashlib.sha256(np.asarray(key, dtype=np.int32).tobytes()).hexdigest()

    def _file(self, stem: str, ext: str) -> str:
        return os.path.join(self.cache_dir, stem + ext)

    @property
    def cache_size(self) -> int:
        return sum(os.path.getsize(self._file(s, ".state")) for s in self._keys.values()
                   if os.path.exists(self._file(s, ".state")))

    def _find_longest_prefix_key(self, key: Tuple[int, ...]) -> Optional[Tuple[int, ...]]:
        return _longest_prefix_key(self._keys, key)

    def __getitem__(self, key: Sequence[int]):
        k = self._find_longest_prefix_key(tuple(key))
        if k is None:
            raise KeyError("Key not found")
        with open(self._file(self._keys[k], ".state"), "rb") as f:
            value = pickle.load(f)
        self._keys.move_to_end(k)
        os.utime(self._file(self._keys[k], ".key"))
        return value

    def __contains__(self, key: Sequence[int]) -> bool:
        return self._find_longest_prefix_key(tuple(key)) is not None

    def _has_key(self, key: Tuple[int, ...]) -> bool:
        """Whether exactly `key` is an entry (ubatch: a Llama's holders of cached prefixes follow the entries)."""
        return key in self._keys

    def _entry_tag(self, key: Tuple[int, ...]):
        """Something that tells whether the entry `key` was replaced since (_entry_is): its file's identity."""
        if key not in self._keys:
            return None
        try:
            st = os.stat(self._file(self._keys[key], ".state"))
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _entry_is(self, key: Tuple[int, ...], tag) -> bool:
        return tag is not None and self._entry_tag(key) == tag

    def touch(self, key: Tuple[int, ...]) -> None:
        """What __getitem__ does to the entry `key` (most recently used, its file's time) without reading it:
        ubatch's Llama serves an entry whose K/V it still holds without unpickling the state."""
        if key in self._keys:
            self._keys.move_to_end(key)
            os.utime(self._file(self._keys[key], ".key"))

    def _remove(self, key: Tuple[int, ...]) -> None:
        stem = self._keys.pop(key)
        for ext in (".state", ".key"):
            try:
                os.remove(self._file(stem, ext))
            except FileNotFoundError:
                pass

    def __setitem__(self, key: Sequence[int], value) -> None:
        key = tuple(int(t) for t in key)
        if key in self._keys:
            self._remove(key)
        stem = self._stem(key)
        tmp = self._file(stem, ".tmp")
        with open(tmp, "wb") as f:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, self._file(stem, ".state"))
        np.asarray(key, dtype=np.int32).tofile(self._file(stem, ".key"))
        self._keys[key] = stem
        while self.cache_size > self.capacity_bytes and len(self._keys) > 0:
            self._remove(next(iter(self._keys)))
