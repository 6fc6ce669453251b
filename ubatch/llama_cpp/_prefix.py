"""Prefix reuse for the batched paths of `Llama(..., n_seq_max=N)` (ubatch's extension; docs/compat.md): the K/V a
finished choice leaves behind is kept under a holder sequence id of the unified KV cache (ids N .. 255, never in
a batch) and a later prompt takes the longest prefix any holder has, sharing its cells (`seq_cp(holder, seq, 0,
L)`), then decodes only the rest. The same block-hash index as the engine's prefix cache
(ubatch/engine/prefix_index.py); least recently used holders are evicted when a decode finds the cache full,
before anything fails. Bitwise the same completions: ubatch's K/V rows do not depend on the batch."""
from __future__ import annotations

import heapq
import itertools
from typing import Dict, List, Optional

import numpy as np

from ubatch.engine.prefix_index import BlockIndex, common_prefix


class DropInPrefix:
    """Holders over one unified KV cache (`kv`: a ubatch KVCache / KVCacheISWA) for running ids [0, n_seq)."""

    def __init__(self, kv, n_seq: int, block: int = 16) -> None:
        self.kv = kv
        self.n_run = n_seq
        self.iswa = hasattr(kv, "swa")
        self.base = kv.base if self.iswa else kv
        self.index = BlockIndex(block)
        self.block = self.index.block
        self.tokens: Dict[int, np.ndarray] = {}
        self.stamp: Dict[int, int] = {}
        self.free: List[int] = list(range(n_seq, kv.n_seq)) if kv.n_stream == 1 else []
        heapq.heapify(self.free)
        self._clock = itertools.count(1)
        mask = np.zeros(4, np.uint64)
        for s in range(n_seq):
            mask[s // 64] |= np.uint64(1) << np.uint64(s % 64)
        self._run_mask = mask
        self.hits = 0
        self.tokens_saved = 0
        self.evictions = 0

    @property
    def enabled(self) -> bool:
        return bool(self.free) or bool(self.tokens)

    def lookup(self, prompt: List[int], seq: int) -> int:
        """Gives empty sequence `seq` the longest cached prefix of prompt (at most len - 1 tokens: the last one
        is decoded for its logits); returns its length (0: none)."""
        toks = np.asarray(prompt, np.int32)
        if len(toks) <= self.block or not self.tokens:
            return 0
        k, cands = self.index.match(self.index.hashes(toks))
        best, best_L = None, 0
        for h in cands:
            if self.base.seq_pos_min(h) != 0 or self.base.seq_pos_max(h) != len(self.tokens[h]) - 1:
                self._evict(h)               # the KV cache was cleared or edited behind the index's back
                continue
            L = min(common_prefix(toks, self.tokens[h]), len(toks) - 1)
            if L > best_L and (not self.iswa or self.kv.window_hole(h, L) < 0):
                best, best_L = h, L
        if best is None or best_L < self.block:
            return 0
        try:
            self.kv.seq_cp(best, seq, 0, best_L)
        except ValueError:
            self.kv.seq_rm(seq)
            return 0
        self.stamp[best] = next(self._clock)
        self.hits += 1
        self.tokens_saved += best_L
        return best_L

    def store(self, seq: int, tokens: List[int]) -> None:
        """Sequence `seq` (holding exactly `tokens` at positions 0..) is done: its cells go to a holder (unless a
        holder already has all of them), and seq is emptied."""
        toks = np.asarray(tokens, np.int32)
        if len(toks) < self.block or self._covered(toks) or (not self.free and not self._evict_lru()):
            self.kv.seq_rm(seq)
            return
        h = heapq.heappop(self.free)
        try:
            self.kv.seq_cp(seq, h)
        except ValueError:
            heapq.heappush(self.free, h)
            self.kv.seq_rm(seq)
            return
        self.kv.seq_rm(seq)
        for o in [o for o in self.tokens if len(self.tokens[o]) <= len(toks)
                  and common_prefix(self.tokens[o], toks) == len(self.tokens[o])]:
            self._evict(o)                   # a prefix of the new holder: its cells live on there
        self.index.add(h, toks)
        self.tokens[h] = toks
        self.stamp[h] = next(self._clock)

    def _covered(self, toks: np.ndarray) -> bool:
        hs = self.index.hashes(toks)
        k, cands = self.index.match(hs)
        if k < len(hs):
            return False
        return any(len(self.tokens[h]) >= len(toks) and common_prefix(toks, self.tokens[h]) == len(toks)
                   for h in cands)

    def _evict(self, h: int) -> None:
        self.evictions += 1
        self.index.remove(h)
        self.tokens.pop(h, None)
        self.stamp.pop(h, None)
        self.kv.seq_rm(h)
        heapq.heappush(self.free, h)

    def _evict_lru(self) -> bool:
        if not self.tokens:
            return False
        self._evict(min(self.stamp, key=self.stamp.get))
        return True

    def cached_cells(self) -> int:
        """Cells held only by holders."""
        if not self.tokens:
            return 0
        seq = self.base.cell_arrays(0)["seq"]
        return int(np.count_nonzero(~(seq & self._run_mask).any(axis=1)))

    def evict_for(self, n: int) -> bool:
        """A decode of n rows found the cache full: evicts LRU holders until n cells were freed or none is left.
        True when something was evicted (retry the decode)."""
        if not self.tokens:
            return False
        before = self.cached_cells()
        while self._evict_lru():
            if before - self.cached_cells() >= n:
                break
        return True

    def clear(self) -> None:
        for h in list(self.tokens):
            self._evict(h)

    def forget(self) -> None:
        """The KV cache was replaced wholesale (Llama.load_state): whatever holder cells it has now are not the
        index's; every holder id is emptied and the index starts over."""
        for h in range(self.n_run, self.kv.n_seq):
            self.kv.seq_rm(h)
        self.index = BlockIndex(self.block)
        self.tokens.clear()
        self.stamp.clear()
        self.free = list(range(self.n_run, self.kv.n_seq)) if self.kv.n_stream == 1 else []
        heapq.heapify(self.free)


__all__ = ["DropInPrefix"]
