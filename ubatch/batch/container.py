"""Batch: the input container (llama.cpp's llama_batch_ext).

Rows hold a token id and/or an embedding row, `n_pos_per_embd` position sections, a *set* of sequence
ids and an output flag. Storage is numpy arrays of fixed capacity (`n_tokens_max`), so the C view of
the batch (`ub_batch_in`) is built once and reused by every `BatchAllocator.init`.
"""
from __future__ import annotations

import itertools
import warnings
from typing import Iterable, Optional, Sequence, Union

import numpy as np

from ubatch._ffi import ffi
from ubatch.common.errors import BatchError
from ubatch.common.limits import MAX_TOKENS, check_bytes, fmt_bytes
from ubatch.common.params import LLAMA_TOKEN_NULL

KIND_TOKEN = 1
KIND_EMBD = 2
_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1

IntOrSeq = Union[int, Sequence[int]]



def batch_bytes(n_tokens_max: int, n_pos_per_embd: int = 1, n_embd: int = 0) -> int:
    """Bytes a Batch of this capacity allocates: token, pos, seq_off, seq_id (>= 8), output, kind, embd."""
    cap = n_tokens_max
    return cap * (4 + 4 * n_pos_per_embd + 1 + 1 + 4 * n_embd) + 4 * (cap + 1) + 4 * max(cap, 8)


def check_batch_size(n_tokens_max: int, n_pos_per_embd: int = 1, n_embd: int = 0) -> None:
    """Raises ValueError, naming the size a batch would need, when it exceeds MAX_TOKENS rows or the
    machine's physical memory (checked before anything is allocated)."""
    need = batch_bytes(n_tokens_max, n_pos_per_embd, n_embd)
    what = f"a batch of n_tokens_max = {n_tokens_max}, n_embd = {n_embd}"
    if n_tokens_max > MAX_TOKENS:
        raise ValueError(f"{what} would need {fmt_bytes(need)} ({need} bytes); at most {MAX_TOKENS} rows are supported")
    check_bytes(what, need)


def _as_int32(name: str, values, shape_desc: str) -> np.ndarray:
    """Converts integer data to int32, naming the first element that does not fit."""
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError, OverflowError) as e:   # ragged nesting, unconvertible objects
        raise TypeError(f"{name} must be an integer array {shape_desc}: {e}") from None
    if arr.dtype == np.int32:
        return np.ascontiguousarray(arr)
    if arr.size == 0:      # no values to convert (a cast of an empty complex array would warn)
        return np.zeros(arr.shape, np.int32)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must be an integer array {shape_desc}, got dtype {arr.dtype}")
    bad = np.flatnonzero((arr.ravel() < _I32_MIN) | (arr.ravel() > _I32_MAX))
    if bad.size:
        raise BatchError(f"{name}[{int(bad[0])}] = {int(arr.ravel()[bad[0]])} does not fit in int32")
    return np.ascontiguousarray(arr, dtype=np.int32)


def _check_int(name: str, v) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    v = int(v)
    if not _I32_MIN <= v <= _I32_MAX:
        raise BatchError(f"{name} = {v} does not fit in int32")
    return v


def _seq_list(seq_ids, row: int) -> list:
    if isinstance(seq_ids, (int, np.integer)) and not isinstance(seq_ids, (bool, np.bool_)):
        return [_check_int(f"seq_ids[{row}]", seq_ids)]
    try:
        ids = list(seq_ids)
    except TypeError:
        raise TypeError(f"seq_ids of row {row} must be an int or an iterable of ints, got {type(seq_ids).__name__}")
    return [_check_int(f"seq_ids[{row}][{k}]", s) for k, s in enumerate(ids)]


