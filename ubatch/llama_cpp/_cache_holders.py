"""Prefix reuse for `Llama.set_cache(LlamaRAMCache() / LlamaDiskCache())` on a single-sequence Llama (docs/compat.md).

Each state the completion path saves into the cache also leaves its K/V in the Llama's own KV cache under a
holder sequence id (HOLDER_IDS: the top 64 of the KV cache's 256, never in a batch of a single-sequence Llama; its cells shared with seq 0 by `seq_cp`, nothing copied),
entered in the engine's block-hash prefix index (ubatch/engine/prefix_index.py). When the cache's lookup picks an
entry a holder still has the cells of, seq 0 takes them (`seq_rm(0)`, `seq_cp(holder, 0, 0, n)`) instead of
`load_state` deserialising the whole context and copying the scores. The cache itself is untouched: the same
LlamaStates under the same keys, the same `cache_size`, the same least-recently-used order (the lookup still goes
through it). Holders go when their entries leave the cache, on `load_state` / `set_cache` / a KV cache cleared
behind their back, and least recently used first when a decode finds the KV cache full (before anything fails);
a lookup whose holder is gone restores the saved state as before. Bitwise the same completions: ubatch's K/V rows
do not depend on the batch or on the cells holding them."""
from __future__ import annotations

import heapq
import itertools
from typing import Callable, Dict, Optional, Tuple

import numpy as np

from ubatch.engine.prefix_index import BlockIndex, common_prefix

Key = Tuple[int, ...]
N_HOLDERS = 64


def holder_ids(kv) -> range:
    """The sequence ids holders use in kv (the top N_HOLDERS, never seq 0)."""
    return range(max(1, kv.n_seq - N_HOLDERS), kv.n_seq)


