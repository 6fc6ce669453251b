"""The lookup tables of the i-quant weight types (the IQ4_NL / IQ4_XS values, the IQ3_S, IQ3_XXS, IQ2_S,
IQ2_XS, IQ2_XXS, IQ1_S and IQ1_M grids), handed to the C kernels once, before the first use of such a type.

ubatch does not carry these tables in its source: they are built here from the gguf package's own compact
representation (``gguf.quants``: each grid as packed 2- or 3-bit indices into a few values, decoded by its
``init_grid``), checked (shape, the format's set of values, distinct grid points) and passed to
``ub_mm_set_iq_tables`` (csrc/compute/mm_iq_tables.c), which checks the values again. ``ensure()`` does it
once per process; ``matmul.type_info`` calls it for the types that need it (importing gguf costs ~0.1 s, so
processes that never meet such a type never pay it). The sign table and the MXFP4 values are computed in C
from their definitions.
"""
from __future__ import annotations

import threading

import numpy as np

from ubatch._ffi import ffi, lib

# the weight types whose kernels read the tables (ggml type ids)
NEEDS_TABLES = frozenset({16, 17, 18, 19, 20, 21, 22, 23, 29})

_lock = threading.Lock()
_done = False


def _grid(cls, n: int, per: int, dtype) -> np.ndarray:
    cls.init_grid()
    g = np.asarray(cls.grid, dtype=np.float32).reshape(n, per)
    out = g.astype(dtype)
    if not np.array_equal(out.astype(np.float32), g):
        raise RuntimeError(f"gguf.quants.{cls.__name__}: grid values are not integers")
    if len({row.tobytes() for row in out}) != n:
        raise RuntimeError(f"gguf.quants.{cls.__name__}: grid points are not distinct")
    return np.ascontiguousarray(out)


def build() -> dict:
    """The tables as numpy arrays (name -> array), from gguf.quants: kv int8[16], iq2xxs uint8[256, 8],
    iq2xs [512, 8], iq2s [1024, 8], iq3xxs uint8[256, 4], iq3s [512, 4], iq1s int8[2048, 8]."""
    from gguf import quants as q
    kv = np.array(q.IQ4_NL.kvalues, dtype=np.int8)
    if kv.shape != (16,):
        raise RuntimeError(f"gguf.quants.IQ4_NL.kvalues has {kv.size} values, not 16")
    return {
        "kv": kv,
        "iq2xxs": _grid(q.IQ2_XXS, 256, 8, np.uint8),
        "iq2xs": _grid(q.IQ2_XS, 512, 8, np.uint8),
        "iq2s": _grid(q.IQ2_S, 1024, 8, np.uint8),
        "iq3xxs": _grid(q.IQ3_XXS, 256, 4, np.uint8),
        "iq3s": _grid(q.IQ3_S, 512, 4, np.uint8),
        "iq1s": _grid(q.IQ1_S, 2048, 8, np.int8),
    }


def ensure() -> None:
    """Set the C kernels' tables once (no-op afterwards). RuntimeError naming the table if gguf's are not
    what the formats say."""
    global _done
    if _done:
        return
    with _lock:
        if _done:
            return
        t = build()
        keep = {k: ffi.from_buffer(("int8_t[]" if v.dtype == np.int8 else "uint8_t[]"), v) for k, v in t.items()}
        rc = lib.ub_mm_set_iq_tables(keep["kv"], keep["iq2xxs"], keep["iq2xs"], keep["iq2s"], keep["iq3xxs"],
                                     keep["iq3s"], keep["iq1s"])
        if rc != lib.UB_OK:
            raise RuntimeError("the i-quant lookup tables built from gguf.quants were refused by the kernels "
                               "(a value outside its format's set)")
        _done = True


__all__ = ["NEEDS_TABLES", "build", "ensure"]
