"""Prompt caches for `Llama.set_cache`: states saved after a completion, keyed by their tokens, and restored
when a later prompt shares a longer prefix with one of them than with what the context holds."""
from __future__ import annotations

from collections import OrderedDict
from typing import Optional, Sequence, Tuple

import numpy as np


def token_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens a and b share (one vectorised comparison, not a loop per token)."""
    from ubatch.engine.prefix_index import common_prefix
    return common_prefix(np.asarray(a, np.int64), np.asarray(b, np.int64))


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
    """States kept in memory (least recently used dropped first beyond capacity_bytes, counted as the saved
    scores and token arrays; the KV snapshots are shared with the context's own memory accounting)."""

    def __init__(self, capacity_bytes: int = (2 << 30)) -> None:
        super().__init__(capacity_bytes)
        self.cache_state: "OrderedDict[Tuple[int, ...], object]" = OrderedDict()

    @staticmethod
    def _size(state) -> int:
        return int(state.scores.nbytes + state.input_ids.nbytes)

    @property
    def cache_size(self) -> int:
        return sum(self._size(s) for s in self.cache_state.values())

    def _find_longest_prefix_key(self, key: Tuple[int, ...]) -> Optional[Tuple[int, ...]]:
        best, best_len = None, 0
        for k in self.cache_state:
            n = token_prefix(k, key)
            if n > best_len:
                best, best_len = k, n
        return best

    def __getitem__(self, key: Sequence[int]):
        k = self._find_longest_prefix_key(tuple(key))
        if k is None:
            raise KeyError("Key not found")
        self.cache_state.move_to_end(k)
        return self.cache_state[k]

    def __contains__(self, key: Sequence[int]) -> bool:
        return self._find_longest_prefix_key(tuple(key)) is not None

    def __setitem__(self, key: Sequence[int], value) -> None:
        key = tuple(key)
        if key in self.cache_state:
            del self.cache_state[key]
        self.cache_state[key] = value
        while self.cache_size > self.capacity_bytes and len(self.cache_state) > 0:
            self.cache_state.popitem(last=False)


LlamaCache = LlamaRAMCache


class LlamaDiskCache(BaseLlamaCache):
    def __init__(self, cache_dir: str = ".cache/llama_cache", capacity_bytes: int = (2 << 30)) -> None:
        raise NotImplementedError("LlamaDiskCache: states cannot be serialised to disk by ubatch.llama_cpp "
                                  "(use LlamaRAMCache)")
