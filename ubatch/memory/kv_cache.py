"""KVCache: llama.cpp's KV cache cell metadata (llama_kv_cache), backed by one C handle.

Holds, per stream, the cells (position, sequence set, pending shift, 2-D ext), the used count and the
head. No K/V data: with a model attached the runner owns it and is told about stream copies and the
K-shift through `take_update()`.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ubatch._ffi import ffi, lib
from ubatch.common.errors import CallOrderError, KVCacheFullError, UbatchError
from ubatch.common.locking import locked as _locked
from ubatch.common.limits import KV_CELL_BYTES, LLAMA_MAX_SEQ, check_bytes
from ubatch.common.validate import I32_MAX as _I32_MAX, check_int as _int
from ubatch.memory.placement import Placement, VisibleCells
from ubatch.memory.protocol import (MemoryPlan, MemoryUpdate, cache_split, check_coupled, split_all,
                                    whole_seqs_split)

SWA_TYPES = {"none": 0, "standard": 1, "chunked": 2, "symmetric": 3}


def plan_slots(raw: Tuple[Tuple[Tuple[int, int], ...], bytes]) -> List[Tuple[np.ndarray, np.ndarray]]:
    """Unpacks KVCache.plan_record(): one (streams int32[ns], cells int32[ns, per]) per slot, read-only."""
    shapes, data = raw
    flat = np.frombuffer(data, np.int32)      # read-only view of the bytes
    out, off = [], 0
    for ns, per in shapes:
        out.append((flat[off:off + ns], flat[off + ns:off + ns + ns * per].reshape(ns, per)))
        off += ns * (1 + per)
    return out


def _seq_sets(seq: np.ndarray) -> List[Tuple[int, ...]]:
    """uint64[n, 4] bit sets -> list of ascending id tuples."""
    if len(seq) == 0:
        return []
    bits = np.unpackbits(seq.astype("<u8").view(np.uint8).reshape(len(seq), 32), axis=1, bitorder="little")
    rows, cols = np.nonzero(bits)
    split = np.searchsorted(rows, np.arange(1, len(seq)))
    return [tuple(int(c) for c in part) for part in np.split(cols, split)]


class KVSnapshot:
    """An opaque copy of a KVCache's whole state (see KVCache.snapshot)."""

    __slots__ = ("_h", "_geom")

    def __init__(self, h, geom: Tuple[int, int]) -> None:
        self._h = ffi.gc(h, lib.ub_kv_snap_free)
        self._geom = geom


