"""ChatFormatterResponse: what a chat format gives for a conversation (llama-cpp-python's dataclass), and
StoppingCriteriaList (llama-cpp-python's `llama_cpp.StoppingCriteriaList`, which a Jinja format's response holds)."""
from __future__ import annotations

import dataclasses
from typing import Any, List, Optional, Union


class StoppingCriteriaList(list):
    """Stopping criteria (callables(input_ids, logits) -> bool): stop when any says so."""

    def __call__(self, input_ids, logits) -> bool:
        return any(c(input_ids, logits) for c in self)


@dataclasses.dataclass
class ChatFormatterResponse:
    """`prompt`: the rendered conversation; `stop`: the format's stop string(s), added to the request's;
    `stopping_criteria`: a StoppingCriteriaList (the Jinja formatter's stop on its stop token ids);
    `added_special`: the prompt already holds the BOS text (so the tokenizer must not add one)."""

    prompt: str
    stop: Optional[Union[str, List[str]]] = None
    stopping_criteria: Any = None
    added_special: bool = False


def stop_list(stop: Optional[Union[str, List[str]]]) -> List[str]:
    """A format's / request's stop as a list."""
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else list(stop)
