"""Batch-invariant row-wise ops of the forward pass (C, csrc/compute/ops.c, attention_vis.c).

    rms_norm(x, weight, eps)             float32[n, k] -> float32[n, k]; double sum of squares in index order
    silu_mul(g, u) / gelu_mul(g, u)      act(g) * u, elementwise (gelu: tanh approximation)
    visible_cells(mask, pos)             per-row visible-cell lists in ascending position order (CSR: off, cells)
    visible_cells_for(place, cell_pos)   the same from a Placement and the positions of every cache cell
    attention_visible(q, k, v, row_stream, off, cells, scale=..., softcap=...)
                                         attention of each query row over its list, in list order

Each output row depends only on its own inputs (and, for attention, on its visible cells' positions and
K/V, not on where they sit in the cache), bitwise, whatever the batch, tiling or thread count.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from ubatch._ffi import ffi, lib
from ubatch.common.params import KV_DT_CODES
from ubatch.compute.kernels import default_threads



def _arr(a, name: str, dtype, ndim=None) -> np.ndarray:
    if not isinstance(a, np.ndarray):
        raise ValueError(f"{name} must be a numpy array, got {type(a).__name__}")
    if a.dtype != np.dtype(dtype):
        raise ValueError(f"{name} must have dtype {np.dtype(dtype).name}, got {a.dtype}")
    if ndim is not None and a.ndim not in ((ndim,) if isinstance(ndim, int) else ndim):
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {a.shape}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    return a


def _fb(a: np.ndarray, ctype: str):
    return ffi.from_buffer(ctype, a)


def _out(out, shape, name="out") -> np.ndarray:
    if out is None:
        return np.empty(shape, np.float32)
    _arr(out, name, np.float32)
    if out.shape != tuple(shape) or not out.flags.writeable:
        raise ValueError(f"{name} must be writeable with shape {tuple(shape)}, got {out.shape}")
    return out


def _threads(n_threads) -> int:
    nt = default_threads() if n_threads is None else n_threads
    if isinstance(nt, bool) or not isinstance(nt, (int, np.integer)) or nt < 1:
        raise ValueError(f"n_threads must be an int >= 1, got {n_threads!r}")
    return int(nt)


def rms_norm(x: np.ndarray, weight: Optional[np.ndarray] = None, eps: float = 1e-6, *,
             out: Optional[np.ndarray] = None) -> np.ndarray:
    """y = x / sqrt(mean(x^2) + eps) * weight, per row; x float32[n, k] or [k]; weight float32[k] or None.
    out may be x (in place)."""
    _arr(x, "x", np.float32, (1, 2))
    k = x.shape[-1]
    if k == 0:
        raise ValueError("x rows must not be empty")
    if weight is not None:
        _arr(weight, "weight", np.float32, 1)
        if weight.shape[0] != k:
            raise ValueError(f"weight has {weight.shape[0]} elements, x rows have {k}")
    if not (float(eps) >= 0.0):
        raise ValueError(f"eps must be >= 0, got {eps}")
    out = _out(out, x.shape)
    n = x.size // k
    if n:
        rc = lib.ub_rms_norm(_fb(x, "float[]"), n, k, ffi.NULL if weight is None else _fb(weight, "float[]"),
                             float(eps), _fb(out, "float[]"))
        if rc != lib.UB_OK:
            raise ValueError(f"rms_norm: invalid arguments (status {rc})")
    return out


def _gated(fn, g, u, out):
    _arr(g, "g", np.float32)
    _arr(u, "u", np.float32)
    if g.shape != u.shape:
        raise ValueError(f"g shape {g.shape} differs from u shape {u.shape}")
    out = _out(out, g.shape)
    if g.size:
        fn(_fb(g, "float[]"), _fb(u, "float[]"), _fb(out, "float[]"), g.size)
    return out


def silu_mul(g: np.ndarray, u: np.ndarray, *, out: Optional[np.ndarray] = None) -> np.ndarray:
    """silu(g) * u elementwise (float32, same shapes; out may be g or u)."""
    return _gated(lib.ub_silu_mul, g, u, out)


def gelu_mul(g: np.ndarray, u: np.ndarray, *, out: Optional[np.ndarray] = None) -> np.ndarray:
    """gelu_tanh(g) * u elementwise (float32, same shapes; out may be g or u)."""
    return _gated(lib.ub_gelu_mul, g, u, out)


def visible_cells(mask: np.ndarray, pos: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Visible-cell lists of every query row: mask float32[ns, per, n_kv] (0 visible, -inf hidden),
    pos int32[ns, n_kv] (position of cell column j of group k's stream). Returns (off int32[ns*per + 1],
    cells int32[off[-1]]): row i (= k*per + r) sees cells[off[i]:off[i+1]], ascending position order
    (ties by cell index)."""
    _arr(mask, "mask", np.float32, 3)
    _arr(pos, "pos", np.int32, 2)
    ns, per, n_kv = mask.shape
    if pos.shape != (ns, n_kv):
        raise ValueError(f"pos shape {pos.shape} must be (ns, n_kv) = {(ns, n_kv)}")
    n_rows = ns * per
    off = np.zeros(n_rows + 1, np.int32)
    if n_rows == 0 or n_kv == 0:
        return off, np.zeros(0, np.int32)
    total = lib.ub_attn_count_visible(_fb(mask, "float[]"), n_rows, n_kv)
    cells = np.empty(max(total, 1), np.int32)
    rc = lib.ub_attn_visible(_fb(mask, "float[]"), _fb(pos, "int32_t[]"), ns, per, n_kv, _fb(off, "int32_t[]"),
                             _fb(cells, "int32_t[]"), total)
    if rc == lib.UB_E_NOMEM:
        raise MemoryError("visible_cells: out of memory")
    if rc != lib.UB_OK:
        raise ValueError("mask values must be 0 (visible) or -inf (hidden)")
    return off, cells[:total]