class Batch:
    """A batch of up to `n_tokens_max` rows (tokens and/or embedding rows)."""

    def __init__(self, n_tokens_max: int, *, n_pos_per_embd: int = 1, n_embd: int = 0) -> None:
        n_tokens_max = _check_int("n_tokens_max", n_tokens_max)
        n_pos_per_embd = _check_int("n_pos_per_embd", n_pos_per_embd)
        n_embd = _check_int("n_embd", n_embd)
        if n_tokens_max < 1:
            raise ValueError(f"n_tokens_max must be >= 1, got {n_tokens_max}")
        if n_pos_per_embd not in (1, 3, 4):
            raise ValueError(f"n_pos_per_embd must be 1, 3 or 4, got {n_pos_per_embd}")
        if n_embd < 0:
            raise ValueError(f"n_embd must be >= 0, got {n_embd}")
        check_batch_size(n_tokens_max, n_pos_per_embd, n_embd)
        cap = n_tokens_max
        self.n_tokens_max = cap
        self.n_pos_per_embd = n_pos_per_embd
        self.n_embd = n_embd
        self.n_tokens = 0
        self._token: Optional[np.ndarray] = np.zeros(cap, np.int32)
        self._embd: Optional[np.ndarray] = np.zeros((cap, n_embd), np.float32) if n_embd > 0 else None
        self._pos: Optional[np.ndarray] = np.zeros((n_pos_per_embd, cap), np.int32)
        self._seq_off: Optional[np.ndarray] = np.zeros(cap + 1, np.int32)
        self._seq_id: np.ndarray = np.zeros(max(cap, 8), np.int32)
        self._output: Optional[np.ndarray] = np.zeros(cap, np.int8)
        self._kind: Optional[np.ndarray] = np.zeros(cap, np.uint8)
        self._width_from_row = False
        self._cin = None

    # ------------------------------------------------------------------ building row by row
    def _check_room(self) -> int:
        if self.n_tokens >= self.n_tokens_max:
            raise BatchError(f"batch is full: n_tokens_max = {self.n_tokens_max}")
        if self._pos is None or self._seq_off is None or self._output is None or self._kind is None:
            raise BatchError("rows cannot be added to a batch built by from_arrays with automatic "
                             "positions/sequences/outputs; build a new Batch")
        return self.n_tokens

    def _put_common(self, i: int, pos, seq_ids, output: bool) -> None:
        if isinstance(pos, (int, np.integer)) and not isinstance(pos, (bool, np.bool_)):
            p = _check_int(f"pos of row {i}", pos)
            self._pos[:, i] = p
        else:
            try:
                pos_items = list(pos)
            except TypeError:
                raise TypeError(f"pos of row {i} must be an int or a sequence of {self.n_pos_per_embd} ints, "
                                f"got {type(pos).__name__}") from None
            ps = [_check_int(f"pos[{j}] of row {i}", v) for j, v in enumerate(pos_items)]
            if len(ps) != self.n_pos_per_embd:
                raise BatchError(f"row {i}: {len(ps)} position values given, the batch has "
                                 f"n_pos_per_embd = {self.n_pos_per_embd}")
            self._pos[:, i] = ps
        ids = _seq_list(seq_ids, i)
        if not ids:
            raise BatchError(f"row {i} has no sequence id")
        start = int(self._seq_off[i])
        need = start + len(ids)
        if need > self._seq_id.size:
            grown = np.zeros(max(need, 2 * self._seq_id.size), np.int32)
            grown[:start] = self._seq_id[:start]
            self._seq_id = grown
            self._cin = None
        self._seq_id[start:need] = ids
        self._seq_off[i + 1] = need
        self._output[i] = 1 if output else 0

    def add_token(self, token: int, pos: IntOrSeq, seq_ids: Union[int, Iterable[int]], output: bool = False) -> int:
        """Appends a token row; returns its row index."""
        i = self._check_room()
        tok = _check_int(f"token of row {i}", token)
        self._put_common(i, pos, seq_ids, output)
        self._token[i] = tok
        self._kind[i] = KIND_TOKEN if tok != LLAMA_TOKEN_NULL else 0   # llama.cpp: id -1 = no token id
        self.n_tokens = i + 1
        return i

    def add_embd(self, row, pos: IntOrSeq, seq_ids: Union[int, Iterable[int]], output: bool = False) -> int:
        """Appends an embedding row (float32[n_embd]); returns its row index."""
        i = self._check_room()
        try:
            vec = np.asarray(row)
        except (ValueError, TypeError, OverflowError) as e:
            raise TypeError(f"embedding row {i} must be a numeric array: {e}") from None
        if vec.dtype.kind not in "fiu":
            raise TypeError(f"embedding row {i} must be numeric, got dtype {vec.dtype}")
        width = self.n_embd
        if self._embd is None:
            # llama.cpp's container: an unset width (n_embd = 0) is fixed by the first embedding row
            if vec.ndim != 1 or vec.shape[0] < 1:
                raise BatchError(f"embedding row {i} has shape {vec.shape}; the first embedding row of a batch "
                                 f"created with n_embd = 0 sets the width and must be 1-D and non-empty")
            width = int(vec.shape[0])
            check_batch_size(self.n_tokens_max, self.n_pos_per_embd, width)
        if vec.shape != (width,):
            raise BatchError(f"embedding row {i} has shape {vec.shape}, expected ({width},) (the batch's "
                             f"embedding width{', set by its first embedding row' if self._embd is not None and self._width_from_row else ''})")
        with np.errstate(over="ignore", invalid="ignore"):
            vec = vec.astype(np.float32)
        if not np.isfinite(vec).all():
            raise BatchError(f"embedding row {i} has a non-finite value at column {int(np.flatnonzero(~np.isfinite(vec))[0])}")
        if self._embd is None:            # every check passed: only now fix the width
            self.n_embd = width
            self._embd = np.zeros((self.n_tokens_max, width), np.float32)
            self._width_from_row = True
            self._cin = None
        self._put_common(i, pos, seq_ids, output)
        self._embd[i] = vec
        self._kind[i] = KIND_EMBD
        self.n_tokens = i + 1
        return i

    def clear(self) -> None:
        """Removes every row (capacity is kept)."""
        self.n_tokens = 0

    # ------------------------------------------------------------------ building from arrays
    @classmethod
    def from_arrays(cls, *, tokens=None, embd=None, pos=None, seq_ids=None, output=None,
                    n_pos_per_embd: int = 1) -> "Batch":
        """Builds a batch from whole arrays (the legacy flat llama_batch layout).

        tokens int[n] | None; embd float32[n, n_embd] | None (at least one);
        pos int[n] or int[n_pos_per_embd, n] (section-major) or None = automatic positions at init;
        seq_ids int[n], int[n, k], a list of n iterables, or None = every row in seq 0;
        output bool/int[n] or None = only the last row (all rows when output_all).
        """
        if tokens is None and embd is None:
            raise BatchError("batch has neither token ids nor embeddings")
        tok = emb = None
        if tokens is not None:
            tok = _as_int32("tokens", tokens, "[n]")
            if tok.ndim != 1:
                raise BatchError(f"tokens must be 1-D, got shape {tok.shape}")
            n = tok.shape[0]
        if embd is not None:
            try:
                emb = np.asarray(embd)
            except (ValueError, TypeError, OverflowError) as e:
                raise TypeError(f"embd must be a float array [n, n_embd]: {e}") from None
            if emb.dtype.kind not in "fiu" or emb.dtype == np.bool_:
                raise TypeError(f"embd must be a float array [n, n_embd], got dtype {emb.dtype}")
            if emb.ndim != 2 or emb.shape[1] < 1:
                raise BatchError(f"embd must have shape [n, n_embd] with n_embd >= 1, got {emb.shape}")
            with np.errstate(over="ignore", invalid="ignore"):   # overflow to inf is reported just below
                emb = np.ascontiguousarray(emb, dtype=np.float32)
            if tok is not None and emb.shape[0] != n:
                raise BatchError(f"embd has {emb.shape[0]} rows but tokens has {n}")
            n = emb.shape[0]
            finite = np.isfinite(emb)
            if not finite.all():
                r, c = np.argwhere(~finite)[0]
                raise BatchError(f"embedding row {int(r)} has a non-finite value at column {int(c)}")
        if n == 0:
            raise BatchError("n_tokens == 0: the batch is empty")
        n_pos_per_embd = _check_int("n_pos_per_embd", n_pos_per_embd)
        b = cls(n, n_pos_per_embd=n_pos_per_embd, n_embd=0 if emb is None else emb.shape[1])
        b._token = tok
        b._embd = emb
        b._kind = None
        if pos is None:
            b._pos = None
        else:
            p = _as_int32("pos", pos, "[n] or [n_pos_per_embd, n]")
            if p.ndim == 1 and p.shape[0] == n:
                p = np.ascontiguousarray(np.broadcast_to(p, (n_pos_per_embd, n)))
            elif p.ndim != 2 or p.shape != (n_pos_per_embd, n):
                raise BatchError(f"pos must have shape ({n},) or ({n_pos_per_embd}, {n}), got {p.shape}")
            b._pos = p
        if seq_ids is None:
            b._seq_off = None
        else:
            b._seq_off, b._seq_id = _seq_arrays(seq_ids, n)
        if output is None:
            b._output = None
        else:
            try:
                o = np.asarray(output)
            except (ValueError, TypeError, OverflowError) as e:
                raise TypeError(f"output must be a bool or integer array [n]: {e}") from None
            if o.shape != (n,):
                raise BatchError(f"output must have shape ({n},), got {o.shape}")
            if o.dtype != np.bool_ and not np.issubdtype(o.dtype, np.integer):
                raise TypeError(f"output must be a bool or integer array, got dtype {o.dtype}")
            b._output = np.ascontiguousarray(o != 0, dtype=np.int8)
        b.n_tokens = n
        return b

    # ------------------------------------------------------------------ read access
    @property
    def token(self) -> Optional[np.ndarray]:
        if self._token is None or (self._kind is not None and not (self._kind[: self.n_tokens] & KIND_TOKEN).any()):
            return None
        return self._token[: self.n_tokens]

    @property
    def embd(self) -> Optional[np.ndarray]:
        if self._embd is None or (self._kind is not None and not (self._kind[: self.n_tokens] & KIND_EMBD).any()):
            return None
        return self._embd[: self.n_tokens]

    @property
    def pos(self) -> Optional[np.ndarray]:
        """int32[n_pos_per_embd, n_tokens] or None (automatic positions)."""
        return None if self._pos is None else self._pos[:, : self.n_tokens]

    @property
    def output(self) -> Optional[np.ndarray]:
        return None if self._output is None else self._output[: self.n_tokens]

    def seq_ids(self, i: int) -> list:
        """The ids of row i as given (set semantics are applied at init)."""
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"row index i must be an int, got {type(i).__name__}")
        if not 0 <= i < self.n_tokens:
            raise IndexError(f"row {i} out of range [0, {self.n_tokens})")
        if self._seq_off is None:
            return [0]
        return [int(x) for x in self._seq_id[self._seq_off[i]: self._seq_off[i + 1]]]

    def __len__(self) -> int:
        return self.n_tokens

    def __repr__(self) -> str:
        return f"Batch(n_tokens={self.n_tokens}, n_tokens_max={self.n_tokens_max}, n_pos_per_embd={self.n_pos_per_embd}, n_embd={self.n_embd})"

    # ------------------------------------------------------------------ the C view
    def _c_view(self):
        """The `ub_batch_in *` for this batch; built once, refreshed only when storage moved."""
        if self._cin is None:
            keep = []

            def ptr(ctype, arr):
                if arr is None:
                    return ffi.NULL
                buf = ffi.from_buffer(ctype, arr)
                keep.append(buf)
                return buf

            cin = ffi.new("ub_batch_in *")
            kind = self._kind
            cin.token = ptr("int32_t[]", self._token)
            cin.embd = ptr("float[]", self._embd)
            cin.pos = ptr("int32_t[]", self._pos)
            cin.pos_stride = 0 if self._pos is None else self._pos.shape[1]
            cin.n_pos = self.n_pos_per_embd
            cin.n_embd = self.n_embd
            cin.seq_off = ptr("int32_t[]", self._seq_off)
            cin.seq_id = ptr("int32_t[]", self._seq_id) if self._seq_off is not None else ffi.NULL
            cin.output = ptr("int8_t[]", self._output)
            cin.row_kind = ptr("uint8_t[]", kind)
            # the returned cdata itself pins the arrays it points into: an init running in another thread
            # keeps reading valid memory even if this batch regrows its storage (and drops _cin) meanwhile
            cin = ffi.gc(cin, lambda _p, _keep=keep: None)
            self._cin = (cin, keep)
        cin = self._cin[0]
        cin.n_tokens = self.n_tokens
        return cin


