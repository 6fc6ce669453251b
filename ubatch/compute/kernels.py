"""Validated Python entry points of the C compute kernels (csrc/compute/rope.c) and of the thread pool.

Every function checks shapes, dtypes and contiguity and raises ValueError naming the culprit before the C
code runs; the C code then only touches the buffers described here. CFFI releases the GIL during the calls.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

import numpy as np

from ubatch._ffi import ffi, lib
from ubatch.compute.backends import active_backend, backends, set_backend  # noqa: F401  (ubatch.compute.kernels.backends() ...)

from ubatch.common.params import KV_DT_CODES as _DTYPES, ROPE_MODES as _ROPE_MODES
from ubatch.common.params import ROPE_MROPE, ROPE_NEOX, ROPE_NORM  # noqa: F401  (kernels.ROPE_*: the modes rope() takes)


class RopeExt:
    """RoPE beyond base / linear freq_scale, as llama.cpp's ggml_rope_ext takes it: YaRN (ext_factor != 0,
    ramp between n_ctx_orig's correction dims of beta_fast / beta_slow), the magnitude attn_factor on cos/sin
    and per-pair frequency factors (float32[n_rot/2]: Llama-3 rope_freqs, LongRoPE long/short factors)."""

    __slots__ = ("ext_factor", "attn_factor", "n_ctx_orig", "beta_fast", "beta_slow", "freq_factors")

    def __init__(self, *, ext_factor: float = 0.0, attn_factor: float = 1.0, n_ctx_orig: int = 1,
                 beta_fast: float = 32.0, beta_slow: float = 1.0,
                 freq_factors: Optional[np.ndarray] = None) -> None:
        self.ext_factor, self.attn_factor = float(ext_factor), float(attn_factor)
        self.n_ctx_orig, self.beta_fast, self.beta_slow = int(n_ctx_orig), float(beta_fast), float(beta_slow)
        self.freq_factors = None if freq_factors is None else np.ascontiguousarray(freq_factors, dtype=np.float32)

    def key(self) -> tuple:
        ff = None if self.freq_factors is None else self.freq_factors.tobytes()
        return (self.ext_factor, self.attn_factor, self.n_ctx_orig, self.beta_fast, self.beta_slow, ff)

    def cdata(self, n_rot: int, base: float, keep: list):
        """A filled ub_rope_yarn (its factor buffer appended to keep, which must outlive it)."""
        ff = ffi.NULL
        if self.freq_factors is not None:
            if self.freq_factors.shape != (n_rot // 2,):
                raise ValueError(f"rope frequency factors have shape {self.freq_factors.shape}, expected "
                                 f"({n_rot // 2},) (n_rot / 2)")
            if not np.all(np.isfinite(self.freq_factors)) or not np.all(self.freq_factors != 0):
                raise ValueError("rope frequency factors must be finite and non-zero")
            keep.append(self.freq_factors)
            ff = ffi.from_buffer("float[]", self.freq_factors)
            keep.append(ff)
        y = ffi.new("ub_rope_yarn *")
        rc = lib.ub_rope_yarn_init(y, int(n_rot), self.n_ctx_orig, float(base), self.ext_factor,
                                   self.attn_factor, self.beta_fast, self.beta_slow, ff)
        _status(rc, "rope (YaRN parameters: n_ctx_orig, base and beta_fast / beta_slow must be > 0)")
        keep.append(y)
        return y


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
         freq_scale: float = 1.0, sections: Optional[Sequence[int]] = None, ext: Optional[RopeExt] = None) -> None:
    """Rotate x: float32[n_rows, n_head, head_dim] in place; pos: int32[n_pos, n_rows] (section-major);
    ext: YaRN / frequency factors (not with M-RoPE)."""
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
    keep: list = []
    y = ffi.NULL if ext is None else ext.cdata(n_rot, base, keep)
    rc = lib.ub_rope_ext(_ptr(x, "float *"), n_rows, n_head, head_dim, n_rot, _ptr(pos, "int32_t *"),
                         pos.shape[0], mode, float(base), float(freq_scale), sec, y)
    _status(rc, "rope")


def rope_shift(k: np.ndarray, delta: np.ndarray, *, n_rot: int, base: float, mode: int = ROPE_NORM,
               freq_scale: float = 1.0, ext: Optional[RopeExt] = None) -> None:
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
    keep: list = []
    y = ffi.NULL if ext is None else ext.cdata(n_rot, base, keep)
    rc = lib.ub_rope_shift_ext(_ptr(k, "void *"), _DTYPES[k.dtype], int(delta.size), n_head_kv, head_dim, n_rot,
                               _ptr(delta, "int32_t *"), mode, float(base), float(freq_scale), y)
    _status(rc, "rope_shift")


def default_threads() -> int:
    return max(1, os.cpu_count() or 1)


def pool_shutdown() -> None:
    """Join the worker threads of the C core's one thread pool now (csrc/common/ub_pool.c; they are also
    joined at process exit). Any later multi-threaded kernel call (matmul, attention, sampling) starts them
    again."""
    lib.ub_pool_shutdown()