class KVCache:
    """The KV cache (cell metadata). `n_stream` streams of `size` cells each.

    With one stream (unified) sequence ids 0..255 are valid (all map to stream 0); otherwise ids
    0..n_stream-1, id s living in stream s. An SWA window (swa_type "standard" / "chunked" /
    "symmetric", n_swa >= 1) lets find_slot reuse cells that slid out of their sequence's window and
    masks them in the KQ mask. Every method holds the cache's lock (shared with its Context, so a
    decode and sequence operations from other threads serialise; `lock` shares a given RLock, as the
    two-cache memory does for its pair). close() / `with` free the C state.
    """

    def __init__(self, n_stream: int, size: int, *, swa_type: str = "none", n_swa: int = 0,
                 lock: Optional[threading.RLock] = None) -> None:
        self._lock = threading.RLock() if lock is None else lock
        self._h = None
        n_stream = _int("n_stream", n_stream, 1, LLAMA_MAX_SEQ)
        size = _int("size", size, 1)
        if swa_type not in SWA_TYPES:
            raise ValueError(f"swa_type must be one of {sorted(SWA_TYPES)}, got {swa_type!r}")
        n_swa = _int("n_swa", n_swa, 0)
        if swa_type != "none" and n_swa < 1:
            raise ValueError(f"swa_type {swa_type!r} needs n_swa >= 1, got {n_swa}")
        if n_stream * size > _I32_MAX:
            raise ValueError(f"n_stream * size = {n_stream * size} cells is too large")
        check_bytes(f"a KV cache of {n_stream} x {size} cells", n_stream * size * KV_CELL_BYTES)
        h = lib.ub_kv_new(n_stream, size, SWA_TYPES[swa_type], n_swa)
        if h == ffi.NULL:
            raise MemoryError(f"cannot allocate a KV cache of {n_stream} x {size} cells")
        self._h = ffi.gc(h, lib.ub_kv_free)
        self._n_stream = n_stream
        self._size = size
        self._n_seq = lib.ub_kv_n_seq(h)
        self.swa_type = swa_type
        self.n_swa = n_swa if swa_type != "none" else 0
        self._i32 = ffi.new("int32_t *")
        self._vis_out = ffi.new("int32_t **")      # ub_kv_visible's outputs (block, cell count)
        self._vis_n = ffi.new("int64_t *")
        self._plan: list = []

    # ------------------------------------------------------------------ lifetime / errors
    @_locked
    def close(self) -> None:
        """Frees the C state now (idempotent)."""
        if self._h is not None:
            ffi.release(self._h)
            self._h = None

    def __enter__(self) -> "KVCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _handle(self):
        if self._h is None:
            raise UbatchError("the KV cache is closed")
        return self._h

    def _msg(self) -> str:
        return ffi.string(lib.ub_kv_error(self._h)).decode("utf-8", "replace")

    def _check(self, st: int) -> None:
        if st == lib.UB_OK:
            return
        if st == lib.UB_E_NOMEM:
            raise MemoryError(self._msg())
        if st == lib.UB_E_KVFULL:
            raise KVCacheFullError(self._msg())
        if st == lib.UB_E_ORDER:
            raise CallOrderError(self._msg())
        raise ValueError(self._msg())

    def _stream(self, stream) -> int:
        return _int("stream", stream, 0, self._n_stream - 1)

    # ------------------------------------------------------------------ geometry / queries
    @property
    def n_stream(self) -> int:
        return self._n_stream

    @property
    def size(self) -> int:
        """Cells per stream."""
        return self._size

    @property
    def n_seq(self) -> int:
        """Number of valid sequence ids (256 when unified, else n_stream)."""
        return self._n_seq

    @_locked
    def seq_pos_min(self, s: int) -> int:
        """Smallest position of sequence s in the cache, -1 if it has none."""
        s = _int("seq_id", s)
        self._check(lib.ub_kv_seq_pos_min(self._handle(), s, self._i32))
        return int(self._i32[0])

    @_locked
    def seq_pos_max(self, s: int) -> int:
        """Largest position of sequence s in the cache, -1 if it has none."""
        s = _int("seq_id", s)
        self._check(lib.ub_kv_seq_pos_max(self._handle(), s, self._i32))
        return int(self._i32[0])

    @_locked
    def seq_pos_ge(self, s: int, p: int) -> int:
        """Smallest position >= p of sequence s in the cache, -1 if none (O(log n))."""
        self._check(lib.ub_kv_seq_pos_ge(self._handle(), _int("seq_id", s), _int("p", p), self._i32))
        return int(self._i32[0])

    @_locked
    def seq_pos_lt(self, s: int, p: int) -> int:
        """Largest position < p of sequence s in the cache, -1 if none (O(log n))."""
        self._check(lib.ub_kv_seq_pos_lt(self._handle(), _int("seq_id", s), _int("p", p), self._i32))
        return int(self._i32[0])

    @_locked
    def seq_counts(self, n: int) -> np.ndarray:
        """int32[n]: how many cells hold each sequence 0..n-1 (one C call)."""
        n = _int("n", n, 0, LLAMA_MAX_SEQ)
        out = np.zeros(n, np.int32)
        if n:
            self._check(lib.ub_kv_seq_counts(self._handle(), n, ffi.from_buffer("int32_t[]", out)))
        return out

    @_locked
    def used(self, stream: int) -> int:
        """Number of non-empty cells of a stream."""
        return int(lib.ub_kv_used(self._handle(), self._stream(stream)))

    @_locked
    def head(self, stream: int) -> int:
        """Where the next slot search of this stream starts."""
        return int(lib.ub_kv_head(self._handle(), self._stream(stream)))

    @_locked
    def used_max_p1(self, stream: int) -> int:
        """Index of the last non-empty cell + 1 (0 when empty)."""
        return int(lib.ub_kv_used_max_p1(self._handle(), self._stream(stream)))

    @_locked
    def has_shift(self, stream: int) -> bool:
        """True while a K-shift (seq_add / seq_div) is pending for this stream."""
        return bool(lib.ub_kv_has_shift(self._handle(), self._stream(stream)))

    @_locked
    def cell_arrays(self, stream: int) -> dict:
        """The non-empty cells of a stream as arrays: index int32[n], pos int32[n], seq uint64[n, 4]
        (256-bit sets), shift int32[n], ext int32[n, 2] (x, y)."""
        st = self._stream(stream)
        size = self._size
        idx = np.empty(size, np.int32)
        pos = np.empty(size, np.int32)
        seq = np.empty((size, 4), np.uint64)
        shift = np.empty(size, np.int32)
        ext = np.empty((size, 2), np.int32)
        n = lib.ub_kv_cells(self._handle(), st, ffi.from_buffer("int32_t[]", idx), ffi.from_buffer("int32_t[]", pos),
                            ffi.from_buffer("uint64_t[]", seq), ffi.from_buffer("int32_t[]", shift),
                            ffi.from_buffer("int32_t[]", ext))
        if n < 0:
            raise ValueError(self._msg())
        return {"index": idx[:n].copy(), "pos": pos[:n].copy(), "seq": seq[:n].copy(), "shift": shift[:n].copy(),
                "ext": ext[:n].copy()}

    @_locked
    def cells(self, stream: int) -> List[Tuple[int, int, Tuple[int, ...]]]:
        """(cell index, pos, seq ids ascending) of every non-empty cell of a stream, by index."""
        a = self.cell_arrays(stream)
        sets = _seq_sets(a["seq"])
        return [(int(i), int(p), s) for i, p, s in zip(a["index"].tolist(), a["pos"].tolist(), sets)]

    # ------------------------------------------------------------------ sequence operations
    def _seq(self, s) -> int:
        return _int("seq_id", s)

    @_locked
    def seq_rm(self, s: int, p0: int = -1, p1: int = -1) -> bool:
        """Removes seq s (s = -1: every seq) from the cells with pos in [p0, p1). Returns True."""
        self._check(lib.ub_kv_seq_rm(self._handle(), self._seq(s), _int("p0", p0), _int("p1", p1)))
        self._plan = []
        return True

    @_locked
    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        """Adds dst to every cell of src in [p0, p1). Across streams only a full copy is possible
        (ValueError otherwise; llama.cpp aborts): dst's stream is replaced and a data copy queued."""
        self._check(lib.ub_kv_seq_cp(self._handle(), self._seq(src), self._seq(dst), _int("p0", p0), _int("p1", p1)))
        self._plan = []

    @_locked
    def seq_keep(self, s: int) -> None:
        """Removes every other sequence from s's stream."""
        self._check(lib.ub_kv_seq_keep(self._handle(), self._seq(s)))
        self._plan = []

    @_locked
    def seq_add(self, s: int, p0: int, p1: int, delta: int) -> None:
        """Adds delta to the positions of s in [p0, p1) (pending K-shift; cells below 0 are freed)."""
        self._check(lib.ub_kv_seq_add(self._handle(), self._seq(s), _int("p0", p0), _int("p1", p1),
                                      _int("delta", delta)))
        self._plan = []

    @_locked
    def seq_div(self, s: int, p0: int, p1: int, d: int) -> None:
        """Integer-divides the positions of s in [p0, p1) by d >= 1."""
        self._check(lib.ub_kv_seq_div(self._handle(), self._seq(s), _int("p0", p0), _int("p1", p1), _int("d", d)))
        self._plan = []

    @_locked
    def clear(self) -> None:
        """Empties every cell and resets the heads."""
        lib.ub_kv_clear(self._handle())
        self._plan = []

    # ------------------------------------------------------------------ pending update
    @property
    @_locked
    def n_pending_copies(self) -> int:
        return int(lib.ub_kv_n_copies(self._handle()))

    @_locked
    def has_pending_update(self) -> bool:
        """True when stream copies are queued or a K-shift is pending."""
        return bool(lib.ub_kv_has_update(self._handle()))

    @_locked
    def take_update(self) -> Tuple[List[Tuple[int, int]], Optional[np.ndarray]]:
        """Hands out and clears the pending update: the queued (src_stream, dst_stream) copies in order,
        and the per-cell shift int32[n_stream, size] (None when no stream has a pending shift)."""
        h = self._handle()
        if not lib.ub_kv_has_update(h):
            return [], None
        nc = lib.ub_kv_n_copies(h)
        copies = np.empty(max(2 * nc, 1), np.int32)
        shift = np.empty((self._n_stream, self._size), np.int32)
        self._check(lib.ub_kv_take_update(h, ffi.from_buffer("int32_t[]", copies), ffi.from_buffer("int32_t[]", shift),
                                          self._i32))
        pairs = [(int(copies[2 * k]), int(copies[2 * k + 1])) for k in range(nc)]
        return pairs, (shift if self._i32[0] else None)

    # ------------------------------------------------------------------ snapshots
    @_locked
    def snapshot(self) -> KVSnapshot:
        """A copy of the whole state (cells, heads, used counts, shifts, sequence bounds, copy queue)."""
        s = lib.ub_kv_snapshot(self._handle())
        if s == ffi.NULL:
            raise MemoryError("cannot snapshot the KV cache")
        return KVSnapshot(s, (self._n_stream, self._size))

    @_locked
    def restore(self, snap: KVSnapshot) -> None:
        """Puts the cache back into a snapshot's state."""
        self._check(lib.ub_kv_restore(self._handle(), snap._h))
        self._plan = []

    @_locked
    def equals(self, snap: KVSnapshot) -> bool:
        """True when the current state is identical to the snapshot."""
        return bool(lib.ub_kv_snap_equal(self._handle(), snap._h))

    # ------------------------------------------------------------------ state as bytes (ub_kv_state.h)
    @_locked
    def state_nbytes(self) -> int:
        """Bytes of state_bytes() for the current state."""
        return int(lib.ub_kv_state_size(self._handle()))

    @_locked
    def state_bytes(self) -> bytes:
        """The cell metadata as bytes (ubatch's own format, docs/compat.md "State format")."""
        h = self._handle()
        n = int(lib.ub_kv_state_size(h))
        buf = bytearray(n)
        if int(lib.ub_kv_state_write(h, ffi.from_buffer(buf), n)) != n:
            raise UbatchError("the KV cache state could not be written")
        return bytes(buf)

    @_locked
    def load_state(self, data) -> None:
        """Replaces the state with state_bytes() output (bytes-like). ValueError naming what is wrong (bad
        magic, version, geometry, length or cell contents), CallOrderError inside a transaction; the cache
        is unchanged on failure."""
        self._check(lib.ub_kv_state_read(self._handle(), ffi.from_buffer(data), len(data)))
        self._plan = []

    # ------------------------------------------------------------------ the memory protocol (protocol.py)
    @property
    def lock(self) -> threading.RLock:
        """The cache's lock (re-entrant); every method holds it. A Context shares it for its decode loop."""
        return self._lock

    @property
    def closed(self) -> bool:
        """True once close() freed the C state."""
        return self._h is None

    @_locked
    def seq_pos_bounds(self, n: int) -> Tuple[np.ndarray, np.ndarray]:
        """(int32[n] min, int32[n] max) of sequences 0..n-1 in one C call (-1 = empty / invalid id)."""
        n = _int("n", n, 0, LLAMA_MAX_SEQ)
        mn = np.empty(n, np.int32)
        mx = np.empty(n, np.int32)
        if n:
            self._check(lib.ub_kv_seq_pos_bounds(self._handle(), n, ffi.from_buffer("int32_t[]", mn),
                                                 ffi.from_buffer("int32_t[]", mx)))
        return mn, mx

    @_locked
    def init_batch(self, alloc, n_ubatch: int, embd_all: bool = False, *, whole_seqs: bool = False) -> MemoryPlan:
        """Splits the initialised batch the way this cache needs (whole_seqs: split_seq, every sequence in
        one ubatch) and dry-runs every ubatch. Raises SplitError / BatchError / KVCacheFullError; the cache
        is unchanged either way. embd_all (llama.cpp's argument) does not change a KV cache's split."""
        if whole_seqs:
            return self.prepare(whole_seqs_split(alloc, n_ubatch), "seq")
        check_coupled(alloc, self._n_stream)
        split = cache_split(self._n_stream)
        return self.prepare(split_all(alloc, n_ubatch, split), split)

    @_locked
    def prepare(self, ubatches: Sequence, split: str = "simple") -> MemoryPlan:
        """Dry run: finds a slot for every ubatch in turn (each placed before the next is searched), then
        restores the cache exactly; returns the plan (valid until the next prepare or sequence operation).
        Raises KVCacheFullError / ValueError with the cache unchanged and no plan. `split` only names how
        the ubatches were cut (MemoryPlan.split)."""
        h = self._handle()
        ubs = ubatches if isinstance(ubatches, list) else list(ubatches)
        ptrs = ffi.new("ub_ubatch *[]", [u._ptr for u in ubs]) if ubs else ffi.NULL
        failed = ffi.new("int32_t *")
        st = lib.ub_kv_prepare(h, ptrs, len(ubs), failed)
        self._plan = ubs if st == lib.UB_OK else []
        if st == lib.UB_E_KVFULL:
            raise KVCacheFullError(f"failed to find a memory slot for ubatch {failed[0]} of {len(ubs)}: {self._msg()}")
        self._check(st)
        return MemoryPlan(ubs, self, split)

    def drop_plan(self) -> None:
        """Forgets the current plan (a two-cache memory whose other cache refused the batch)."""
        self._plan = []

    def owns(self, plan: MemoryPlan) -> bool:
        """True when `plan` is this cache's current plan (from its last prepare, nothing changed since)."""
        return bool(plan.memory is self and self._plan and self._plan is plan.ubatches)

    def _own(self, plan: MemoryPlan, i: Optional[int] = None):
        """Checks that plan is current (CallOrderError) and, given i, returns its ubatch i (IndexError)."""
        if not self.owns(plan):
            raise CallOrderError("this plan is not the KV cache's current plan (call init_batch again)")
        if i is None:
            return None
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < len(plan.ubatches):
            raise IndexError(f"ubatch {i!r} is not in the plan (0..{len(plan.ubatches) - 1})")
        return plan.ubatches[int(i)]

    @_locked
    def begin(self, plan: MemoryPlan) -> MemoryUpdate:
        """Opens the transaction of a decode and hands out the pending update (taken inside it, so a
        rollback makes it pending again)."""
        self._own(plan)
        self._check(lib.ub_kv_begin(self._handle()))
        try:
            copies, shift = self.take_update()
        except BaseException:
            self._check(lib.ub_kv_rollback(self._h))
            raise
        return MemoryUpdate(copies, shift)

    @_locked
    def apply(self, plan: MemoryPlan, i: int) -> None:
        """apply_ubatch of the plan's ubatch i (inside begin ... commit / rollback)."""
        ub = self._own(plan, i)
        self._check(lib.ub_kv_apply(self._handle(), i, ub._ptr))

    @_locked
    def placement(self, plan: MemoryPlan, i: int, causal: bool = True, swa: bool = True) -> Placement:
        """Where the plan's ubatch i went and its rows' visible cells (call right after apply(plan, i)).
        `swa` is the two-cache memory's option; a single cache has no sliding placement (.swa stays None)."""
        ub = self._own(plan, i)
        strm, cells = self._slot(i)
        n_kv = lib.ub_kv_n_kv(self._h, i)
        return Placement(strm, cells, n_kv, visible=self._visible(i, ub, causal, n_kv, -1, 0))

    @_locked
    def visible(self, plan: MemoryPlan, i: int, causal: bool = True, *, n_kv: Optional[int] = None,
                swa_type: Optional[str] = None, n_swa: int = 0) -> VisibleCells:
        """The rows' visible-cell lists of the plan's ubatch i in the current state, written by one C call
        from the cells' positions and sequence sets (the KQ mask's rule: the row's primary sequence,
        causal, and this cache's sliding window, or the window swa_type / n_swa when given)."""
        ub = self._own(plan, i)
        n_kv = self.n_kv(plan, i) if n_kv is None else _int("n_kv", n_kv, 1, self._size)
        if swa_type is None:
            wt, nw = -1, 0
        elif swa_type in SWA_TYPES:
            wt, nw = SWA_TYPES[swa_type], _int("n_swa", n_swa, 0)
        else:
            raise ValueError(f"swa_type must be one of {sorted(SWA_TYPES)}, got {swa_type!r}")
        return self._visible(i, ub, causal, n_kv, wt, nw)

    def _visible(self, i: int, ub, causal: bool, n_kv: int, wt: int, nw: int) -> VisibleCells:
        """ub_kv_visible of plan slot i: the lists in one C-allocated block, viewed without a copy (freed
        with the last array viewing it). The caller holds the lock and checked the plan."""
        out, total = self._vis_out, self._vis_n
        self._check(lib.ub_kv_visible(self._handle(), i, ub._ptr, 1 if causal else 0, n_kv, wt, nw, out, total))
        n, t = int(ub.n_tokens), int(total[0])
        blk = ffi.gc(out[0], lib.ub_kv_vis_free)
        flat = np.frombuffer(ffi.buffer(blk, 4 * (2 * n + 1 + t)), np.int32)
        flat.flags.writeable = False
        return VisibleCells(flat[:n], flat[n:2 * n + 1], flat[2 * n + 1:])

    @_locked
    def mask(self, plan: MemoryPlan, i: int, causal: bool = True, out: Optional[np.ndarray] = None) -> np.ndarray:
        """float32[ns, per, n_kv] KQ mask of the plan's ubatch i in the current state (one C call): 0 where
        a row may attend a cell, -inf elsewhere. An inspection helper (the decode uses `visible`)."""
        ub = self._own(plan, i)
        h = self._handle()
        ns, per = lib.ub_kv_plan_ns(h, i), lib.ub_kv_plan_per(h, i)
        n_kv = self.n_kv(plan, i)
        if out is None:
            out = np.empty((ns, per, n_kv), np.float32)
        elif out.shape != (ns, per, n_kv) or out.dtype != np.float32 or not out.flags.c_contiguous:
            raise ValueError(f"mask buffer must be C-contiguous float32{(ns, per, n_kv)}")
        self._check(lib.ub_kv_mask(h, i, ub._ptr, 1 if causal else 0, ffi.from_buffer("float[]", out),
                                   n_kv))
        return out

    @_locked
    def n_kv(self, plan: MemoryPlan, i: int) -> int:
        """llama.cpp's n_kv of the plan's ubatch i in the current state."""
        self._own(plan, i)
        n = lib.ub_kv_n_kv(self._handle(), i)
        if n < 0:
            raise CallOrderError(f"no planned slot {i}")
        return int(n)

    @_locked
    def commit(self, plan: MemoryPlan) -> None:
        """Closes the transaction opened by begin, keeping every change (not tied to the plan)."""
        self._check(lib.ub_kv_commit(self._handle()))

    @_locked
    def rollback(self, plan: MemoryPlan) -> None:
        """Undoes everything since begin(plan) exactly (cells, heads, used counts, shifts, copy queue)."""
        self._check(lib.ub_kv_rollback(self._handle()))

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """`with kv.transaction():` - every change inside is kept when the block ends normally and undone
        exactly (the C journal) when it raises. Not re-entrant (a nested one raises ValueError)."""
        with self._lock:
            self._check(lib.ub_kv_begin(self._handle()))
            try:
                yield
            except BaseException:
                self._check(lib.ub_kv_rollback(self._h))
                raise
            self._check(lib.ub_kv_commit(self._h))

    @_locked
    def missing_in(self, other: "KVCache", s: int, t: int, p: int) -> int:
        """The smallest position of sequence s in [t, p) that this cache holds and `other` does not, -1 when
        `other` holds every one (the two-cache memory's window check; one C call over this cache's map)."""
        if not isinstance(other, KVCache):
            raise TypeError(f"other must be a KVCache, got {type(other).__name__}")
        self._check(lib.ub_kv_window_hole(self._handle(), other._handle(), _int("seq_id", s), _int("t", t),
                                          _int("p", p), self._i32))
        return int(self._i32[0])

    def swa_plan_record(self) -> None:
        """A single cache has no sliding cache."""
        return None

    def plan_record(self) -> Tuple[Tuple[Tuple[int, int], ...], bytes]:
        """The current plan's slots as (((ns, per) per slot), bytes of its int32 data), a cheap copy to
        unpack later with plan_slots(). The caller holds the lock (Context.decode does). The slots lie back
        to back in C (strm then idxs, slot after slot); checked, else they are copied one by one."""
        h = self._handle()
        n = lib.ub_kv_plan_n(h)
        if n == 0:
            return (), b""
        shapes = tuple((lib.ub_kv_plan_ns(h, i), lib.ub_kv_plan_per(h, i)) for i in range(n))
        ns, per = shapes[-1]
        base = lib.ub_kv_plan_strm(h, 0)
        total = lib.ub_kv_plan_idxs(h, n - 1) + ns * per - base
        if total == sum(a * (1 + b) for a, b in shapes):
            return shapes, ffi.buffer(base, 4 * total)[:]
        parts = []
        for i, (ns, per) in enumerate(shapes):
            parts.append(ffi.buffer(lib.ub_kv_plan_strm(h, i), 4 * ns)[:])
            parts.append(ffi.buffer(lib.ub_kv_plan_idxs(h, i), 4 * ns * per)[:])
        return shapes, b"".join(parts)

    @_locked
    def describe(self, name: str = "kv") -> dict:
        """What ctx.memory reports: one entry per cache (here one, called `name`)."""
        return {"caches": [{"name": name, "n_stream": self._n_stream, "size": self._size, "swa_type": self.swa_type,
                            "n_swa": self.n_swa, "used": [self.used(s) for s in range(self._n_stream)]}]}

    # ------------------------------------------------------------------ internals
    def _slot(self, i: int) -> Tuple[np.ndarray, np.ndarray]:
        h = self._handle()
        ns, per = lib.ub_kv_plan_ns(h, i), lib.ub_kv_plan_per(h, i)
        if ns == 0:
            raise CallOrderError(f"no planned slot {i}")
        strm = np.frombuffer(ffi.buffer(lib.ub_kv_plan_strm(h, i), 4 * ns), np.int32).copy()
        cells = np.frombuffer(ffi.buffer(lib.ub_kv_plan_idxs(h, i), 4 * ns * per), np.int32).reshape(ns, per).copy()
        return strm, cells

    @_locked
    def __repr__(self) -> str:
        if self._h is None:
            return "KVCache(closed)"
        used = [self.used(s) for s in range(self._n_stream)]
        return f"KVCache(n_stream={self._n_stream}, size={self._size}, used={used})"


__all__ = ["KVCache", "KVSnapshot", "SWA_TYPES"]