_BOOLS = {bool, np.bool_}


def _seq_arrays_fast(rows: list, n: int):
    """Vectorised conversion of the common list forms: one int per row, or rows of ints (any lengths).
    None when the input needs the row-by-row path (which also names any culprit)."""
    if _BOOLS & set(map(type, rows)):                   # a bool is not a seq id: the slow path names it
        return None
    try:
        lens = np.fromiter(map(len, rows), dtype=np.int64, count=n)
    except TypeError:                                  # some row is not a sized iterable: ints, or mixed
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                arr = np.asarray(rows)
        except (ValueError, TypeError, OverflowError, Warning):
            return None
        if arr.dtype.kind not in "iu" or arr.shape != (n,):
            return None
        return np.arange(n + 1, dtype=np.int32), _as_int32("seq_ids", arr, "[n]")
    try:
        flat_list = list(itertools.chain.from_iterable(rows))
        if _BOOLS & set(map(type, flat_list)):
            return None
        flat = np.asarray(flat_list)
    except (TypeError, ValueError, OverflowError):
        return None
    if flat.dtype.kind not in "iu" or flat.ndim != 1 or not (lens > 0).all():
        return None
    if flat.size and (flat.min() < _I32_MIN or flat.max() > _I32_MAX):
        return None                                    # the slow path names the row and the value
    off = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=off[1:])
    return off.astype(np.int32), flat.astype(np.int32)


