"""KVCacheISWA: the two-cache memory of interleaved sliding-window models (llama.cpp's llama_kv_cache_iswa),
behind the memory protocol (protocol.py).

A full cache (`base`, no window) serves the global layers, a sliding cache (`swa`, window n_swa) the others.
Sizes as llama.cpp (docs/llama-cpp-behaviours.md §M4.2): size_swa = pad256(min(size, n_swa * (n_seq_max if unified else 1)
+ n_ubatch)), or size itself with swa_full (the default of llama_context_default_params).

* one plan for both: the split the pair needs (unified: split_simple, falling back to split_equal when a
  cache refuses it; per-sequence streams: split_equal(sequential)), dry-run in both caches;
* one transaction: begin / apply / commit / rollback act on both journals, so any failure (either cache,
  the K-shift, the compute) leaves both bit-identical to before;
* sequence operations mirrored on both caches inside one transaction (a refusal by either changes nothing);
* seq_pos_min / seq_pos_max answer from the sliding cache, as llama.cpp does (the allocator's continuity
  check and automatic positions see that view);
* rewind safety, beyond llama.cpp: an operation that would leave a sequence whose next token needs
  positions the sliding cache already evicted raises RewindError and changes nothing; seq_rewind_min(s)
  tells how far back s can be rewound.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from ubatch.common.errors import CallOrderError, KVCacheFullError, RewindError, UbatchError
from ubatch.common.validate import check_int as _int
from ubatch.common.locking import locked as _locked
from ubatch.memory.kv_cache import SWA_TYPES, KVCache, KVSnapshot
from ubatch.memory.placement import Placement
from ubatch.memory.protocol import (MemoryPlan, MemoryUpdate, cache_split, check_coupled, split_all,
                                    whole_seqs_split)


def swa_cache_size(size: int, n_swa: int, *, n_seq_max: int, unified: bool, n_ubatch: int, swa_full: bool) -> int:
    """Cells per stream of the sliding cache (llama_kv_cache_iswa's constructor)."""
    if swa_full:
        return size
    want = min(size, n_swa * (n_seq_max if unified else 1) + n_ubatch)
    return (want + 255) // 256 * 256


class ISWASnapshot:
    """An opaque copy of both caches' state."""

    __slots__ = ("base", "swa")

    def __init__(self, base: KVSnapshot, swa: KVSnapshot) -> None:
        self.base, self.swa = base, swa


class KVCacheISWA:
    """Two KV caches sharing one lock: `base` (size cells per stream, no window) and `swa` (size_swa cells
    per stream, window n_swa of swa_type). The KVCache surface (n_stream, size, cells, used, head, ...)
    describes the full cache; describe() reports both."""

    def __init__(self, n_stream: int, size: int, size_swa: int, *, n_swa: int, swa_type: str = "standard",
                 swa_layers: Optional[Tuple[bool, ...]] = None) -> None:
        if swa_type == "none" or swa_type not in SWA_TYPES:
            raise ValueError(f"swa_type must be one of {sorted(t for t in SWA_TYPES if t != 'none')}, got {swa_type!r}")
        n_swa = _int("n_swa", n_swa, 1)
        size_swa = _int("size_swa", size_swa, 1)
        self.base = KVCache(n_stream, size)
        self.swa = KVCache(n_stream, size_swa, swa_type=swa_type, n_swa=n_swa, lock=self.base.lock)
        self._lock = self.base.lock              # one lock for the pair (and its Context)
        self._plans: Optional[Tuple[MemoryPlan, MemoryPlan, MemoryPlan]] = None   # (own, base's, swa's)
        self.n_swa = n_swa
        self.swa_type = swa_type
        self.swa_layers = None if swa_layers is None else tuple(bool(x) for x in swa_layers)

    # ------------------------------------------------------------------ lifetime
    @_locked
    def close(self) -> None:
        self.base.close()
        self.swa.close()

    def __enter__(self) -> "KVCacheISWA":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def lock(self):
        """The pair's lock (re-entrant), shared with the Context."""
        return self._lock

    @property
    def closed(self) -> bool:
        return self.base.closed

    # ------------------------------------------------------------------ the full cache's surface
    @property
    def n_stream(self) -> int:
        return self.base.n_stream

    @property
    def size(self) -> int:
        return self.base.size

    @property
    def size_swa(self) -> int:
        return self.swa.size

    @property
    def n_seq(self) -> int:
        return self.base.n_seq

    def used(self, stream: int) -> int:
        return self.base.used(stream)

    def head(self, stream: int) -> int:
        return self.base.head(stream)

    def used_max_p1(self, stream: int) -> int:
        return self.base.used_max_p1(stream)

    def cells(self, stream: int):
        return self.base.cells(stream)

    def cell_arrays(self, stream: int) -> dict:
        return self.base.cell_arrays(stream)

    # ------------------------------------------------------------------ position queries (SWA view)
    @_locked
    def seq_pos_min(self, s: int) -> int:
        """As llama.cpp: the sliding cache's smallest position of s (-1 if none)."""
        return self.swa.seq_pos_min(s)

    @_locked
    def seq_pos_max(self, s: int) -> int:
        """As llama.cpp: the sliding cache's largest position of s (-1 if none)."""
        return self.swa.seq_pos_max(s)

    @_locked
    def seq_pos_bounds(self, n: int) -> Tuple[np.ndarray, np.ndarray]:
        """(int32[n] min, int32[n] max) of sequences 0..n-1 in the sliding cache (one C call)."""
        return self.swa.seq_pos_bounds(n)

    # ------------------------------------------------------------------ rewind safety
    def _window_start(self, p: int) -> int:
        """Smallest key position the token at position p may attend in the sliding layers."""
        n = self.n_swa
        if self.swa_type == "chunked":
            return (p // n) * n
        if self.swa_type == "symmetric":
            return p - n // 2
        return p - n + 1

    def _first_start_at_least(self, c: int) -> int:
        """Smallest p whose window starts at or after position c."""
        n = self.n_swa
        if self.swa_type == "chunked":
            return -(-c // n) * n
        if self.swa_type == "symmetric":
            return c + n // 2
        return c + n - 1

    @_locked
    def seq_rewind_min(self, s: int) -> int:
        """How far back sequence s can be rewound: the smallest p0 such that seq_rm(s, p0, -1) leaves s
        able to continue at p0 (its window fully held by the sliding cache). seq_rm(s, p0 <= its first
        position, -1), which removes it entirely, is always allowed. -1 when s holds nothing."""
        bmin, bmax = self.base.seq_pos_min(s), self.base.seq_pos_max(s)
        if bmax < 0:
            return -1
        c = self.swa.seq_pos_min(s)
        if c < 0:
            return bmax + 1                      # nothing left in the window: only whole removal
        if c <= bmin:
            return bmin                          # nothing evicted
        return min(max(self._first_start_at_least(c), bmin), bmax + 1)

    @_locked
    def window_hole(self, s: int, p: int, exact: bool = True) -> int:
        """A position in the window of a token of s at p that the full cache holds and the sliding cache
        lost (-1 if none). exact: every full-cache position of the window is looked up (one C call,
        O(window log n)), used by the sequence operations; otherwise only the smallest one (O(log n)),
        which is exact while the sliding cache holds the full cache's positions from a cut-off on (what
        decodes and checked sequence operations keep): the per-decode check."""
        t = max(self._window_start(p), 0)
        if exact:
            return self.base.missing_in(self.swa, s, t, p)
        q = self.base.seq_pos_ge(s, t)
        if q < 0 or q >= p:
            return -1
        return q if self.swa.seq_pos_ge(s, q) != q else -1

    def _rewind_error(self, s: int, p: int, hole: int, first_available: int, what: str,
                      rmin: Optional[int] = None) -> RewindError:
        rmin = self.seq_rewind_min(s) if rmin is None else rmin
        avail = (f"its first position still available there is {first_available}" if first_available >= 0
                 else "it has no position left there")
        return RewindError(
            f"{what}: sequence {s} would continue at position {p}, whose sliding window needs position {hole}, "
            f"but the sliding-window cache (n_swa = {self.n_swa}) has already evicted it ({avail}); "
            f"rewind sequence {s} no further back than position {rmin} (memory.seq_rewind_min({s})), "
            f"or remove it entirely (seq_rm({s}, -1, -1)); nothing was changed",
            seq_id=s, first_available=first_available, rewind_min=rmin)

    def _candidates(self) -> List[int]:
        """Sequences of which the sliding cache holds fewer cells than the full cache: only they can have a
        hole (the sliding cache's cells of a sequence are a subset of the full cache's)."""
        n = self.base.n_seq
        return np.flatnonzero(self.base.seq_counts(n) != self.swa.seq_counts(n)).tolist()

    def _check_windows(self, seqs, before: dict, what: str) -> None:
        """Raises RewindError for the first sequence of `seqs` whose next token's window has a hole; the
        error reports the state `before` the operation ({s: (first available, rewind_min)})."""
        for s in seqs:
            p = self.base.seq_pos_max(s) + 1
            if p <= 0:
                continue
            hole = self.window_hole(s, p)
            if hole >= 0:
                first, rmin = before.get(s, (self.swa.seq_pos_min(s), None))
                raise self._rewind_error(s, p, hole, first, what, rmin)

    # ------------------------------------------------------------------ sequence operations (both caches)
    def _mirror(self, what: str, op, seqs=None):
        """Runs op(cache) on the full cache, then the sliding one, inside one transaction of both; then checks
        the windows of `seqs` (None: every sequence with evictions). Any failure rolls both back."""
        before = {s: (self.swa.seq_pos_min(s), self.seq_rewind_min(s))
                  for s in (self._candidates() if seqs is None else seqs)}
        b, w = self.base, self.swa
        with b.transaction(), w.transaction():     # the sliding cache's closes first, either way
            ret = op(b)
            op(w)
            self._check_windows(self._candidates() if seqs is None else seqs, before, what)
        return ret

    def _seq(self, s) -> int:
        return _int("seq_id", s)

    @_locked
    def seq_rm(self, s: int, p0: int = -1, p1: int = -1) -> bool:
        """Removes s (-1: every seq) from [p0, p1) in both caches. RewindError (nothing changed) when what
        is left of a sequence could only continue with positions the sliding cache evicted."""
        s, p0, p1 = _int("seq_id", s), _int("p0", p0), _int("p1", p1)
        self._mirror(f"seq_rm({s}, {p0}, {p1})", lambda kv: kv.seq_rm(s, p0, p1), None if s == -1 else [s])
        return True

    @_locked
    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        src, dst, p0, p1 = self._seq(src), self._seq(dst), _int("p0", p0), _int("p1", p1)
        self._mirror(f"seq_cp({src}, {dst}, {p0}, {p1})", lambda kv: kv.seq_cp(src, dst, p0, p1), [dst])

    @_locked
    def seq_keep(self, s: int) -> None:
        s = self._seq(s)
        self._mirror(f"seq_keep({s})", lambda kv: kv.seq_keep(s), [s])

    @_locked
    def seq_add(self, s: int, p0: int, p1: int, delta: int) -> None:
        s, p0, p1, delta = self._seq(s), _int("p0", p0), _int("p1", p1), _int("delta", delta)
        # a cell moves for all its sequences: every sequence sharing one with s is checked (None: all with evictions)
        self._mirror(f"seq_add({s}, {p0}, {p1}, {delta})", lambda kv: kv.seq_add(s, p0, p1, delta), None)

    @_locked
    def seq_div(self, s: int, p0: int, p1: int, d: int) -> None:
        s, p0, p1, d = self._seq(s), _int("p0", p0), _int("p1", p1), _int("d", d)
        self._mirror(f"seq_div({s}, {p0}, {p1}, {d})", lambda kv: kv.seq_div(s, p0, p1, d), None)

    @_locked
    def clear(self) -> None:
        self.base.clear()
        self.swa.clear()

    # ------------------------------------------------------------------ pending update / snapshots
    @_locked
    def has_pending_update(self) -> bool:
        return self.base.has_pending_update() or self.swa.has_pending_update()

    @_locked
    def has_shift(self, stream: int) -> bool:
        return self.base.has_shift(stream) or self.swa.has_shift(stream)

    @_locked
    def snapshot(self) -> ISWASnapshot:
        return ISWASnapshot(self.base.snapshot(), self.swa.snapshot())

    @_locked
    def restore(self, snap: ISWASnapshot) -> None:
        self.base.restore(snap.base)
        self.swa.restore(snap.swa)

    @_locked
    def equals(self, snap: ISWASnapshot) -> bool:
        return self.base.equals(snap.base) and self.swa.equals(snap.swa)

    # ------------------------------------------------------------------ the memory protocol
    def _prepare_both(self, ubs, split: str) -> MemoryPlan:
        bp = self.base.prepare(ubs, split)
        try:
            sp = self.swa.prepare(ubs, split)
        except BaseException:
            self.base.drop_plan()
            raise
        plan = MemoryPlan(ubs, self, split)
        self._plans = (plan, bp, sp)
        return plan

    @_locked
    def init_batch(self, alloc, n_ubatch: int, embd_all: bool = False, *, whole_seqs: bool = False) -> MemoryPlan:
        """One plan for both caches (docs/llama-cpp-behaviours.md §M4.3), after the rewind check of the batch's
        sequences."""
        if self.closed:
            raise UbatchError("the KV cache is closed")
        self._plans = None
        for s in self._candidates():              # only sequences the window cut (cheap check, see window_hole)
            p, _ = alloc.seq_pos_range(s)
            if p >= 0:
                hole = self.window_hole(s, p, exact=False)
                if hole >= 0:
                    raise self._rewind_error(s, p, hole, self.swa.seq_pos_min(s), "decode")
        split, ubs = self._split(alloc, n_ubatch, whole_seqs)
        if split != "simple":
            return self._prepare_both(ubs, split)
        try:                                       # unified: split_simple, then split_equal (llama.cpp)
            return self._prepare_both(ubs, split)
        except KVCacheFullError:
            return self._prepare_both(split_all(alloc, n_ubatch, "equal"), "equal")

    def _split(self, alloc, n_ubatch: int, whole_seqs: bool):
        """(split name, ubatches) of the first attempt: a single cache's rule (protocol.cache_split)."""
        if whole_seqs:
            return "seq", whole_seqs_split(alloc, n_ubatch)
        check_coupled(alloc, self.n_stream)
        split = cache_split(self.n_stream)
        return split, split_all(alloc, n_ubatch, split)

    def _own(self, plan: MemoryPlan) -> Tuple[MemoryPlan, MemoryPlan]:
        """The caches' plans behind `plan` (CallOrderError when it is not the current one)."""
        p = self._plans
        if p is None or p[0] is not plan or not self.base.owns(p[1]) or not self.swa.owns(p[2]):
            raise CallOrderError("this plan is not the memory's current plan (call init_batch again)")
        return p[1], p[2]

    @_locked
    def begin(self, plan: MemoryPlan) -> MemoryUpdate:
        """Opens the transaction of both caches; hands out both pending updates (taken inside it)."""
        bp, sp = self._own(plan)
        u = self.base.begin(bp)
        try:
            w = self.swa.begin(sp)
        except BaseException:
            self.base.rollback(bp)
            raise
        return MemoryUpdate(u.copies, u.shift, w.copies, w.shift)

    @_locked
    def apply(self, plan: MemoryPlan, i: int) -> None:
        """apply_ubatch of ubatch i: the full cache, then the sliding cache (llama.cpp's order)."""
        bp, sp = self._own(plan)
        self.base.apply(bp, i)
        self.swa.apply(sp, i)

    @_locked
    def placement(self, plan: MemoryPlan, i: int, causal: bool = True, swa: bool = True) -> Placement:
        """The full cache's Placement of ubatch i, with the sliding cache's in .swa (swa=False: .swa None and
        .visible_window the full cache's lists with the window applied, for a runner that computes the
        sliding layers on the full cache)."""
        bp, sp = self._own(plan)
        place = self.base.placement(bp, i, causal)
        if swa:
            place.swa = self.swa.placement(sp, i, causal)
        else:
            place.visible_window = self.base.visible(bp, i, causal, n_kv=place.n_kv, swa_type=self.swa_type,
                                                     n_swa=self.n_swa)
        return place

    @_locked
    def mask(self, plan: MemoryPlan, i: int, causal: bool = True) -> np.ndarray:
        """The full cache's KQ mask of ubatch i (inspection; KVCache.mask)."""
        return self.base.mask(self._own(plan)[0], i, causal)

    @_locked
    def mask_swa(self, plan: MemoryPlan, i: int, causal: bool = True) -> np.ndarray:
        """The sliding cache's KQ mask of ubatch i (inspection)."""
        return self.swa.mask(self._own(plan)[1], i, causal)

    @_locked
    def commit(self, plan: MemoryPlan) -> None:
        """Closes the transaction of both caches, keeping every change (a cache's transaction is not
        tied to a plan: this never refuses, so a decode cannot be left half open)."""
        self.swa.commit(plan)
        self.base.commit(plan)

    @_locked
    def rollback(self, plan: MemoryPlan) -> None:
        """Undoes everything since begin(plan) in both caches exactly."""
        self.swa.rollback(plan)
        self.base.rollback(plan)

    def plan_record(self):
        """The full cache's plan slots (Context.last_placements)."""
        return self.base.plan_record()

    def swa_plan_record(self):
        """The sliding cache's plan slots (Context.last_placements_swa)."""
        return self.swa.plan_record()

    def describe(self) -> dict:
        """Both caches: cells per stream, used cells, window; which layers use the sliding one."""
        d = {"caches": self.base.describe("full")["caches"] + self.swa.describe("sliding")["caches"]}
        if self.swa_layers is not None:
            d["swa_layers"] = [i for i, x in enumerate(self.swa_layers) if x]
        return d

    def __repr__(self) -> str:
        if self.closed:
            return "KVCacheISWA(closed)"
        return (f"KVCacheISWA(n_stream={self.n_stream}, size={self.size}, size_swa={self.size_swa}, "
                f"n_swa={self.n_swa}, used={[self.used(s) for s in range(self.n_stream)]}, "
                f"used_swa={[self.swa.used(s) for s in range(self.n_stream)]})")


__all__ = ["ISWASnapshot", "KVCacheISWA", "swa_cache_size"]