def visible_cells_for(place, cell_pos: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """From a Placement (streams, mask) and cell_pos int32[n_stream, kv_size] (the position held by every
    cell of every stream): (row_stream int32[ns*per], off, cells) for attention_visible."""
    _arr(cell_pos, "cell_pos", np.int32, 2)
    streams = np.ascontiguousarray(place.streams, dtype=np.int32)
    mask = np.ascontiguousarray(place.mask, dtype=np.float32)
    if mask.ndim != 3 or streams.shape != (mask.shape[0],):
        raise ValueError(f"placement mask {mask.shape} / streams {streams.shape} do not match")
    n_kv = mask.shape[2]
    if streams.size and (streams.min() < 0 or streams.max() >= cell_pos.shape[0]):
        raise ValueError(f"placement streams {streams.tolist()} out of range [0, {cell_pos.shape[0]})")
    if n_kv > cell_pos.shape[1]:
        raise ValueError(f"placement n_kv={n_kv} exceeds cell_pos size {cell_pos.shape[1]}")
    pos = np.ascontiguousarray(cell_pos[streams, :n_kv])
    off, cells = visible_cells(mask, pos)
    return np.repeat(streams, mask.shape[1]).astype(np.int32), off, cells


def attention_visible(q: np.ndarray, k: np.ndarray, v: np.ndarray, row_stream: np.ndarray, off: np.ndarray,
                      cells: np.ndarray, *, scale: Optional[float] = None, softcap: float = 0.0,
                      n_threads: Optional[int] = None, out: Optional[np.ndarray] = None,
                      k_type: Optional[str] = None, v_type: Optional[str] = None) -> np.ndarray:
    """Attention of each query row over its visible cells in list order.

    q float32[n_q, n_head, hd_k]; k float32|float16[n_stream, kv_size, n_head_kv, hd_k]; v the same dtype
    family with hd_v (or, with k_type / v_type naming a bf16 / quantised type of ubatch.compute.kv_quant,
    uint8[n_stream, kv_size, n_head_kv, row_bytes] of its blocks); row_stream int32[n_q]; off int32[n_q + 1], cells int32[off[-1]] (visible_cells).
    scores = scale * (softcap * tanh(q.k / softcap) if softcap > 0 else q.k) (scale default 1/sqrt(hd_k)).
    Returns float32[n_q, n_head, hd_v]; a row with no visible cell gets zeros."""
    from ubatch.compute import kv_quant
    _arr(q, "q", np.float32, 3)
    ids, hds = [], []
    for name, a, t in (("k", k, k_type), ("v", v, v_type)):
        if not isinstance(a, np.ndarray):
            raise ValueError(f"{name} must be a numpy array")
        if t is None or kv_quant.is_plain(t):
            if a.dtype not in KV_DT_CODES or (t is not None and kv_quant.KV_TYPE_IDS[t] != KV_DT_CODES[a.dtype]):
                raise ValueError(f"{name} must be a float32 or float16 numpy array (or name its {name}_type)")
            _arr(a, name, a.dtype, 4)
            ids.append(KV_DT_CODES[a.dtype])
            hds.append(a.shape[3])
        else:
            _arr(a, name, np.uint8, 4)
            tid = kv_quant.type_id(t, f"{name}_type")
            hd = q.shape[2] if name == "k" else None
            if hd is None:   # V rows: head_dim from the row bytes
                per = kv_quant.row_bytes(t, 32, f"{name}_type")
                hd = a.shape[3] // per * 32 if t != "bf16" else a.shape[3] // 2
            if kv_quant.row_bytes(t, hd, f"{name}_type") != a.shape[3]:
                raise ValueError(f"{name}: rows of {a.shape[3]} bytes are not {t} rows of head_dim {hd}")
            ids.append(tid)
            hds.append(hd)
    _arr(row_stream, "row_stream", np.int32, 1)
    _arr(off, "off", np.int32, 1)
    _arr(cells, "cells", np.int32, 1)
    n_q, n_head, hd_k = q.shape
    n_stream, kv_size, n_head_kv = k.shape[:3]
    hd_kk = hds[0]
    if hd_kk != hd_k:
        raise ValueError(f"head_dim of q ({hd_k}) and k ({hd_kk}) differ")
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(f"v shape {v.shape} does not match k shape {k.shape} (except head_dim)")
    hd_v = hds[1]
    if n_head % n_head_kv:
        raise ValueError(f"n_head={n_head} is not a multiple of n_head_kv={n_head_kv}")
    if row_stream.shape[0] != n_q:
        raise ValueError(f"row_stream has {row_stream.shape[0]} entries, q has {n_q} rows")
    if off.shape[0] != n_q + 1 or (n_q and (off[0] != 0 or (np.diff(off) < 0).any())):
        raise ValueError(f"off must be int32[{n_q + 1}], starting at 0 and non-decreasing")
    if n_q and int(off[-1]) > cells.shape[0]:
        raise ValueError(f"off[-1]={int(off[-1])} exceeds the {cells.shape[0]} cells given")
    if n_q and row_stream.size and (row_stream.min() < 0 or row_stream.max() >= n_stream):
        raise ValueError(f"row_stream values out of range [0, {n_stream})")
    if cells.size and (cells.min() < 0 or cells.max() >= kv_size):
        raise ValueError(f"cells values out of range [0, {kv_size})")
    if scale is None:
        scale = 1.0 / float(np.sqrt(hd_k))
    if not np.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    if not (float(softcap) >= 0.0):
        raise ValueError(f"softcap must be >= 0, got {softcap}")
    out = _out(out, (n_q, n_head, hd_v))
    if n_q == 0:
        return out
    nt = _threads(n_threads)
    rc = lib.ub_attention_vis(_fb(q, "float[]"), _fb(k, "uint8_t[]"), ids[0], _fb(v, "uint8_t[]"),
                              ids[1], _fb(row_stream, "int32_t[]"), _fb(off, "int32_t[]"),
                              _fb(cells, "int32_t[]") if cells.size else ffi.new("int32_t[1]"),
                              _fb(out, "float[]"), n_q, n_head, n_head_kv, hd_k, hd_v, n_stream, kv_size,
                              float(scale), float(softcap), nt)
    if rc == lib.UB_E_NOMEM:
        raise MemoryError("attention_visible: out of memory")
    if rc != lib.UB_OK:
        raise ValueError(f"attention_visible: invalid arguments (status {rc})")
    return out


__all__ = ["rms_norm", "silu_mul", "gelu_mul", "visible_cells", "visible_cells_for", "attention_visible"]
