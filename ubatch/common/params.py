"""One definition of the parameter vocabularies shared by every layer (context, runner, kernels, CLI).

POOLING    llama.cpp's pooling types accepted by Context(pooling=...)
KV_TYPES   K/V cache element types (llama.cpp's type_k / type_v names) -> bytes per element (numpy dtypes of the
           float ones in KV_DTYPES; the others are kept as uint8 rows of their blocks, ubatch.compute.kv_quant)
ROPE_*     llama.cpp's rope modes (LLAMA_ROPE_TYPE_NORM / NEOX / MROPE) and their names
LLAMA_TOKEN_NULL  llama.cpp's "no token id" (-1)
"""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

POOLING: Tuple[str, ...] = ("none", "mean", "cls", "last")
KV_TYPES: Dict[str, float] = {"f32": 4, "f16": 2, "bf16": 2, "q8_0": 34 / 32, "q4_0": 18 / 32, "q4_1": 20 / 32,
                              "q5_0": 22 / 32, "q5_1": 24 / 32, "iq4_nl": 18 / 32}
KV_DTYPES = {"f32": np.float32, "f16": np.float16}

ROPE_NORM = 0
ROPE_NEOX = 2
ROPE_MROPE = 8
ROPE_MODES: Dict[int, str] = {ROPE_NORM: "NORM", ROPE_NEOX: "NEOX", ROPE_MROPE: "MROPE"}

LLAMA_TOKEN_NULL = -1

__all__ = ["KV_DTYPES", "KV_TYPES", "LLAMA_TOKEN_NULL", "POOLING", "ROPE_MODES", "ROPE_MROPE", "ROPE_NEOX",
           "ROPE_NORM"]
