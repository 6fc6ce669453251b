"""BatchAllocator: validation and splitting (llama.cpp's llama_batch_allocr), backed by one C handle."""
from __future__ import annotations

import threading
from typing import List, Optional

import numpy as np

from ubatch.batch import debug as _debug
from ubatch._ffi import ffi, lib
from ubatch.batch.container import Batch
from ubatch.common.errors import BatchError, CallOrderError, SplitError, UbatchError
from ubatch.common.limits import LLAMA_MAX_SEQ
from ubatch.common.validate import I32_MAX as _I32_MAX, check_int
from ubatch.batch.ubatch_view import UBatch, c_array

_SPLIT_KINDS = {"simple": 0, "equal": 1, "seq": 2}
_STATUS_ERRORS = {lib.UB_E_BATCH: BatchError, lib.UB_E_SPLIT: SplitError, lib.UB_E_ARG: ValueError,
                  lib.UB_E_ORDER: CallOrderError}


def _int_arg(name: str, v) -> int:
    return check_int(name, v, None, None)      # type check only; ranges are checked by the caller


def seq_pos_bounds(memory, n_seq_max: int):
    """(int32[n_seq_max] min, int32[n_seq_max] max) from a memory's bulk `seq_pos_bounds` (the memory
    protocol's; the built-in caches: O(1) per sequence in C), checked."""
    mn, mx = memory.seq_pos_bounds(n_seq_max)
    return _bounds("memory.seq_pos_bounds()[0]", mn, n_seq_max), _bounds("memory.seq_pos_bounds()[1]", mx, n_seq_max)


def _ask(name: str, fn, ids_c, n: int, n_seq_max: int):
    """int32_t[n_seq_max] (cffi, owned): fn(s) for the n seq ids in ids_c (int32_t[]), -1 elsewhere. The
    answers cross to C as one int64 array, checked there; a bad one is named by _bound_int."""
    present = ffi.unpack(ids_c, n)
    vals = [fn(s) for s in present]
    out = ffi.new("int32_t[]", n_seq_max)
    try:
        bad = lib.ub_alloc_fill_bounds(out, n_seq_max, ids_c, ffi.new("int64_t[]", vals), n)
    except (TypeError, OverflowError):      # not an integer, or beyond int64
        bad = 0
    if bad >= 0:
        for s, v in zip(present, vals):
            _bound_int(name, s, v)              # raises naming the first culprit
    return out


def ask_memory(memory, batch: Batch, n_seq_max: int):
    """llama.cpp's rule for a plain memory object: seq_pos_max for the sequences in the batch (all of
    [0, n_seq_max) when positions are automatic), seq_pos_min only for the coupled ones (the only check
    that reads it). Returns (min int32_t[n_seq_max] or None, max int32_t[n_seq_max]) as cffi arrays; one C
    pass finds the ids, one fills and checks the arrays (no numpy on this path: its per-call overhead
    dominated)."""
    ids = ffi.new("int32_t[]", 2 * LLAMA_MAX_SEQ)
    n_cpl = ffi.new("int32_t *")
    n = lib.ub_alloc_batch_seqs(batch._c_view(), n_seq_max, ids, ids + LLAMA_MAX_SEQ, n_cpl)
    if batch._pos is None:                      # automatic positions: every sequence's next position
        present = ffi.new("int32_t[]", list(range(n_seq_max)))
        mx = _ask("memory.seq_pos_max", memory.seq_pos_max, present, n_seq_max, n_seq_max)
    else:
        mx = _ask("memory.seq_pos_max", memory.seq_pos_max, ids, n, n_seq_max)
    mn = (_ask("memory.seq_pos_min", memory.seq_pos_min, ids + LLAMA_MAX_SEQ, n_cpl[0], n_seq_max)
          if n_cpl[0] else None)
    return mn, mx


def _bound_int(name: str, s: int, v) -> int:
    """One position bound reported by a memory: an int (a Python bool counts as 0 / 1, as in Python) in
    [-1, INT32_MAX] (-1 = empty)."""
    if isinstance(v, np.bool_) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name}({s}) returned {type(v).__name__}, expected an int")
    if not -1 <= int(v) <= _I32_MAX:
        raise ValueError(f"{name}({s}) = {int(v)} is outside [-1, {_I32_MAX}]")
    return int(v)


