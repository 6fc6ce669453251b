"""llama-cpp-python 0.3.36's `llama_cpp.llama_speculative`: the draft-model interface of `Llama(draft_model=...)`.

* `LlamaDraftModel`: abstract; `__call__(input_ids, /, **kwargs)` gets every token so far (prompt + generated,
  numpy intc) and returns the tokens it guesses come next (numpy intc, any length, possibly empty).
* `LlamaPromptLookupDecoding(max_ngram_size=2, num_pred_tokens=10)`: guesses by prompt lookup: the tokens that
  followed the earliest earlier occurrence of the last n-gram (n = max_ngram_size down to 1), at most
  num_pred_tokens of them. Same names, defaults and results as llama-cpp-python's; the search is one C call
  (csrc/engine/ngram.c) instead of numpy sliding windows.

With ubatch the draft only changes the speed: a verified draft gives exactly the tokens decoding without it gives
(the logits of a row do not depend on the other rows of the batch), see ubatch/engine/speculative.py.
"""
from __future__ import annotations

import abc
from typing import Any

import numpy as np
import numpy.typing as npt

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


def prompt_lookup(input_ids, max_ngram_size: int, num_pred_tokens: int, latest: bool = False) -> slice:
    """The slice of input_ids that LlamaPromptLookupDecoding proposes (empty slice: no candidate)."""
    return prompt_lookup_ngram(input_ids, max_ngram_size, num_pred_tokens, latest)[0]


class LlamaDraftModel(abc.ABC):
    @abc.abstractmethod
    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        raise NotImplementedError()


class LlamaPromptLookupDecoding(LlamaDraftModel):
    """Based on https://github.com/apoorvumang/prompt-lookup-decoding (as llama-cpp-python's)."""

    def __init__(self, max_ngram_size: int = 2, num_pred_tokens: int = 10) -> None:
        self.max_ngram_size = max_ngram_size
        self.num_pred_tokens = num_pred_tokens

    @staticmethod
    def find_candidate_pred_tokens(input_ids: npt.NDArray[np.intc], max_ngram_size: int,
                                   num_pred_tokens: int) -> npt.NDArray[np.intc]:
        sl = prompt_lookup(input_ids, max_ngram_size, num_pred_tokens)
        if sl.stop <= sl.start:
            return np.array([], dtype=np.intc)
        return np.asarray(input_ids)[sl]

    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        return self.find_candidate_pred_tokens(input_ids=input_ids, max_ngram_size=self.max_ngram_size,
                                               num_pred_tokens=self.num_pred_tokens)


__all__ = ["LlamaDraftModel", "LlamaPromptLookupDecoding", "prompt_lookup", "prompt_lookup_ngram"]
