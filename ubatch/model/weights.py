"""Weights as they sit in the GGUF file: `Weight` is one tensor's bytes (a memmap view, block layout) with its
logical matrix shape [n_rows, n_cols] = [out, in] (GGUF ne = (n_cols, n_rows)); `vector()` gives an F32 tensor
(norms, biases) as a float32 view of the file. `TensorSource` hands tensors out by name with llama.cpp's
checks: a missing required tensor or a wrong shape raises GGUFError naming it."""
from __future__ import annotations

from typing import Optional, Set, Tuple

import numpy as np

from ubatch.model.gguf_file import GGML_TYPES, GGUFError, GGUFFile, TensorInfo

F32, F16, BF16 = 0, 1, 30


class Weight:
    """A [n_rows, n_cols] matrix in its GGUF block layout: `data` = uint8[n_rows, row_bytes] (a view)."""

    __slots__ = ("name", "ggml_type", "n_rows", "n_cols", "data", "_qw", "_spare_outs")  # _spare_outs: model/ops.py

    def __init__(self, info: TensorInfo) -> None:
        self.name = info.name
        self.ggml_type = info.ggml_type
        self.n_cols = info.n_cols
        self.n_rows = info.n_rows
        self.data = info.data.reshape(self.n_rows, info.nbytes // self.n_rows)
        self._qw = None

    def rows(self, start: int, stop: int, name: str) -> "Weight":
        """Rows [start, stop) of this matrix as a Weight over the same bytes (no copy): the Q, K, V parts of
        a fused attn_qkv, the gate and up halves of a fused ffn_up."""
        if not 0 <= start < stop <= self.n_rows:
            raise ValueError(f"{self.name}: rows [{start}, {stop}) out of [0, {self.n_rows})")
        w = Weight.__new__(Weight)
        w.name, w.ggml_type, w.n_cols, w.n_rows = name, self.ggml_type, self.n_cols, stop - start
        w.data, w._qw = self.data[start:stop], None
        return w

    @property
    def type_name(self) -> str:
        return GGML_TYPES[self.ggml_type][0]

    @property
    def nbytes(self) -> int:
        return int(self.data.size)

    def qweight(self, repack: Optional[bool] = None):
        """The kernels' QWeight over the same bytes (created once; no copy of the GGUF bytes, or their repacked
        panels when the type has a layout: ubatch.compute.matmul; repack=False keeps the GGUF layout, as the
        MoE expert stacks need; None follows UBATCH_REPACK). The first call decides."""
        if self._qw is None:
            from ubatch.compute.matmul import QWeight
            self._qw = QWeight(self.ggml_type, self.n_rows, self.n_cols, self.data, repack=repack)
        return self._qw

    def __repr__(self) -> str:
        return f"Weight({self.name!r}, {self.type_name}, [{self.n_rows}, {self.n_cols}])"


def _ne_str(ne) -> str:
    return "{" + ", ".join(str(d) for d in ne) + "}"


class TensorSource:
    """Tensors of one file by name; records which were used so unused ones can be reported."""

    def __init__(self, f: GGUFFile) -> None:
        self.f = f
        self.used: Set[str] = set()

    def _info(self, name: str, ne: Tuple[int, ...], required: bool) -> Optional[TensorInfo]:
        t = self.f.tensors.get(name)
        if t is None:
            if required:
                raise GGUFError(f"{self.f.path}: missing tensor '{name}'")
            return None
        # trailing 1-dims are equivalent (ggml pads ne with 1)
        got = tuple(t.ne) + (1,) * (4 - len(t.ne))
        want = tuple(ne) + (1,) * (4 - len(ne))
        if got != want:
            raise GGUFError(f"{self.f.path}: tensor '{name}' has wrong shape; expected {_ne_str(ne)}, "
                            f"got {_ne_str(t.ne)}")
        self.used.add(name)
        return t

    def matrix(self, name: str, n_cols: int, n_rows: int, required: bool = True) -> Optional[Weight]:
        """A weight of GGUF ne {n_cols, n_rows} (y = x @ W.T maps n_cols -> n_rows)."""
        t = self._info(name, (n_cols, n_rows), required)
        return None if t is None else Weight(t)

    def vector(self, name: str, n: int, required: bool = True) -> Optional[np.ndarray]:
        """An F32 (or F16/BF16, converted) vector {n}: a read-only float32 view of the file when F32."""
        t = self._info(name, (n,), required)
        if t is None:
            return None
        if t.ggml_type == F32:
            return t.data.view(np.float32)
        if t.ggml_type == F16:
            return t.data.view(np.float16).astype(np.float32)
        if t.ggml_type == BF16:
            return (t.data.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        raise GGUFError(f"{self.f.path}: tensor '{name}' has type {t.type_name}; a norm/bias vector must be "
                        f"F32, F16 or BF16")


__all__ = ["Weight", "TensorSource"]
