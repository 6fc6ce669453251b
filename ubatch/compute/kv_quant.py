"""K/V cache element types (llama.cpp's type_k / type_v) and their row codecs (C: csrc/compute/kv_quant.c).

    KV_TYPE_IDS                    name -> ggml type id (f32 0, f16 1, q4_0 2, q4_1 3, q5_0 6, q5_1 7, q8_0 8,
                                   iq4_nl 20, bf16 30)
    row_bytes(type, n)             bytes of one row of n elements (n a multiple of 32 for the q* types)
    quantize_rows(type, x)         float32[..., n] -> uint8[..., row_bytes] (ggml's reference rounding)
    dequantize_rows(type, b, n)    uint8[..., row_bytes] -> float32[..., n]
    store_rows(type, x, dst, idx)  rows of x quantised into rows idx of dst (uint8[rows, row_bytes]), one C call

f32 / f16 caches are kept as float32 / float16 arrays; every other type as uint8 rows of its blocks (bf16
too: two bytes per element)."""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from ubatch._ffi import ffi, lib

KV_TYPE_IDS: Dict[str, int] = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8,
                               "iq4_nl": 20, "bf16": 30}
KV_TYPE_NAMES: Dict[int, str] = {v: k for k, v in KV_TYPE_IDS.items()}
# element types whose K/V rows this build can write (all of KV_TYPE_IDS)
KV_WRITABLE = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")
QUANTISED = ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "iq4_nl")


def type_id(t: str, name: str = "type") -> int:
    if t not in KV_TYPE_IDS:
        raise ValueError(f"{name}={t!r} is not a K/V cache type (one of {sorted(KV_TYPE_IDS)})")
    return KV_TYPE_IDS[t]


def row_bytes(t: str, n: int, name: str = "type") -> int:
    """Bytes of one row of n elements of type t; ValueError naming `name` when n does not fit its blocks."""
    rs = int(lib.ub_kv_row_size(type_id(t, name), int(n)))
    if rs < 0:
        raise ValueError(f"{name}={t!r} needs a row length that is a multiple of 32 (its block), got {n}")
    return rs


def is_plain(t: str) -> bool:
    """f32 / f16: kept as float arrays (everything else as uint8 rows)."""
    return t in ("f32", "f16")


def _check(rc: int, what: str) -> None:
    if rc != lib.UB_OK:
        raise ValueError(f"{what}: invalid arguments (status {rc})")


def store_rows(t: str, x: np.ndarray, dst: np.ndarray, idx: Optional[np.ndarray] = None) -> None:
    """x: float32[m, n] (C-contiguous); dst: a C-contiguous uint8 (or float16/float32 for f16/f32) array
    viewed as [rows, row_bytes(t, n)]; idx: int64[m] rows of dst (None: rows 0..m-1)."""
    x = np.ascontiguousarray(x, np.float32)
    m, n = x.shape
    rs = row_bytes(t, n)
    if not dst.flags.c_contiguous or dst.nbytes % rs:
        raise ValueError(f"dst must be C-contiguous rows of {rs} bytes")
    rows = dst.nbytes // rs
    ip = ffi.NULL
    if idx is not None:
        idx = np.ascontiguousarray(idx, np.int64)
        if idx.shape != (m,):
            raise ValueError(f"idx shape {idx.shape} != ({m},)")
        if m and (idx.min() < 0 or idx.max() >= rows):
            raise ValueError(f"idx values out of range [0, {rows})")
        ip = ffi.from_buffer("int64_t[]", idx)
    _check(lib.ub_kv_store_rows(type_id(t), ffi.from_buffer("float[]", x), m, n,
                                ffi.from_buffer("uint8_t[]", dst), rows, ip), f"store_rows({t})")


def quantize_rows(t: str, x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, np.float32)
    n = x.shape[-1]
    out = np.zeros(x.shape[:-1] + (row_bytes(t, n),), np.uint8)
    store_rows(t, x.reshape(-1, n), out)
    return out


def dequantize_rows(t: str, b: np.ndarray, n: int) -> np.ndarray:
    rs = row_bytes(t, n)
    b = np.ascontiguousarray(b)
    if b.nbytes % rs:
        raise ValueError(f"{b.nbytes} bytes are not whole rows of {rs}")
    m = b.nbytes // rs
    shape = (b.shape[:-1] if b.dtype == np.uint8 and b.shape[-1] == rs else (m,)) + (int(n),)
    out = np.empty(shape, np.float32)
    _check(lib.ub_kv_load_rows(type_id(t), ffi.from_buffer("uint8_t[]", b), m, int(n),
                               ffi.from_buffer("float[]", out)), f"dequantize_rows({t})")
    return out


__all__ = ["KV_TYPE_IDS", "KV_TYPE_NAMES", "KV_WRITABLE", "QUANTISED", "dequantize_rows", "is_plain",
           "quantize_rows", "row_bytes", "store_rows", "type_id"]
