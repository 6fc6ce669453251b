"""The operations the architectures' forward passes are written in, on top of ubatch.compute.

matmul / get_rows go to the C kernels of ubatch.compute.matmul (activations quantised per row as ggml does,
integer dots; each output row depends only on its input row). While that module is not available (the
kernels branch not merged yet) a reference path dequantises with gguf.quants instead: correct but slow and
NOT batch-invariant (numpy/BLAS); `using_c_kernels()` says which path runs.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ubatch.model.weights import Weight

try:  # the kernels helper's C matmul
    from ubatch.compute import matmul as _mm  # type: ignore
    _HAVE_MM = hasattr(_mm, "matmul") and hasattr(_mm, "QWeight")
except ImportError:  # pragma: no cover - until the kernels branch lands
    _mm = None
    _HAVE_MM = False
if _HAVE_MM:
    from ubatch.compute import ops as _cops


def using_c_kernels() -> bool:
    return _HAVE_MM


_REF_CACHE: dict = {}


def _dequant(w: Weight) -> np.ndarray:
    """Reference path only: the float32 matrix (cached per weight)."""
    key = id(w)
    got = _REF_CACHE.get(key)
    if got is None or got[0] is not w:
        import gguf
        if w.ggml_type == 0:
            m = w.data.view(np.float32).reshape(w.n_rows, w.n_cols)
        else:
            m = np.asarray(gguf.quants.dequantize(np.asarray(w.data), w.ggml_type), np.float32)
        got = (w, m.reshape(w.n_rows, w.n_cols))
        _REF_CACHE[key] = got
    return got[1]


def matmul(x: np.ndarray, w: Weight, n_threads: Optional[int] = None) -> np.ndarray:
    """float32[n, n_cols] -> float32[n, n_rows] = x @ W.T."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if _HAVE_MM:
        return _mm.matmul(x, w.qweight(), n_threads=n_threads)
    return x @ _dequant(w).T


def get_rows(w: Weight, ids: np.ndarray) -> np.ndarray:
    """Dequantised rows ids of w: float32[len(ids), n_cols]."""
    ids = np.ascontiguousarray(ids, dtype=np.int32)
    if _HAVE_MM:
        return _mm.get_rows(w.qweight(), ids)
    import gguf
    if w.ggml_type == 0:
        return w.data.view(np.float32).reshape(w.n_rows, w.n_cols)[ids].copy()
    rows = np.asarray(w.data)[ids]
    return np.asarray(gguf.quants.dequantize(rows, w.ggml_type), np.float32).reshape(len(ids), w.n_cols)


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """Row-wise: sum of f32 squares accumulated in f64, scale = 1/sqrtf(mean + eps), (x*scale)*w
    (real-models.md §3.1). x: float32[..., d], weight: float32[d]."""
    if _HAVE_MM:
        x2 = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, x.shape[-1])
        w = weight if weight.flags.c_contiguous else np.ascontiguousarray(weight)
        return _cops.rms_norm(x2, np.asarray(w, np.float32), float(eps)).reshape(x.shape)
    sq = np.square(x, dtype=np.float32).astype(np.float64)
    mean = (sq.sum(axis=-1) / x.shape[-1]).astype(np.float32)
    scale = (np.float32(1.0) / np.sqrt(mean + np.float32(eps), dtype=np.float32)).astype(np.float32)
    return (x * scale[..., None]) * weight


def silu_mul(g: np.ndarray, u: np.ndarray) -> np.ndarray:
    if _HAVE_MM:
        return _cops.silu_mul(g, u, out=g)
    with np.errstate(over="ignore"):
        return (g / (np.float32(1.0) + np.exp(-g))) * u


def _gelu_table() -> np.ndarray:
    """ggml's f16 GELU table: for every f16 bit pattern u, f16(0.5 v (1 + tanhf(0.79788456 v (1 + 0.044715 v^2))))
    with v = the half u as f32 (tanh form; computed in f32)."""
    v = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    with np.errstate(all="ignore"):
        g = np.float32(0.5) * v * (np.float32(1.0) + np.tanh(np.float32(0.7978845608028654) * v
                                                           * (np.float32(1.0) + np.float32(0.044715) * v * v)))
    return g.astype(np.float16).astype(np.float32)


_GELU = None


def gelu_mul(g: np.ndarray, u: np.ndarray) -> np.ndarray:
    """GeGLU as ggml: gelu(g) through the f16 table (identity above 10, 0 below -10), times u."""
    global _GELU
    if _GELU is None:
        _GELU = _gelu_table()
    idx = g.astype(np.float16).view(np.uint16)
    h = _GELU[idx]
    h = np.where(g >= 10.0, g, np.where(g <= -10.0, np.float32(0.0), h))
    return h.astype(np.float32) * u


__all__ = ["matmul", "get_rows", "rms_norm", "silu_mul", "gelu_mul", "using_c_kernels"]
