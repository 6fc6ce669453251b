"""UBatch: one micro-batch (llama_ubatch) backed by a C record, exposed as read-only numpy views.

The C record is owned by the UBatch (freed when the last reference to it — the UBatch or any array view
taken from it — goes away), so views stay valid after the allocator is reset, re-inited or freed.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ubatch._ffi import ffi, lib


class _CArray:
    """Exposes C memory to numpy through __array_interface__ while keeping its owner alive."""

    __slots__ = ("__array_interface__", "_owner")

    def __init__(self, owner, address: int, shape: tuple, typestr: str) -> None:
        self._owner = owner
        self.__array_interface__ = {"data": (address, True), "shape": shape, "typestr": typestr, "version": 3}


def c_array(owner, cptr, shape: tuple, typestr: str) -> np.ndarray:
    """A read-only numpy view of `cptr` (shape, typestr) that keeps `owner` alive."""
    if any(d == 0 for d in shape):
        return np.zeros(shape, dtype=np.dtype(typestr))
    arr = np.asarray(_CArray(owner, int(ffi.cast("uintptr_t", cptr)), shape, typestr))
    return arr


class UBatch:
    """One micro-batch. Attributes: docs/api.md; arrays are read-only views created on first access."""

    __slots__ = ("_ptr", "_hdr", "_cache")

    def __init__(self, ptr) -> None:
        self._ptr = ffi.gc(ptr, lib.ub_ubatch_free)
        self._hdr = None          # the 7 int32 header fields, read on first use
        self._cache: Optional[dict] = None

    def _header(self) -> list:
        h = self._hdr
        if h is None:
            # the record opens with 7 int32 fields (n_tokens ... equal_seqs): one read for all of them
            h = self._hdr = ffi.unpack(ffi.cast("int32_t *", self._ptr), 7)
        return h

    @property
    def n_tokens(self) -> int:
        return self._header()[0]

    @property
    def n_seq_tokens(self) -> int:
        return self._header()[1]

    @property
    def n_seqs(self) -> int:
        """Sequence sets in the ubatch (n_tokens for split_simple)."""
        return self._header()[2]

    @property
    def n_seqs_unq(self) -> int:
        return self._header()[3]

    @property
    def n_pos(self) -> int:
        return self._header()[4]

    @property
    def n_embd(self) -> int:
        return self._header()[5]

    @property
    def equal_seqs(self) -> bool:
        return self._header()[6] != 0

    def _view(self, name: str, shape: tuple, typestr: str) -> np.ndarray:
        if self._cache is None:
            self._cache = {}
        arr = self._cache.get(name)
        if arr is None:
            arr = c_array(self._ptr, getattr(self._ptr, name), shape, typestr)
            arr.flags.writeable = False
            self._cache[name] = arr
        return arr

    @property
    def token(self) -> Optional[np.ndarray]:
        """int32[n_tokens] or None (embedding batch)."""
        return None if self._ptr.token == ffi.NULL else self._view("token", (self.n_tokens,), "<i4")

    @property
    def embd(self) -> Optional[np.ndarray]:
        """float32[n_tokens, n_embd] or None (token batch)."""
        return None if self._ptr.embd == ffi.NULL else self._view("embd", (self.n_tokens, self.n_embd), "<f4")

    @property
    def pos(self) -> np.ndarray:
        """int32[n_pos, n_tokens], section-major."""
        return self._view("pos", (self.n_pos, self.n_tokens), "<i4")

    @property
    def output(self) -> np.ndarray:
        """int8[n_tokens]."""
        return self._view("output", (self.n_tokens,), "|i1")

    @property
    def n_seq_id(self) -> np.ndarray:
        return self._view("n_seq_id", (self.n_tokens,), "<i4")

    @property
    def seq_off(self) -> np.ndarray:
        """int32[n_tokens + 1]: row r's ids are seq_id_flat[seq_off[r]:seq_off[r+1]]."""
        return self._view("seq_off", (self.n_tokens + 1,), "<i4")

    @property
    def seq_id_flat(self) -> np.ndarray:
        """int32[sum(n_seq_id)]: every row's ids, ascending within a row."""
        return self._view("seq_id", (int(self._ptr.seq_off[self.n_tokens]),), "<i4")

    @property
    def primary_seq(self) -> np.ndarray:
        """int32[n_tokens]: each row's smallest seq id (llama.cpp's seq_id[i][0])."""
        return self.seq_id_flat[self.seq_off[:-1]]

    def seq_ids(self, r: int) -> np.ndarray:
        """int32[k]: the ascending seq ids of row r."""
        if isinstance(r, (bool, np.bool_)) or not isinstance(r, (int, np.integer)):
            raise TypeError(f"row index r must be an int, got {type(r).__name__}")
        if not 0 <= r < self.n_tokens:
            raise IndexError(f"row {r} out of range [0, {self.n_tokens})")
        off = self.seq_off
        return self.seq_id_flat[off[r]: off[r + 1]]

    @property
    def seq_id_unq(self) -> np.ndarray:
        return self._view("seq_id_unq", (self.n_seqs_unq,), "<i4")

    @property
    def seq_idx(self) -> np.ndarray:
        """int32[256]: index of seq s in seq_id_unq, -1 where absent."""
        return self._view("seq_idx", (256,), "<i4")

    @property
    def batch_idxs(self) -> np.ndarray:
        return self._view("batch_idxs", (self.n_tokens,), "<i4")

    def __len__(self) -> int:
        return self.n_tokens

    def __repr__(self) -> str:
        return (f"UBatch(n_tokens={self.n_tokens}, n_seqs={self.n_seqs} x n_seq_tokens={self.n_seq_tokens}, "
                f"n_seqs_unq={self.n_seqs_unq}, equal_seqs={self.equal_seqs})")