class CacheHolders:
    """Holders over one single-stream KV cache (`kv`: a ubatch KVCache / KVCacheISWA) whose seq 0 runs."""

    def __init__(self, kv, block: int = 16) -> None:
        self.kv = kv
        self.iswa = hasattr(kv, "swa")
        self.base = kv.base if self.iswa else kv
        self.index = BlockIndex(block)
        self.tokens: Dict[int, np.ndarray] = {}            # holder -> the tokens its cells hold (positions 0..)
        self.entries: Dict[int, Dict[Key, tuple]] = {}     # holder -> {cache key: (n tokens, seed, tag)}
        self.owner: Dict[Key, int] = {}                    # cache key -> its holder
        self.stamp: Dict[int, int] = {}
        self.free = list(holder_ids(kv))
        heapq.heapify(self.free)
        self._clock = itertools.count(1)
        self.hits = 0
        self.tokens_saved = 0
        self.evictions = 0

    # ---------------------------------------------------------------- saving
    def store(self, key: Key, tokens: np.ndarray, seed: int, tag) -> None:
        """The completion path saved the state of seq 0 (holding exactly `tokens` at positions 0..) under `key`
        (`tag`: the cache's mark of that entry, to see it replaced): a holder keeps those cells (one already
        holding them, or a new one sharing seq 0's)."""
        toks = np.asarray(tokens, np.int32)
        n = len(toks)
        if n == 0 or self.base.seq_pos_min(0) != 0 or self.base.seq_pos_max(0) != n - 1:
            self._drop_key(key)
            return
        h = self._covering(toks)
        if h is None:
            if not self.free and not self._evict_lru():
                self._drop_key(key)
                return
            h = heapq.heappop(self.free)
            try:
                self.kv.seq_cp(0, h)
            except ValueError:
                heapq.heappush(self.free, h)
                self._drop_key(key)
                return
            self.entries[h] = {}
            if not self.iswa:                # holders of a prefix of toks: their cells live on in h
                for o in [o for o in self.tokens if len(self.tokens[o]) <= n
                          and common_prefix(self.tokens[o], toks) == len(self.tokens[o])]:
                    moved = self.entries.pop(o, {})
                    self.entries[o] = {}
                    self._evict(o)
                    self.entries[h].update(moved)
                    for k in moved:
                        self.owner[k] = h
            self.index.add(h, toks)
            self.tokens[h] = toks
        if self.owner.get(key, h) != h:
            self._drop_key(key)              # saved again: its older holder may go
        self.entries[h][key] = (n, int(seed), tag)
        self.owner[key] = h
        self.stamp[h] = next(self._clock)

    def _covering(self, toks: np.ndarray) -> Optional[int]:
        """A holder whose tokens start with toks (and, iSWA, whose sliding cache still has toks' window)."""
        hs = self.index.hashes(toks)
        k, cands = self.index.match(hs)
        if k < len(hs):
            return None
        for h in (cands if len(hs) else list(self.tokens)):
            t = self.tokens[h]
            if len(t) >= len(toks) and common_prefix(toks, t) == len(toks) and self._window_ok(h, len(toks)):
                return h
        return None

    def _window_ok(self, h: int, n: int) -> bool:
        return not self.iswa or n == len(self.tokens[h]) or self.kv._window_hole(h, n) < 0

    # ---------------------------------------------------------------- reuse
    def find(self, key: Key, cache) -> Optional[Tuple[int, np.ndarray, int]]:
        """(holder, the tokens of key's state, its seed), or None when no holder has key's cells any more (or the
        cache's entry was replaced since it was stored)."""
        h = self.owner.get(key)
        if h is None:
            return None
        if not cache._entry_is(key, self.entries[h][key][2]):
            self._drop_key(key)
            return None
        t = self.tokens[h]
        if self.base.seq_pos_min(h) != 0 or self.base.seq_pos_max(h) != len(t) - 1:
            self._evict(h)                   # the KV cache was cleared or edited behind the index's back
            return None
        n, seed, _ = self.entries[h][key]
        if not self._window_ok(h, n):
            return None
        return h, t[:n], seed

    def restore(self, h: int, n: int) -> None:
        """seq 0 := the first n tokens of holder h (shared cells). ValueError leaves seq 0 empty or as it was."""
        self.kv.seq_rm(0)
        self.kv.seq_cp(h, 0, 0, n)
        self.stamp[h] = next(self._clock)
        self.hits += 1
        self.tokens_saved += n

    # ---------------------------------------------------------------- dropping
    def prune(self, present: Callable[[Key], bool]) -> None:
        """Forgets the keys the cache no longer has; a holder left with none is evicted."""
        for key in [k for k in self.owner if not present(k)]:
            self._drop_key(key)

    def _drop_key(self, key: Key) -> None:
        h = self.owner.pop(key, None)
        if h is None:
            return
        ent = self.entries.get(h)
        if ent is not None:
            ent.pop(key, None)
            if not ent:
                self._evict(h)

    def _evict(self, h: int) -> None:
        self.evictions += 1
        self.index.remove(h)
        self.tokens.pop(h, None)
        self.stamp.pop(h, None)
        for k in self.entries.pop(h, {}):
            if self.owner.get(k) == h:
                del self.owner[k]
        self.kv.seq_rm(h)
        heapq.heappush(self.free, h)

    def _evict_lru(self) -> bool:
        if not self.stamp:
            return False
        self._evict(min(self.stamp, key=self.stamp.get))
        return True

    def cached_cells(self) -> int:
        """Cells held by holders only (not by seq 0)."""
        if not self.tokens:
            return 0
        seq = self.base.cell_arrays(0)["seq"]
        used = seq.any(axis=1)
        return int(np.count_nonzero(used & ((seq[:, 0] & np.uint64(1)) == 0)))

    def evict_for(self, n: int) -> bool:
        """A decode of n rows found the KV cache full: evicts least recently used holders until n cells were
        freed or none is left. True when something was evicted (retry the decode)."""
        if not self.tokens:
            return False
        before = self.cached_cells()
        while self._evict_lru():
            if before - self.cached_cells() >= n:
                break
        return True

    def forget(self) -> None:
        """The KV cache was replaced wholesale (load_state) or the cache changed: every holder id is emptied."""
        for h in holder_ids(self.kv):
            self.kv.seq_rm(h)
        self.index = BlockIndex(self.index.block)
        self.tokens.clear()
        self.entries.clear()
        self.owner.clear()
        self.stamp.clear()
        self.free = list(holder_ids(self.kv))
        heapq.heapify(self.free)


def holders_for(llm) -> Optional[CacheHolders]:
    """The holders of this Llama's cache (created on first use), or None when its cache cannot use them: a batched
    Llama (its engine has its own prefix reuse), Llama(prefix_cache=False), a cache class other than ubatch's
    LlamaRAMCache / LlamaDiskCache, or a KV cache with one stream per sequence."""
    from ubatch.llama_cpp.llama_cache import LlamaDiskCache, LlamaRAMCache
    if llm.cache is None or not getattr(llm, "prefix_cache", False) or llm._batched or \
            not isinstance(llm.cache, (LlamaRAMCache, LlamaDiskCache)):
        return None
    if llm._holders is None:
        from ubatch.llama_cpp._handles import REGISTRY
        kv = REGISTRY.get(llm._ctx.ctx, "context").kv
        if kv.n_stream != 1 or kv.n_seq < 2:
            return None
        llm._holders = CacheHolders(kv)
    return llm._holders


__all__ = ["CacheHolders", "holders_for"]
