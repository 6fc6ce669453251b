"""BlockIndex: which KV sequences hold which token prefixes, found by block hashes (vLLM's scheme).

A sequence's tokens are cut into blocks of `block` tokens; the key of the prefix made of its first k blocks is
a polynomial hash of those k·block tokens (mod 2**64, one vectorised numpy cumsum for all k at once). The index
maps each prefix key to the set of sequences holding that prefix, so "sequences holding the first k blocks of a
prompt" is one dict probe, and because every sequence enters all of its prefixes, the longest cached prefix of a
prompt is found by a binary search over k (O(log(n / block)) probes), never a walk over tokens. The exact match
length, token for token (the partial last block included), comes from one vectorised comparison of the prompt
with each candidate's tokens (`common_prefix`), which also makes a hash collision harmless: it can only offer a
candidate whose real common prefix is shorter.

Why a block-hash map rather than a radix tree in C: the index holds at most 256 sequences (the KV cache's
sequence ids), a lookup costs a handful of dict probes plus one numpy comparison per candidate, and an insert one
cumsum plus one dict update per block of 16 tokens, all of it once per request, next to a decode step of
milliseconds; the tree structure that matters for eviction (which cached sequences are leaves) is kept by the
prefix cache itself (a cached sequence that is a prefix of another is dropped, so the cached ones are leaves).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np

_P = np.uint64(0x100000001B3)            # odd multiplier (FNV-1a 64-bit prime)
_MIX = np.uint64(0x9E3779B97F4A7C15)      # separates the levels: the k-block key also depends on k


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """How many leading tokens the int arrays a and b share (one vectorised comparison)."""
    m = min(len(a), len(b))
    if m == 0:
        return 0
    neq = np.flatnonzero(a[:m] != b[:m])
    return int(neq[0]) if neq.size else m


class BlockIndex:
    """Prefix keys of blocks of `block` tokens -> the ids (any hashable) of the sequences holding them."""

    def __init__(self, block: int = 16) -> None:
        if int(block) < 1:
            raise ValueError(f"block must be >= 1, got {block}")
        self.block = int(block)
        self._pw = np.ones(1, np.uint64)
        self._map: Dict[int, Dict[object, None]] = {}
        self._keys: Dict[object, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key) -> bool:
        return key in self._keys

    def _powers(self, n: int) -> np.ndarray:
        if len(self._pw) < n:
            m = max(n, 2 * len(self._pw))
            with np.errstate(over="ignore"):
                pw = np.empty(m, np.uint64)
                pw[0] = 1
                pw[1:] = np.cumprod(np.full(m - 1, _P, np.uint64), dtype=np.uint64)
            self._pw = pw
        return self._pw[:n]

    def hashes(self, tokens: np.ndarray) -> np.ndarray:
        """uint64[len(tokens) // block]: key k-1 is the key of the first k blocks."""
        B = self.block
        nb = len(tokens) // B
        if nb == 0:
            return np.zeros(0, np.uint64)
        n = nb * B
        with np.errstate(over="ignore"):
            t = np.asarray(tokens[:n]).astype(np.uint64) + np.uint64(1)
            cs = np.cumsum(t * self._powers(n), dtype=np.uint64)
            h = cs[B - 1::B] ^ (np.arange(1, nb + 1, dtype=np.uint64) * _MIX)
        return h

    def add(self, key, tokens: np.ndarray, hashes: Optional[np.ndarray] = None) -> None:
        """Enters (or re-enters) `key` as holding `tokens`."""
        self.remove(key)
        hs = self.hashes(tokens) if hashes is None else hashes
        self._keys[key] = hs
        m = self._map
        for h in hs.tolist():
            d = m.get(h)
            if d is None:
                m[h] = {key: None}
            else:
                d[key] = None

    def remove(self, key) -> None:
        hs = self._keys.pop(key, None)
        if hs is None:
            return
        m = self._map
        for h in hs.tolist():
            d = m.get(h)
            if d is not None:
                d.pop(key, None)
                if not d:
                    del m[h]

    def match(self, hashes: np.ndarray) -> Tuple[int, List[object]]:
        """(k, ids): the most blocks k of a prompt (given its hashes) that some entered sequence holds, and those
        sequences (in the order they were entered). (0, []) when not even the first block is held."""
        m = self._map
        hs = hashes.tolist()
        lo, hi = 0, len(hs)                    # invariant: prefix lo is held (0 trivially), hi + 1 is not
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if hs[mid - 1] in m:
                lo = mid
            else:
                hi = mid - 1
        if lo == 0:
            return 0, []
        return lo, list(m[hs[lo - 1]])


__all__ = ["BlockIndex", "common_prefix"]
