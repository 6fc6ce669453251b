"""ggml's activation quantisation, in float64 numpy (docs/llama-cpp-behaviours.md §M2.2): the values a matmul's activation
row becomes before the integer dot products, for the weight type it meets.

    act_kind(weight_type)          -> "q8_0" | "q8_1" | "q8_k" | "f16" | "bf16" | "f32"
    quantize(x, kind)              -> float64[n, k]: the dequantised activation values (q * d)
    q8_1_sums(x)                   -> (d_fp16 * sum q, fp16(d * sum q)) per 32-block, for the Q4_1/Q5_1 min term

Only the formats are emulated (the 8-bit grid, the fp16 storage of the Q8_0/Q8_1 scale, Q8_K's signed scale
and its clamp at 127, round half to even as ggml's x86 code does): the scales are computed from the float64
input in float64 (Q8_0's d is then rounded through f32 to fp16, as ggml stores it). Written from llama.cpp's
behaviour (docs/llama-cpp-behaviours.md §M2.2), not from ggml's source."""
from __future__ import annotations

from typing import Tuple

import numpy as np

# ggml type ids (GGMLQuantizationType)
F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1 = 0, 1, 2, 3, 6, 7, 8, 9
Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, BF16 = 10, 11, 12, 13, 14, 20, 30
IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_S, IQ3_S, IQ2_S, IQ4_XS, IQ1_M, TQ1_0, TQ2_0, MXFP4 = 16, 17, 18, 19, 21, 22, 23, 29, 34, 35, 39

_KIND = {F32: "f32", F16: "f16", BF16: "bf16", Q4_0: "q8_0", Q5_0: "q8_0", Q8_0: "q8_0", IQ4_NL: "q8_0",
         Q4_1: "q8_1", Q5_1: "q8_1", Q2_K: "q8_k", Q3_K: "q8_k", Q4_K: "q8_k", Q5_K: "q8_k", Q6_K: "q8_k",
         MXFP4: "q8_0", IQ4_XS: "q8_k", IQ3_S: "q8_k", IQ3_XXS: "q8_k", IQ2_S: "q8_k", IQ2_XS: "q8_k",
         IQ2_XXS: "q8_k", IQ1_S: "q8_k", IQ1_M: "q8_k", TQ1_0: "q8_k", TQ2_0: "q8_k"}


def act_kind(weight_type: int) -> str:
    """The activation format ggml-cpu converts a matmul's activations to for this weight type."""
    try:
        return _KIND[int(weight_type)]
    except KeyError:
        raise ValueError(f"no activation format known for ggml type {weight_type}") from None


def _fp16(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float32).astype(np.float16).astype(np.float64)


def _bf16(a: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16          # round to nearest even
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def _q8_32(x: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x float64[n, k] -> (q float64[n, k/32, 32], d exact [n, k/32, 1], d stored fp16 [n, k/32, 1])."""
    n, k = x.shape
    b = x.reshape(n, k // 32, 32)
    amax = np.abs(b).max(axis=2, keepdims=True)
    d = amax / 127.0
    with np.errstate(divide="ignore", invalid="ignore"):
        iden = np.where(amax > 0, 127.0 / amax, 0.0)
    q = np.rint(b * iden)
    return q, d, _fp16(d)


def _q8_k(x: np.ndarray) -> np.ndarray:
    n, k = x.shape
    b = x.reshape(n, k // 256, 256)
    idx = np.abs(b).argmax(axis=2)[..., None]                 # the first element of largest magnitude
    m = np.take_along_axis(b, idx, axis=2)
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = np.where(m != 0, -127.0 / m, 0.0)
        q = np.minimum(127.0, np.rint(iscale * b))
        d = np.where(m != 0, 1.0 / iscale, 0.0)
    return (q * d).reshape(n, k)


def quantize(x: np.ndarray, kind: str) -> np.ndarray:
    """x float64[n, k] -> the activation values ggml's dot products see, float64[n, k]."""
    x = np.asarray(x, dtype=np.float64)
    if kind == "f32":
        return x
    if kind == "f16":
        return _fp16(x)
    if kind == "bf16":
        return _bf16(x)
    if kind in ("q8_0", "q8_1"):
        if x.shape[1] % 32:
            raise ValueError(f"row length {x.shape[1]} is not a multiple of 32")
        q, _, d16 = _q8_32(x)
        return (q * d16).reshape(x.shape)
    if kind == "q8_k":
        if x.shape[1] % 256:
            raise ValueError(f"row length {x.shape[1]} is not a multiple of 256")
        return _q8_k(x)
    raise ValueError(f"unknown activation kind {kind!r}")


def q8_1_sums(x: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Per 32-block of x float64[n, k]: (d_fp16 * sum q: what the dequantised values sum to,
    s = fp16(d * sum q): the sum the Q4_1/Q5_1 dot uses for the weight's min term), each [n, k/32]."""
    q, d, d16 = _q8_32(np.asarray(x, dtype=np.float64))
    sq = q.sum(axis=2, keepdims=True)
    return (d16 * sq)[..., 0], _fp16(d * sq)[..., 0]
