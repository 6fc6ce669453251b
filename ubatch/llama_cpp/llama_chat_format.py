"""Chat formatting for the drop-in Llama: the GGUF's Jinja2 chat template rendered as llama-cpp-python's
Jinja2ChatFormatter renders it (add_generation_prompt, bos/eos texts, raise_exception, strftime_now), and the
conversion of completion dicts into chat.completion dicts / chunks."""
from __future__ import annotations

import dataclasses
import datetime
from typing import Any, Dict, Iterator, List, Optional, Union


@dataclasses.dataclass
class ChatFormatterResponse:
    prompt: str
    stop: Optional[Union[str, List[str]]] = None
    stopping_criteria: Any = None
    added_special: bool = False


class Jinja2ChatFormatter:
    def __init__(self, template: str, eos_token: str, bos_token: str, add_generation_prompt: bool = True,
                 stop_token_ids: Optional[List[int]] = None) -> None:
        try:
            import jinja2
            from jinja2.sandbox import ImmutableSandboxedEnvironment
        except ImportError as e:  # pragma: no cover
            raise ImportError("chat templates need jinja2 (pip install jinja2)") from e
        self.template = template
        self.eos_token = eos_token
        self.bos_token = bos_token
        self.add_generation_prompt = add_generation_prompt
        self.stop_token_ids = set(stop_token_ids) if stop_token_ids is not None else None
        env = ImmutableSandboxedEnvironment(loader=jinja2.BaseLoader(), trim_blocks=True, lstrip_blocks=True)
        self._environment = env.from_string(template)

    def __call__(self, *, messages: List[Dict[str, Any]], functions=None, function_call=None, tools=None,
                 tool_choice=None, **kwargs) -> ChatFormatterResponse:
        def raise_exception(message: str):
            raise ValueError(message)

        def strftime_now(fmt: str) -> str:
            return datetime.datetime.now().strftime(fmt)

        prompt = self._environment.render(messages=messages, eos_token=self.eos_token, bos_token=self.bos_token,
                                          raise_exception=raise_exception, strftime_now=strftime_now,
                                          add_generation_prompt=self.add_generation_prompt, functions=functions,
                                          function_call=function_call, tools=tools, tool_choice=tool_choice)
        return ChatFormatterResponse(prompt=prompt, stop=[self.eos_token], added_special=True)


def completion_to_chat(completion: Dict[str, Any]) -> Dict[str, Any]:
    return {
        "id": "chat" + completion["id"],
        "object": "chat.completion",
        "created": completion["created"],
        "model": completion["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": c["text"]},
                     "logprobs": _chat_logprobs(c.get("logprobs")), "finish_reason": c["finish_reason"]}
                    for c in completion["choices"]],
        "usage": completion["usage"],
    }


def _chat_logprobs(lp) -> Optional[Dict[str, Any]]:
    if lp is None:
        return None
    content = []
    for tok, logprob, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        content.append({"token": tok, "bytes": None, "logprob": logprob,
                        "top_logprobs": [{"token": t, "logprob": v, "bytes": None} for t, v in (top or {}).items()]})
    return {"content": content, "refusal": None}


def chunks_to_chat(chunks: Iterator[Dict[str, Any]]) -> Iterator[Dict[str, Any]]:
    first = True
    for chunk in chunks:
        if first:
            yield {"id": "chat" + chunk["id"], "model": chunk["model"], "created": chunk["created"],
                   "object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": {"role": "assistant"}, "logprobs": None, "finish_reason": None}]}
            first = False
        c = chunk["choices"][0]
        if c["finish_reason"] is not None:
            yield {"id": "chat" + chunk["id"], "model": chunk["model"], "created": chunk["created"],
                   "object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": c["finish_reason"]}]}
        else:
            yield {"id": "chat" + chunk["id"], "model": chunk["model"], "created": chunk["created"],
                   "object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": {"content": c["text"]},
                                "logprobs": _chat_logprobs(c.get("logprobs")), "finish_reason": None}]}


def format_llama2(*, messages: List[Dict[str, Any]], **kwargs) -> ChatFormatterResponse:
    """llama-cpp-python's "llama-2" format (its fallback when the GGUF has no chat template)."""
    system = next(((m.get("content") or "") for m in messages if m["role"] == "system"), "")
    if system:
        system = f"[INST] <<SYS>>\n{system}\n<</SYS>>"
    roles = {"user": "<s>[INST]", "assistant": "[/INST]"}
    turns = [(roles[m["role"]], m["content"] if isinstance(m.get("content"), str) else None)
             for m in messages if m["role"] in roles]
    seps = (" ", "</s>")
    out = system + seps[0]
    for i, (role, text) in enumerate(turns):
        if system and i == 0:
            out += (text or "") + seps[i % 2]
        elif text:
            out += role + text + " " + seps[i % 2]
        else:
            out += role + " "
    return ChatFormatterResponse(prompt=out + "[/INST]")


BUILTIN_FORMATS = {"llama-2": format_llama2}
