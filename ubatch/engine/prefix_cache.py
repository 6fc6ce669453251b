"""PrefixCache: automatic prefix caching across requests for LLMEngine (docs/engine.md, Prefix caching).

The K/V of finished sequences is kept, and a new request takes the longest prefix of its prompt that some
sequence (finished or running) already holds, then computes only the rest. Because ubatch's K/V rows do not depend
on the batch that computed them, the continuation is bitwise the one a recomputation gives.

Where the cached K/V lives depends on the KV layout:
* one unified stream (kv_unified=True; `ubatch serve`'s default): a finished sequence's cells are handed to a
  *holder* sequence id (ids n_seq_max .. 255, never in a batch) with `seq_cp`; a new request gets a prefix with
  `seq_cp(src, new, 0, L)`, which **shares the cells** (no data is copied, no cell is used twice). A cached path
  that is a prefix of another is dropped (its cells live on in the longer one), so the holders are the leaves of
  the tree of cached paths; they are evicted least recently used first (`seq_rm(holder)` frees only the cells no
  running sequence shares) when a decode finds the cache full, when the size bound is passed, or when holder ids
  run out. Admission counts cells held only by the cache as free, and a decode that fails for want of cells
  evicts and retries before the engine's own retry / preemption: cached cells never cause a KVCacheFullError
  that computing from scratch would not.
* one stream per sequence (kv_unified=False): a finished sequence's stream keeps its cells while its id is free;
  a request whose best match is such a stream takes that id (`seq_rm(id, L, -1)` drops the rest, nothing is
  copied); a match in another (running) stream is copied whole (`seq_cp`, a stream copy) and cut at L. A free id
  given to a request without a match prefers an empty stream, then the least recently used cached one. Cached
  streams never compete with running ones for cells.

Requests that arrive together with the same prefix: a request whose prompt shares L tokens with the prompt of a
running sequence that has not computed them yet waits for it (its chunks are capped so that it stops exactly at
L), then takes them by seq_cp: 32 clients sharing a 1,000-token system prompt compute it once.

Sliding-window models (iSWA, Gemma 3): a prefix of L tokens is reused only when the sliding cache still holds the
window of position L (positions L - n_swa + 1 .. L - 1) for the source sequence; otherwise the request takes
another source whose window is intact, or none. See docs/engine.md (prefix caching) for what that means for Gemma.

The index (which sequence holds which prefix) is the block-hash map of prefix_index.py.
"""
from __future__ import annotations

import heapq
import itertools
from typing import Dict, List, Optional, Tuple

import numpy as np

from ubatch.common.errors import UbatchError
from ubatch.engine.prefix_index import BlockIndex, common_prefix
from ubatch.engine.sequence import GEN, PROMPT


class _Src:
    """A KV sequence id holding tokens: a running sequence (seq set, valid = what it has computed of them) or a
    cached one (seq None, valid = all of tokens)."""

    __slots__ = ("key", "tokens", "seq", "stamp")

    def __init__(self, key: int, tokens: np.ndarray, seq, stamp: int) -> None:
        self.key, self.tokens, self.seq, self.stamp = key, tokens, seq, stamp

    def valid(self) -> int:
        if self.seq is None:
            return len(self.tokens)
        return min(self.seq.n_past, len(self.tokens))


