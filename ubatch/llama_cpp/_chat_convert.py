"""Text completions (dicts / chunk streams of Llama.create_completion) turned into chat completions, as
llama-cpp-python 0.3.36 turns them: plain assistant messages, or the answer of a forced tool call (its
arguments are the completion's text) with `tool_calls` and the deprecated `function_call`."""
from __future__ import annotations

from typing import Any, Dict, Iterator, Optional

Chunk = Dict[str, Any]


def logprobs_to_chat(lp: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """A completion's logprobs {tokens, token_logprobs, top_logprobs} -> a chat choice's {content, refusal}."""
    if lp is None:
        return None
    return {"content": [{"token": tok, "bytes": None, "logprob": logprob,
                         "top_logprobs": [{"token": t, "logprob": v, "bytes": None} for t, v in top.items()]}
                        for tok, logprob, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"])],
            "refusal": None}


def _head(chunk: Chunk, kind: str) -> Dict[str, Any]:
    return {"id": "chat" + chunk["id"], "object": kind, "created": chunk["created"], "model": chunk["model"]}


def text_to_chat(completion: Chunk) -> Dict[str, Any]:
    assert "usage" in completion
    c = completion["choices"][0]
    return dict(_head(completion, "chat.completion"),
                choices=[{"index": 0, "message": {"role": "assistant", "content": c["text"]},
                          "logprobs": logprobs_to_chat(c["logprobs"]), "finish_reason": c["finish_reason"]}],
                usage=completion["usage"])


def chunks_to_chat(chunks: Iterator[Chunk]) -> Iterator[Dict[str, Any]]:
    """A role chunk first, then one chunk per completion chunk (its text as content; {} once finished)."""
    for i, chunk in enumerate(chunks):
        head = _head(chunk, "chat.completion.chunk")
        c = chunk["choices"][0]
        if i == 0:
            yield dict(head, choices=[{"index": 0, "delta": {"role": "assistant"}, "logprobs": None,
                                       "finish_reason": None}])
        yield dict(head, choices=[{"index": 0, "delta": {"content": c["text"]} if c["finish_reason"] is None else {},
                                   "logprobs": logprobs_to_chat(c["logprobs"]), "finish_reason": c["finish_reason"]}])


def completion_to_chat(completion_or_chunks, stream: bool = False):
    return chunks_to_chat(completion_or_chunks) if stream else text_to_chat(completion_or_chunks)


def _call_delta(tool_name: str, tool_id: str, text: str) -> Dict[str, Any]:
    return {"role": None, "content": None, "function_call": {"name": tool_name, "arguments": text},
            "tool_calls": [{"index": 0, "id": tool_id, "type": "function",
                            "function": {"name": tool_name, "arguments": text}}]}


_EMPTY_DELTA = {"role": None, "content": None, "function_call": None, "tool_calls": None}


def _function_chunks(tool_name: str, chunks: Iterator[Chunk]) -> Iterator[Dict[str, Any]]:
    first = None
    for chunk in chunks:
        c = chunk["choices"][0]
        if first is None:
            first = chunk
            tool_id = "call_" + "_0_" + tool_name + "_" + chunk["id"]
            yield dict(_head(chunk, "chat.completion.chunk"),
                       choices=[{"index": 0, "finish_reason": None, "logprobs": None,
                                 "delta": {"role": "assistant", "content": None, "function_call": None,
                                           "tool_calls": None}}])
        yield dict(_head(chunk, "chat.completion.chunk"),
                   choices=[{"index": 0, "finish_reason": None, "logprobs": logprobs_to_chat(c["logprobs"]),
                             "delta": _call_delta(tool_name, tool_id, c["text"])}])
    if first is not None:
        yield dict(_head(first, "chat.completion.chunk"),
                   choices=[{"index": 0, "finish_reason": "tool_calls", "logprobs": None,
                             "delta": dict(_EMPTY_DELTA)}])


def completion_to_chat_function(tool_name: str, completion_or_chunks, stream: bool):
    """The completion's text as the arguments of one call of `tool_name` (finish_reason "tool_calls")."""
    if stream:
        return _function_chunks(tool_name, completion_or_chunks)
    completion = completion_or_chunks
    assert "usage" in completion
    c = completion["choices"][0]
    tool_id = "call_" + "_0_" + tool_name + "_" + completion["id"]
    return dict(_head(completion, "chat.completion"),
                choices=[{"index": 0,
                          "message": {"role": "assistant", "content": None,
                                      "function_call": {"name": tool_name, "arguments": c["text"]},
                                      "tool_calls": [{"id": tool_id, "type": "function",
                                                      "function": {"name": tool_name, "arguments": c["text"]}}]},
                          "logprobs": logprobs_to_chat(c["logprobs"]), "finish_reason": "tool_calls"}],
                usage=completion["usage"])