def _seq_arrays(seq_ids, n: int):
    """(seq_off int32[n+1], seq_id int32[...]) from an int[n], int[n, k] or list-of-iterables input."""
    if isinstance(seq_ids, np.ndarray) and seq_ids.dtype != object:
        arr = _as_int32("seq_ids", seq_ids, "[n] or [n, k]")
        if arr.ndim == 1 and arr.shape[0] == n:
            return np.arange(n + 1, dtype=np.int32), arr
        if arr.ndim == 2 and arr.shape[0] == n and arr.shape[1] >= 1:
            k = arr.shape[1]
            return np.arange(0, (n + 1) * k, k, dtype=np.int32), np.ascontiguousarray(arr.ravel())
        raise BatchError(f"seq_ids must have shape ({n},) or ({n}, k), got {arr.shape}")
    try:
        rows = list(seq_ids)
    except TypeError:
        raise TypeError(f"seq_ids must be an array or a list of n iterables, got {type(seq_ids).__name__}")
    if len(rows) != n:
        raise BatchError(f"seq_ids has {len(rows)} rows, expected {n}")
    fast = _seq_arrays_fast(rows, n)
    if fast is not None:
        return fast
    off = np.zeros(n + 1, np.int32)
    flat: list = []
    for i, r in enumerate(rows):
        ids = _seq_list(r, i)
        if not ids:
            raise BatchError(f"row {i} has no sequence id")
        flat.extend(ids)
        off[i + 1] = len(flat)
    return off, np.asarray(flat, dtype=np.int32)
