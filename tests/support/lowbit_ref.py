"""numpy references, written from the block layouts (csrc/compute/mm_fp4_bits.c says them), for the weight types
the gguf package 0.19 cannot dequantise: Q1_0 (GGML type 41; gguf names it but has no dequantize) and Q2_0 (42;
gguf does not know it). NVFP4 (40) is tested against gguf.quants.dequantize itself.

    dequant(t, blocks uint8[n, bytes]) -> float32[n, blck]
    SIZES[t] = (elements, bytes) per block"""
from __future__ import annotations

import numpy as np

NVFP4, Q1_0, Q2_0 = 40, 41, 42
SIZES = {NVFP4: (64, 36), Q1_0: (128, 18), Q2_0: (64, 18)}
NAMES = {NVFP4: "NVFP4", Q1_0: "Q1_0", Q2_0: "Q2_0"}


def _d(b: np.ndarray) -> np.ndarray:
    return b[:, 0:2].copy().view(np.float16).astype(np.float32)          # [n, 1]


def dequant(t: int, b: np.ndarray) -> np.ndarray:
    b = np.ascontiguousarray(b, np.uint8).reshape(-1, SIZES[t][1])
    if t == Q1_0:   # element j: bit j % 8 of byte 2 + j / 8, set -> +d, clear -> -d
        bits = np.unpackbits(b[:, 2:], axis=1, bitorder="little").astype(np.float32)
        return (bits * 2.0 - 1.0).astype(np.float32) * _d(b)
    if t == Q2_0:   # element j: bits 2 (j % 4) of byte 2 + j / 4, value (code - 1) d
        q = b[:, 2:]
        codes = np.stack([(q >> (2 * s)) & 3 for s in range(4)], axis=2).reshape(len(b), 64)
        return (codes.astype(np.float32) - 1.0) * _d(b)
    if t == NVFP4:
        from gguf.quants import dequantize
        from gguf import GGMLQuantizationType as T
        return dequantize(b, T.NVFP4).reshape(len(b), 64)
    raise KeyError(t)
