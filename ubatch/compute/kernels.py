"""Validated Python entry points of the C compute kernels (csrc/compute/rope.c) and of the thread pool.

Every function checks shapes, dtypes and contiguity and raises ValueError naming the culprit before the C
code runs; the C code then only touches the buffers described here. CFFI releases the GIL during the calls.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

import numpy as np

from ubatch._ffi import ffi, lib
from ubatch.compute.backends import active_backend, backends, set_backend  # noqa: F401  (ubatch.kernels.backends() ...)

ROPE_NORM = 0
ROPE_NEOX = 2
ROPE_MROPE = 8
_ROPE_MODES = {ROPE_NORM: "NORM", ROPE_NEOX: "NEOX", ROPE_MROPE: "MROPE"}
_DTYPES = {np.dtype(np.float32): lib.UB_T_F32, np.dtype(np.float16): lib.UB_T_F16}


def _check_c(arr: np.ndarray, name: str, dtype, ndim: int) -> None:
    if not isinstance(arr, np.ndarray):
        raise ValueError(f"{name} must be a numpy array, got {type(arr).__name__}")
    if arr.dtype != np.dtype(dtype):
        raise ValueError(f"{name} must have dtype {np.dtype(dtype).name}, got {arr.dtype.name}")
    if arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {arr.shape}")
    if not arr.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")


def _ptr(arr: np.ndarray, ctype: str):
    return ffi.cast(ctype, arr.ctypes.data)


def _status(rc: int, what: str) -> None:
    if rc == lib.UB_E_NOMEM:
        raise MemoryError(f"{what}: out of memory")
    if rc != lib.UB_OK:
        raise ValueError(f"{what}: invalid arguments (status {rc})")


def _rope_mode(mode: int) -> None:
    if mode not in _ROPE_MODES:
        raise ValueError(f"rope mode {mode} is not supported (NORM=0, NEOX=2, MROPE=8)")


def rope(x: np.ndarray, pos: np.ndarray, *, n_rot: int, base: float, mode: int = ROPE_NORM,
         freq_scale: float = 1.0, sections: Optional[Sequence[int]] = None) -> None:
    """Rotate x: float32[n_rows, n_head, head_dim] in place; pos: int32[n_pos, n_rows] (section-major)."""
    _check_c(x, "x", np.float32, 3)
    _check_c(pos, "pos", np.int32, 2)
    _rope_mode(mode)
    n_rows, n_head, head_dim = x.shape
    if pos.shape[1] != n_rows:
        raise ValueError(f"pos has {pos.shape[1]} rows, x has {n_rows}")
    if not (0 < n_rot <= head_dim) or n_rot % 2:
        raise ValueError(f"n_rot={n_rot} must be even and in (0, head_dim={head_dim}]")
    if not base > 0:
        raise ValueError(f"rope base must be > 0, got {base}")
    sec = ffi.NULL
    if mode == ROPE_MROPE:
        if pos.shape[0] != 4:
            raise ValueError(f"M-RoPE needs 4 position sections, pos has {pos.shape[0]}")
        if sections is None or len(sections) != 4 or min(sections) < 0:
            raise ValueError(f"M-RoPE needs 4 non-negative sections, got {sections}")
        sec = ffi.new("int32_t[4]", [int(s) for s in sections])
    rc = lib.ub_rope(_ptr(x, "float *"), n_rows, n_head, head_dim, n_rot, _ptr(pos, "int32_t *"),
                     pos.shape[0], mode, float(base), float(freq_scale), sec)
    _status(rc, "rope")


def rope_shift(k: np.ndarray, delta: np.ndarray, *, n_rot: int, base: float, mode: int = ROPE_NORM,
               freq_scale: float = 1.0) -> None:
    """K-shift: k: float32/float16[..., n_cells, n_head_kv, head_dim] in place, each cell rotated by
    delta: int32[..., n_cells] (same leading shape); cells with delta 0 are untouched."""
    if not isinstance(k, np.ndarray) or k.dtype not in _DTYPES:
        raise ValueError(f"k must be a float32 or float16 numpy array, got {getattr(k, 'dtype', type(k))}")
    if k.ndim < 3 or not k.flags.c_contiguous:
        raise ValueError(f"k must be C-contiguous with shape [..., cells, n_head_kv, head_dim], got {k.shape}")
    _check_c(delta, "delta", np.int32, delta.ndim if isinstance(delta, np.ndarray) else 1)
    if delta.shape != k.shape[:-2]:
        raise ValueError(f"delta shape {delta.shape} does not match k cells {k.shape[:-2]}")
    _rope_mode(mode)
    n_head_kv, head_dim = k.shape[-2:]
    if not (0 < n_rot <= head_dim) or n_rot % 2:
        raise ValueError(f"n_rot={n_rot} must be even and in (0, head_dim={head_dim}]")
    rc = lib.ub_rope_shift(_ptr(k, "void *"), _DTYPES[k.dtype], int(delta.size), n_head_kv, head_dim, n_rot,
                           _ptr(delta, "int32_t *"), mode, float(base), float(freq_scale))
    _status(rc, "rope_shift")


def default_threads() -> int:
    return max(1, os.cpu_count() or 1)


def pool_shutdown() -> None:
    """Join the worker threads of the C core's one thread pool now (csrc/common/ub_pool.c; they are also
    joined at process exit). Any later multi-threaded kernel call (matmul, attention, sampling) starts them
    again."""
    lib.ub_pool_shutdown()
