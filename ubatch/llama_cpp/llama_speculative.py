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

from ubatch.engine.ngram import prompt_lookup_ngram


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
