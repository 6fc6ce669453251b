"""Prompt lookup: the continuation of an earlier occurrence of the last n-gram of a token history, one C call
(csrc/engine/ngram.c). The engine's PromptLookupDrafter (speculative.py) and the drop-in's
LlamaPromptLookupDecoding (ubatch.llama_cpp.llama_speculative) both draft with it."""
from __future__ import annotations

import numpy as np

from ubatch._ffi import ffi, lib


def _int32_history(input_ids) -> np.ndarray:
    a = np.asarray(input_ids)
    if a.ndim != 1:
        raise ValueError(f"input_ids must be a 1-D array of token ids, got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"input_ids must hold integer token ids, got dtype {a.dtype}")
    if a.dtype != np.int32:
        if a.size and (a.min() < -(2 ** 31) or a.max() >= 2 ** 31):
            raise ValueError("input_ids: a token id does not fit in 32 bits")
        a = a.astype(np.int32)
    return np.ascontiguousarray(a)


def prompt_lookup_ngram(input_ids, max_ngram_size: int, num_pred_tokens: int, latest: bool = False):
    """(slice of input_ids that prompt lookup proposes, the n-gram size that matched); (empty slice, 0) when
    there is no candidate. latest picks the most recent occurrence of the n-gram instead of the earliest."""
    a = _int32_history(input_ids)
    start = ffi.new("int64_t *")
    g = ffi.new("int32_t *")
    n = lib.ub_ngram_lookup(ffi.from_buffer("int32_t[]", a) if a.size else ffi.NULL, a.size,
                            int(max(min(max_ngram_size, 2 ** 31 - 1), -1)),
                            int(max(min(num_pred_tokens, 2 ** 31 - 1), -1)), 1 if latest else 0, start, g)
    if n < 0:
        raise ValueError("prompt lookup: invalid arguments")
    return slice(int(start[0]), int(start[0]) + int(n)), int(g[0])


__all__ = ["prompt_lookup_ngram"]