def _bounds(name: str, vals, n_seq_max: int) -> np.ndarray:
    """int32[n_seq_max] from a memory's bulk bounds, checked like _bound_int."""
    if type(vals) is np.ndarray and vals.dtype == np.int32 and vals.shape == (n_seq_max,):
        # the KV cache's fast path: int32 already (values < -1 would only act like "empty" in C)
        return np.ascontiguousarray(vals)
    try:
        arr = np.asarray(vals)
    except (ValueError, TypeError, OverflowError) as e:
        raise TypeError(f"{name} is not an integer array: {e}") from None
    if arr.shape != (n_seq_max,):
        raise ValueError(f"{name} has shape {arr.shape}, expected ({n_seq_max},)")
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} has dtype {arr.dtype}, expected integers")
    bad = np.flatnonzero((arr < -1) | (arr > _I32_MAX))
    if bad.size:
        raise ValueError(f"{name}[{int(bad[0])}] = {int(arr[bad[0]])} is outside [-1, {_I32_MAX}]")
    return np.ascontiguousarray(arr, dtype=np.int32)


class BatchAllocator:
    """Validates a Batch (init) and cuts it into UBatches (split_simple / split_equal / split_seq).

    One C handle per allocator; calls are serialised by a lock, so sharing it between threads is safe
    (though rarely useful). `close()` frees the handle now; UBatches already returned stay valid.
    """

    def __init__(self, n_pos_per_embd: int = 1) -> None:
        n_pos_per_embd = _int_arg("n_pos_per_embd", n_pos_per_embd)
        if n_pos_per_embd not in (1, 3, 4):
            raise ValueError(f"n_pos_per_embd must be 1, 3 or 4, got {n_pos_per_embd}")
        h = lib.ub_alloc_new(n_pos_per_embd)
        if h == ffi.NULL:
            raise MemoryError("cannot allocate a batch allocator")
        self._h = ffi.gc(h, lib.ub_alloc_free)
        self._lock = threading.Lock()
        self._status = ffi.new("int32_t *")      # reused by every split (guarded by the lock)
        self._bulk = (ffi.new("ub_ubatch **[1]"), ffi.new("int32_t *"))   # split_all's out-parameters
        self._inited = False
        self.n_pos_per_embd = n_pos_per_embd
        self.warning: str = ""

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Frees the C state now (idempotent). UBatches already returned stay valid."""
        with self._lock:
            if self._h is not None:
                ffi.release(self._h)
                self._h = None
                self._inited = False

    def __enter__(self) -> "BatchAllocator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _handle(self):
        if self._h is None:
            raise UbatchError("the allocator is closed")
        return self._h

    def _raise(self, status: int) -> None:
        msg = ffi.string(lib.ub_alloc_error(self._h)).decode("utf-8", "replace")
        if status == lib.UB_E_NOMEM:
            raise MemoryError(msg)
        cls = _STATUS_ERRORS.get(status, UbatchError)
        raise cls(msg)

    # ------------------------------------------------------------------ init
    def init(self, batch: Batch, *, n_seq_max: int, n_vocab: Optional[int] = None, output_all: bool = False,
             memory=None) -> None:
        """Validates and normalises `batch` (llama.cpp's init). Raises BatchError naming the culprit;
        on failure the allocator keeps its previous batch and split state."""
        if not isinstance(batch, Batch):
            raise TypeError(f"batch must be a ubatch.Batch, got {type(batch).__name__}")
        if type(n_seq_max) is not int:
            n_seq_max = _int_arg("n_seq_max", n_seq_max)
        if n_vocab is None:
            n_vocab = -1                      # C: no token range check
        else:
            if type(n_vocab) is not int:
                n_vocab = _int_arg("n_vocab", n_vocab)
            if n_vocab < 0 or n_vocab > _I32_MAX:   # 0 is llama.cpp's empty vocabulary: every token invalid
                raise ValueError(f"n_vocab must be in [0, {_I32_MAX}] (or None: no check), got {n_vocab}")
        if batch.n_tokens == 0:
            raise BatchError("n_tokens == 0: the batch is empty")
        mn = mx = ffi.NULL
        keep = None
        if memory is not None and 1 <= n_seq_max <= LLAMA_MAX_SEQ:
            if callable(getattr(memory, "seq_pos_bounds", None)):   # the memory protocol's bulk query
                lo, hi = seq_pos_bounds(memory, n_seq_max)
                keep = (lo, hi)
                mn, mx = ffi.from_buffer("int32_t[]", lo), ffi.from_buffer("int32_t[]", hi)
            else:
                mn, mx = ask_memory(memory, batch, n_seq_max)    # cffi arrays, kept alive by these names
                if mn is None:
                    mn = ffi.NULL
        if not -(2**31) <= n_seq_max <= _I32_MAX:   # C sees int32: name the caller's value here
            raise BatchError(f"n_seq_max = {n_seq_max} is outside [1, {LLAMA_MAX_SEQ}]")
        n_seq_c = n_seq_max
        with self._lock:
            h = self._handle()
            st = lib.ub_alloc_init(h, batch._c_view(), n_vocab, n_seq_c, 1 if output_all else 0, mn, mx)
            if st != lib.UB_OK:
                self._raise(st)
            self._inited = True
            w = lib.ub_alloc_warning(h)
            self.warning = ffi.string(w).decode() if w[0] != b"\0" else ""
        del keep
        if _debug.LEVEL:
            _debug.dump_init(self, batch)

    # ------------------------------------------------------------------ splits
    def _split_args(self, n_ubatch) -> int:
        if type(n_ubatch) is int and 0 < n_ubatch <= _I32_MAX:     # the common case, checked cheaply
            return n_ubatch
        n_ubatch = _int_arg("n_ubatch", n_ubatch)
        if n_ubatch < 1:
            raise ValueError(f"n_ubatch must be >= 1, got {n_ubatch}")
        return min(n_ubatch, _I32_MAX)

    def _split_handle(self):
        """The handle for a split (call with the lock held): open and inited, else UbatchError."""
        h = self._h
        if h is None or not self._inited:
            self._handle()
            raise CallOrderError("split called before a successful init")
        return h

    def _wrap(self, ptr, status) -> Optional[UBatch]:
        if not ptr:                                   # NULL: nothing left, or an error in status
            if status[0] != lib.UB_OK:
                self._raise(status[0])
            return None
        ub = UBatch(ptr)
        if _debug.LEVEL:
            _debug.dump_ubatch(self, ub)
        return ub

    def split_all(self, strategy: str, n_ubatch: int, *, sequential: bool = False, n_keep_tail: int = 0,
                  strict: bool = True) -> List[UBatch]:
        """The whole split loop in one C call (llama.cpp's memory->init_batch loop): split_reset, then
        `strategy` ("simple", "equal" or "seq"; the keywords as split_equal) until nothing is left. Returns
        the ubatches in split order. On failure raises as the single splits do and leaves the allocator
        split-reset (no ubatch of the failed plan survives)."""
        kind = _SPLIT_KINDS.get(strategy) if isinstance(strategy, str) else None
        if kind is None:
            raise ValueError(f"strategy must be one of {sorted(_SPLIT_KINDS)}, got {strategy!r}")
        n_ubatch = self._split_args(n_ubatch)
        n_keep_tail = _int_arg("n_keep_tail", n_keep_tail)
        if kind == 1 and not 0 <= n_keep_tail < n_ubatch:
            raise BatchError(f"n_keep_tail = {n_keep_tail} must be >= 0 and < n_ubatch = {n_ubatch}")
        with self._lock:
            h = self._split_handle()
            out, n_out = self._bulk
            st = lib.ub_alloc_split_all(h, kind, n_ubatch, 1 if sequential else 0, n_keep_tail, 1 if strict else 0,
                                        out, n_out)
            if st != lib.UB_OK:
                self._raise(st)
            arr, n = out[0], n_out[0]
            ptrs = ffi.unpack(arr, n) if n else []
            lib.ub_alloc_free_ubatch_array(arr)
        ubs = [UBatch(p) for p in ptrs]
        if _debug.LEVEL:
            for ub in ubs:
                _debug.dump_ubatch(self, ub)
        return ubs

    def split_reset(self) -> None:
        """Forgets every split since init (a new split loop starts over)."""
        with self._lock:
            h = self._handle()
            if not self._inited:
                raise CallOrderError("split_reset called before a successful init")
            lib.ub_alloc_split_reset(h)

    def split_simple(self, n_ubatch: int) -> Optional[UBatch]:
        """The next n_ubatch unused rows in batch order; None when nothing is left."""
        n_ubatch = self._split_args(n_ubatch)
        with self._lock:
            return self._wrap(lib.ub_alloc_split_simple(self._split_handle(), n_ubatch, self._status), self._status)

    def split_equal(self, n_ubatch: int, *, sequential: bool = False, n_keep_tail: int = 0,
                    strict: bool = True) -> Optional[UBatch]:
        """Disjoint sequence sets grown in lockstep (a rectangle n_seqs x n_seq_tokens).
        strict=True never exceeds n_ubatch tokens; strict=False reproduces llama.cpp's n_ubatch + 1."""
        n_ubatch = self._split_args(n_ubatch)
        n_keep_tail = _int_arg("n_keep_tail", n_keep_tail)
        if not 0 <= n_keep_tail < n_ubatch:
            raise BatchError(f"n_keep_tail = {n_keep_tail} must be >= 0 and < n_ubatch = {n_ubatch}")
        with self._lock:
            return self._wrap(lib.ub_alloc_split_equal(self._split_handle(), n_ubatch, 1 if sequential else 0,
                                                       n_keep_tail, 1 if strict else 0, self._status), self._status)

    def split_seq(self, n_ubatch: int) -> Optional[UBatch]:
        """One sequence set per ubatch, following subsets (shared prefixes first)."""
        n_ubatch = self._split_args(n_ubatch)
        with self._lock:
            return self._wrap(lib.ub_alloc_split_seq(self._split_handle(), n_ubatch, self._status), self._status)

    # ------------------------------------------------------------------ state
    @property
    def n_tokens(self) -> int:
        with self._lock:
            return lib.ub_alloc_n_tokens(self._handle())

    @property
    def n_used(self) -> int:
        with self._lock:
            return lib.ub_alloc_n_used(self._handle())

    @property
    def n_outputs(self) -> int:
        with self._lock:
            return lib.ub_alloc_n_outputs(self._handle())

    @property
    def out_ids(self) -> np.ndarray:
        """int32[n_out]: batch indices of the outputs, in the order they were emitted (a copy)."""
        with self._lock:
            h = self._handle()
            n = lib.ub_alloc_n_out_ids(h)
            return np.frombuffer(ffi.buffer(lib.ub_alloc_out_ids(h), 4 * n), dtype=np.int32).copy() if n else \
                np.zeros(0, np.int32)

    @property
    def has_coupled(self) -> bool:
        """True when some row carries more than one sequence id."""
        with self._lock:
            return bool(lib.ub_alloc_has_coupled(self._handle()))

    @property
    def pos(self) -> np.ndarray:
        """int32[n_pos, n_tokens]: the normalised positions (automatic ones filled in), a copy."""
        with self._lock:
            h = self._handle()
            n, npos = lib.ub_alloc_n_tokens(h), lib.ub_alloc_n_pos(h)
            if n == 0:
                return np.zeros((npos, 0), np.int32)
            return np.frombuffer(ffi.buffer(lib.ub_alloc_pos(h), 4 * n * npos), dtype=np.int32).reshape(npos, n).copy()

    @property
    def output(self) -> np.ndarray:
        """int8[n_tokens]: the normalised output flags (after the output_all override), a copy."""
        with self._lock:
            h = self._handle()
            n = lib.ub_alloc_n_tokens(h)
            return np.frombuffer(ffi.buffer(lib.ub_alloc_output(h), n), dtype=np.int8).copy() if n else np.zeros(0, np.int8)

    def seq_pos_range(self, s: int) -> tuple:
        """(min, max) section-0 position of seq s in the batch, (-1, -1) if absent."""
        s = _int_arg("seq id s", s)
        with self._lock:
            h = self._handle()
            if not 0 <= s < LLAMA_MAX_SEQ:
                return -1, -1
            return lib.ub_alloc_seq_pos_min(h, s), lib.ub_alloc_seq_pos_max(h, s)

    def __repr__(self) -> str:
        try:
            return f"BatchAllocator(n_tokens={self.n_tokens}, n_used={self.n_used}, n_outputs={self.n_outputs})"
        except UbatchError:
            return "BatchAllocator(closed)"


__all__ = ["BatchAllocator", "UBatch", "c_array"]