class PrefixCache:
    """See the module docstring. One per LLMEngine; the engine calls take_id / start at admission, resolve at
    the start of a step, cap while building the batch, release instead of seq_rm, evict_for_full on a full
    cache, and reads stats()."""

    def __init__(self, engine, *, max_cells: Optional[int] = None, block: int = 16) -> None:
        if max_cells is not None and int(max_cells) < 0:
            raise ValueError(f"prefix_cache_max_cells must be >= 0 or None, got {max_cells}")
        self.engine = engine
        self.kv = engine._kv
        self.unified = self.kv.n_stream == 1
        self.n_seq_max = engine.ctx.n_seq_max
        self.iswa = hasattr(self.kv, "swa")
        self.base = self.kv.base if self.iswa else self.kv
        self.max_cells = None if max_cells is None else int(max_cells)
        self.index = BlockIndex(block)
        self.block = self.index.block
        self.src: Dict[int, _Src] = {}
        self.holders: List[int] = list(range(self.n_seq_max, self.kv.n_seq)) if self.unified else []
        heapq.heapify(self.holders)
        self.waits: Dict[object, Tuple[object, int, int]] = {}     # waiter seq -> (leader seq, leader id, L)
        self.plans: Dict[object, tuple] = {}                      # lead seq -> its admission plan
        self.origin: Dict[object, int] = {}                       # seq -> the holder it consumed whole
        self._stamp = itertools.count(1)
        self._version = 0                   # bumped by every change of the cached entries
        self._count = ((-1, -1), 0)         # (version, decode calls) -> cells held only by the cache
        words = (self.kv.n_seq + 63) // 64
        run = np.zeros(max(words, 4), np.uint64)
        for s in range(self.n_seq_max):
            run[s // 64] |= np.uint64(1) << np.uint64(s % 64)
        self._run_mask = run[:4]
        self.queries = 0          # requests looked up
        self.hits = 0             # requests that reused a prefix
        self.tokens_queried = 0   # prompt tokens looked up
        self.tokens_saved = 0     # prompt tokens not computed thanks to the cache
        self.evictions = 0        # cached sequences evicted

    # ------------------------------------------------------------------ bookkeeping
    def _register(self, key: int, tokens: np.ndarray, seq) -> None:
        self._version += 1
        self.index.add(key, tokens)
        self.src[key] = _Src(key, tokens, seq, next(self._stamp))

    def _unregister(self, key: int) -> None:
        self._version += 1
        self.index.remove(key)
        self.src.pop(key, None)

    def _cached(self) -> List[_Src]:
        return [s for s in self.src.values() if s.seq is None]

    def _evict(self, key: int) -> None:
        """Drops a cached sequence: its cells (those no other sequence shares) are freed."""
        self._version += 1
        self._unregister(key)
        self.kv.seq_rm(key)
        if self.unified:
            heapq.heappush(self.holders, key)
        self.evictions += 1

    def _lru(self) -> Optional[int]:
        c = self._cached()
        return min(c, key=lambda s: s.stamp).key if c else None

    def cached_cells(self) -> int:
        """Cells held only by the cache (unified: cells of no running sequence; per-sequence streams: the cells
        of the cached streams)."""
        if not self.unified:
            return sum(len(s.tokens) for s in self._cached())
        if not self._cached():
            return 0
        stamp = (self._version, self.engine.statistics.decode_calls)
        if self._count[0] != stamp:          # counted again only after a decode or a change of the cache
            seq = self.base.cell_arrays(0)["seq"]
            self._count = (stamp, int(np.count_nonzero(~(seq & self._run_mask).any(axis=1))))
        return self._count[1]

    def stats(self) -> dict:
        q = max(self.tokens_queried, 1)
        return {"prefix_cache_queries": self.queries, "prefix_cache_hits": self.hits,
                "prefix_cache_tokens_queried": self.tokens_queried, "prefix_cache_tokens_saved": self.tokens_saved,
                "prefix_cache_hit_rate": self.tokens_saved / q if self.tokens_queried else 0.0,
                "prefix_cache_cells": self.cached_cells(), "prefix_cache_entries": len(self._cached()),
                "prefix_cache_evictions": self.evictions}

    # ------------------------------------------------------------------ admission
    def _usable(self, key: int, L: int) -> bool:
        """Sliding-window memory: does the sliding cache still hold the window of position L for `key`?"""
        if not self.iswa or L <= 0:
            return True
        try:
            return self.kv.window_hole(key, L) < 0
        except (UbatchError, ValueError):
            return False

    def _intact(self, key: int, n: int) -> bool:
        """Does cached sequence `key` still hold positions 0 .. n - 1? (Always, unless the KV cache was cleared or
        edited by someone else, as the llama.cpp API lets a drop-in user do.)"""
        return self.base.seq_pos_min(key) == 0 and self.base.seq_pos_max(key) == n - 1

    def _plan(self, s) -> tuple:
        """The best reuse for lead sequence s: ("none",), ("stream", key, L), ("copy", key, L) or
        ("wait", leader seq, leader id, L)."""
        prompt = s.req.prompt
        P = len(prompt)
        B = self.block
        if P <= B or not self.src:
            return ("none",)
        k, cands = self.index.match(self.index.hashes(prompt))
        best, best_score = ("none",), None
        for key in cands[-32:]:
            src = self.src.get(key)
            if src is None or src.seq is s:
                continue
            if src.seq is None and not self._intact(key, len(src.tokens)):
                self._evict(key)                 # its cells were removed behind the cache's back
                continue
            L = min(common_prefix(prompt, src.tokens), P - 1)
            if L < B:
                continue
            avail = src.valid()
            seq = src.seq
            now = avail >= L
            if not now:
                if seq is not None and seq.state == PROMPT and seq not in self.waits and seq.seq_id == key:
                    plan = ("wait", seq, key, L)
                else:
                    L, now = avail, True
                    if L < B:
                        continue
            if now:
                if not self._usable(key, L):
                    continue
                plan = ("stream", key, L) if (not self.unified and seq is None) else ("copy", key, L)
            score = (L + (B if now else 0), plan[0] == "stream", src.stamp)
            if best_score is None or score > best_score:
                best, best_score = plan, score
        return best

    def take_id(self, free: List[int], s, lead: bool) -> int:
        """The sequence id for s out of the engine's free-id heap (for a lead: the one its plan needs)."""
        if lead:
            plan = self._plan(s)
            self.plans[s] = plan
            if plan[0] == "stream":
                free.remove(plan[1])
                heapq.heapify(free)
                return plan[1]
        if self.unified:
            return heapq.heappop(free)
        empty = [i for i in free if i not in self.src]
        i = min(empty) if empty else min(free, key=lambda j: self.src[j].stamp)
        free.remove(i)
        heapq.heapify(free)
        if i in self.src:
            self._evict(i)
        return i

    def _apply(self, s, key: int, L: int) -> bool:
        """Gives s (already holding its sequence id, no cells) the first L cells of key. False: nothing done."""
        kv, sid = self.kv, s.seq_id
        self._version += 1
        try:
            if self.unified:
                kv.seq_cp(key, sid, 0, L)
            elif key == sid:                     # s took the cached stream itself
                src = self.src.get(key)
                if src is not None and src.seq is None:
                    self._unregister(key)
                kv.seq_rm(sid, L, -1)
            else:
                kv.seq_cp(key, sid)              # the whole stream, then cut at L
                kv.seq_rm(sid, L, -1)
        except (UbatchError, ValueError):        # a sliding window that cannot be rewound there
            kv.seq_rm(sid)
            return False
        src = self.src.get(key)
        if src is not None:
            src.stamp = next(self._stamp)
            if self.unified and src.seq is None and L == len(src.tokens):
                self.origin[s] = key
        s.n_past = L
        self.hits += 1
        self.tokens_saved += L
        return True

    def start(self, s) -> None:
        """After admission of lead s (its id taken, n_past 0): applies its plan and enters it in the index."""
        plan = self.plans.pop(s, ("none",))
        self.queries += 1
        self.tokens_queried += len(s.req.prompt)
        if plan[0] in ("stream", "copy"):
            self._apply(s, plan[1], plan[2])
        elif plan[0] == "wait":
            self.waits[s] = (plan[1], plan[2], plan[3])
        self._register(s.seq_id, s.req.prompt, s)

    def resolve(self) -> None:
        """Start of a step: waiters whose leader has computed their prefix take it; waiters whose leader left
        look again."""
        for w, (leader, lid, L) in list(self.waits.items()):
            if w.seq_id < 0 or w.state != PROMPT or w.n_past:
                del self.waits[w]
                continue
            if leader.seq_id == lid and leader.state in (PROMPT, GEN):
                if leader.n_past < L:
                    continue
                del self.waits[w]
                self._apply(w, lid, L)
                continue
            del self.waits[w]                   # the leader was preempted or aborted: look again
            plan = self._plan(w)
            if plan[0] in ("copy", "stream"):    # a cached stream is copied (w has its own id already)
                self._apply(w, plan[1], plan[2])
            elif plan[0] == "wait":
                self.waits[w] = (plan[1], plan[2], plan[3])

    def cap(self, s, k: int) -> int:
        """How many prompt tokens s may take this step (k wanted): 0 while it waits for a leader; a leader stops
        at its waiters' prefix length."""
        if not self.waits:
            return k
        if s in self.waits:
            return 0
        for leader, _, L in self.waits.values():
            if leader is s and L > s.n_past:
                k = min(k, L - s.n_past)
        return k

    # ------------------------------------------------------------------ release / eviction
    def release(self, s) -> None:
        """s leaves (finished, aborted or preempted): its cells become a cached entry, or are freed."""
        kv, sid = self.kv, s.seq_id
        self._version += 1
        self.waits.pop(s, None)
        self.plans.pop(s, None)
        src = self.src.get(sid)
        if src is not None and src.seq is s:
            self._unregister(sid)
        origin = self.origin.pop(s, None)
        finished = s.finish_reason is not None or s.req.aborted
        if s.n_past < self.block or (self.unified and not finished) or self.max_cells == 0:
            kv.seq_rm(sid)
            return
        toks = s.tokens(0, s.n_past)
        if not self.unified:
            self._register(sid, toks, None)      # the stream keeps its cells while its id is free
            self._bound()
            return
        o = self.src.get(origin) if origin is not None else None
        if o is not None and o.seq is None and common_prefix(toks, o.tokens) == len(o.tokens):
            self._evict(origin)                  # a prefix of what s holds: its cells live on in s's holder
            self.evictions -= 1
        if self._covered(toks):
            kv.seq_rm(sid)
            return
        if not self.holders:
            lru = self._lru()
            if lru is None:
                kv.seq_rm(sid)
                return
            self._evict(lru)
        h = heapq.heappop(self.holders)
        try:
            kv.seq_cp(sid, h)
        except (UbatchError, ValueError):
            heapq.heappush(self.holders, h)
            kv.seq_rm(sid)
            return
        kv.seq_rm(sid)
        self._register(h, toks, None)
        self._bound()

    def _covered(self, toks: np.ndarray) -> bool:
        """Some cached sequence already holds all of toks."""
        hs = self.index.hashes(toks)
        if len(hs) == 0:
            return False
        k, cands = self.index.match(hs)
        if k < len(hs):
            return False
        n = len(toks)
        for key in cands:
            src = self.src.get(key)
            if src is not None and src.seq is None and len(src.tokens) >= n and common_prefix(toks, src.tokens) == n:
                src.stamp = next(self._stamp)
                return True
        return False

    def _bound(self) -> None:
        if self.max_cells is None:
            return
        while self._cached() and self.cached_cells() > self.max_cells:
            self._evict(self._lru())

    def evict_for_full(self, n_rows: int) -> bool:
        """A decode found no room for n_rows rows: evicts least recently used cached sequences until at least
        n_rows cells were freed or none is left. True when something was evicted (retry the decode)."""
        if not self.unified or not self._cached():
            return False
        before = self.cached_cells()
        while self._cached():
            self._evict(self._lru())
            if before - self.cached_cells() >= n_rows:
                break
        return True

    def clear(self) -> None:
        """Drops every cached sequence (running ones stay indexed)."""
        for s in self._cached():
            self._evict(s.key)

    def forget(self) -> None:
        """The KV cache was replaced wholesale (a state load): the cached entries are dropped from the index and
        every holder id is emptied (whatever cells it has now are not the index's)."""
        for s in self._cached():
            self._unregister(s.key)
            if not self.unified:
                self.kv.seq_rm(s.key)
        if self.unified:
            for h in range(self.n_seq_max, self.kv.n_seq):
                self.kv.seq_rm(h)
            self.holders = list(range(self.n_seq_max, self.kv.n_seq))
            heapq.heapify(self.holders)


__all__ = ["PrefixCache"]
