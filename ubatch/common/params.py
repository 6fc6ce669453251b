"""One definition of the parameter vocabularies shared by every layer (context, runner, kernels, CLI).

POOLING    llama.cpp's pooling types accepted by Context(pooling=...)
KV_TYPES   K/V cache element types -> bytes per element (numpy dtypes in KV_DTYPES)
ROPE_*     llama.cpp's rope modes (LLAMA_ROPE_TYPE_NORM / NEOX / MROPE) and their names
LLAMA_TOKEN_NULL  llama.cpp's "no token id" (-1)
"""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

POOLING: Tuple[str, ...] = ("none", "mean", "cls", "last")
KV_TYPES: Dict[str, int] = {"f32": 4, "f16": 2}
KV_DTYPES = {"f32": np.float32, "f16": np.float16}

ROPE_NORM = 0
ROPE_NEOX = 2
ROPE_MROPE = 8
ROPE_MODES: Dict[int, str] = {ROPE_NORM: "NORM", ROPE_NEOX: "NEOX", ROPE_MROPE: "MROPE"}

LLAMA_TOKEN_NULL = -1

__all__ = ["KV_DTYPES", "KV_TYPES", "LLAMA_TOKEN_NULL", "POOLING", "ROPE_MODES", "ROPE_MROPE", "ROPE_NEOX",
           "ROPE_NORM"]
