"""One definition of the parameter vocabularies shared by every layer (context, runner, kernels, CLI).

POOLING    llama.cpp's pooling types accepted by Context(pooling=...)
KV_TYPES   K/V cache element types -> bytes per element (numpy dtypes in KV_DTYPES, the C kernels' storage
           codes in KV_DT_CODES: the ggml types UB_T_F32 / UB_T_F16 of csrc/compute/ub_matmul.h); bf16 and the
           quantised types (bytes per element of their blocks) are kept as uint8 rows, ubatch.compute.kv_quant
ROPE_*     llama.cpp's rope modes (LLAMA_ROPE_TYPE_NORM / NEOX / MROPE) and their names

Values that the C side defines too (the UB_ROPE_* enum of csrc/compute/ub_compute.h, the UB_T_* types of
csrc/compute/ub_matmul.h) are read from the compiled library, so the two cannot drift apart.
LLAMA_TOKEN_NULL  llama.cpp's "no token id" (-1)
ERR_LEN    the size of the error-message buffers handed to C
"""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

from ubatch._ffi import lib

POOLING: Tuple[str, ...] = ("none", "mean", "cls", "last")
KV_DTYPES = {"f32": np.float32, "f16": np.float16}
KV_TYPES: Dict[str, float] = {**{name: np.dtype(dt).itemsize for name, dt in KV_DTYPES.items()}, "bf16": 2,
                              "q8_0": 34 / 32, "q4_0": 18 / 32, "q4_1": 20 / 32, "q5_0": 22 / 32, "q5_1": 24 / 32,
                              "iq4_nl": 18 / 32}
KV_DT_CODES: Dict[np.dtype, int] = {np.dtype(np.float32): lib.UB_T_F32, np.dtype(np.float16): lib.UB_T_F16}

ROPE_NORM: int = lib.UB_ROPE_NORM      # adjacent pairs (llama)
ROPE_NEOX: int = lib.UB_ROPE_NEOX      # i with i + n_rot/2 (qwen2, gemma3)
ROPE_MROPE: int = lib.UB_ROPE_MROPE    # NEOX pairing, position section per pair
ROPE_MODES: Dict[int, str] = {ROPE_NORM: "NORM", ROPE_NEOX: "NEOX", ROPE_MROPE: "MROPE"}

LLAMA_TOKEN_NULL = -1
ERR_LEN = 512          # bytes of the buffer a C entry point writes its error message into

__all__ = ["ERR_LEN", "KV_DT_CODES", "KV_DTYPES", "KV_TYPES", "LLAMA_TOKEN_NULL", "POOLING", "ROPE_MODES",
           "ROPE_MROPE", "ROPE_NEOX", "ROPE_NORM"]
