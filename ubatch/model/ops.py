"""The operations the architectures' forward passes are written in, all on ubatch.compute's C kernels:
matmul / get_rows (activations quantised per row as ggml does, integer block dots; each output row depends
only on its input row), rms_norm (row-wise, fixed order), silu_mul; gelu_mul is the elementwise f16-table
GELU of ggml written with numpy (a table lookup per element: no reduction, so batch-invariant too).
No BLAS anywhere: results are batch-invariant bitwise."""
from __future__ import annotations

import sys
import threading
from typing import Optional

import numpy as np

from ubatch.compute import matmul as _mm
from ubatch.compute import ops as _cops
from ubatch.model.weights import Weight


def matmul(x: np.ndarray, w: Weight, n_threads: Optional[int] = None, *, reuse: bool = False) -> np.ndarray:
    """float32[n, n_cols] -> float32[n, n_rows] = x @ W.T. reuse=True (the lm head, x 2-D): the result is written
    into one of w's two spare buffers when no one holds it any more (see _spare_out; up to _SPARE_MAX floats),
    not a fresh array."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = _spare_out(w, x.shape[0]) if reuse and x.ndim == 2 and x.shape[0] * w.n_rows <= _SPARE_MAX else None
    return _mm.matmul(x, w.qweight(), n_threads=n_threads, out=out)


_SPARE_LOCK = threading.Lock()
_SPARE_MAX = 1 << 24  # floats (64 MB): a bigger result (a prefill's every-row logits) is a fresh array, never kept


def _spare_out(w: Weight, n: int) -> np.ndarray:
    """float32[n, w.n_rows]: rows [0, n) of a spare output buffer of w that nothing outside references (its
    refcount is the spare list's alone: a caller, a context or a view of it holding the array keeps it from
    reuse), else of a new one that replaces the list's oldest. Why: a batch's logits (32 rows x a 262144-token
    vocabulary = 33 MB) are above glibc's mmap threshold, so a fresh array per decode step had its pages
    faulted in and zeroed by the kernel every step (~5-10 % of a B = 32 Gemma 3 step). Two spares: the context
    keeps the last step's logits while the next step computes."""
    with _SPARE_LOCK:
        spares = getattr(w, "_spare_outs", None)
        if spares is None:
            spares = w._spare_outs = []
        for i in range(len(spares)):  # (not enumerate: its reused result tuple would hold one more reference)
            buf = spares[i]  # references: the list, buf, getrefcount's argument
            if buf.shape[0] >= n and sys.getrefcount(buf) <= 3:
                spares.append(spares.pop(i))  # most recently used last
                return buf[:n]
        buf = np.empty((max(n, 1), w.n_rows), np.float32)
        spares.append(buf)
        if len(spares) > 2:
            spares.pop(0)
        return buf[:n]


def get_rows(w: Weight, ids: np.ndarray) -> np.ndarray:
    """Dequantised rows ids of w: float32[len(ids), n_cols]."""
    return _mm.get_rows(w.qweight(), np.ascontiguousarray(ids, dtype=np.int32))


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """Row-wise over the last axis: sum of f32 squares accumulated in f64, scale = 1/sqrtf(mean + eps),
    (x*scale)*w (docs/llama-cpp-behaviours.md §M3.1). x: float32[..., d], weight: float32[d]."""
    x2 = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, x.shape[-1])
    return _cops.rms_norm(x2, np.ascontiguousarray(weight, dtype=np.float32), float(eps)).reshape(x.shape)


def silu_mul(g: np.ndarray, u: np.ndarray) -> np.ndarray:
    """silu(g) * u, in place in g."""
    return _cops.silu_mul(g, u, out=g)


def _gelu_table() -> np.ndarray:
    """ggml's f16 GELU table: for every f16 bit pattern u, f16(0.5 v (1 + tanhf(0.79788456 v (1 + 0.044715 v^2))))
    with v = the half u as f32 (tanh form; computed in f32)."""
    v = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    with np.errstate(all="ignore"):
        g = np.float32(0.5) * v * (np.float32(1.0) + np.tanh(np.float32(0.7978845608028654) * v
                                                           * (np.float32(1.0) + np.float32(0.044715) * v * v)))
    return g.astype(np.float16).astype(np.float32)


_GELU = None


def gelu_table() -> np.ndarray:
    """float32[65536]: the GELU of every f16 bit pattern (built once)."""
    global _GELU
    if _GELU is None:
        _GELU = _gelu_table()
    return _GELU


def gelu_mul(g: np.ndarray, u: np.ndarray) -> np.ndarray:
    """GeGLU as ggml: gelu(g) through the f16 table (identity above 10, 0 below -10), times u."""
    gelu_table()
    idx = g.astype(np.float16).view(np.uint16)
    h = _GELU[idx]
    h = np.where(g >= 10.0, g, np.where(g <= -10.0, np.float32(0.0), h))
    return h.astype(np.float32) * u


__all__ = ["matmul", "get_rows", "rms_norm", "silu_mul", "gelu_mul"]
