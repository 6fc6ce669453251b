"""functionary-v2 streamed (llama-cpp-python 0.3.36's generate_streaming): the recipient is generated first;
text ("all") is streamed as content (a trailing "\\n<|from|>assistant\\n<|recipient|>" held back), a call as
tool_calls deltas (name first, then the argument pieces); another assistant turn continues the stream."""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, Optional

from ubatch.llama_cpp._chat_convert import logprobs_to_chat
from ubatch.llama_cpp._functionary import V2, _tool_id

_STOP_DELTA = {"role": None, "content": None, "function_call": None, "tool_calls": None}


def _chunk(cid: str, created, model, choice: Dict[str, Any]) -> Dict[str, Any]:
    return {"id": "chat" + cid, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [choice]}


def _call(tools, index: int, tool_id: str, name: Optional[str], args: str) -> Dict[str, Any]:
    if tools is not None:
        return {"tool_calls": [{"index": index, "id": "call_" + tool_id, "type": "function",
                                "function": {"name": name, "arguments": args}}]}
    return {"function_call": {"name": name, "arguments": args}}


def stream_v2(complete: Callable, grammar_of: Callable, tools, function_call, prompt: str,
              version: str = "v2") -> Iterator[dict]:
    assert version == "v2", "Streaming for v1 is not supported"      # raised on the first next(), as upstream
    stops = [V2["stop"], V2["frm"]]
    if isinstance(function_call, dict):
        prompt += f"{function_call['name']}\n{V2['content']}"
        grammar = grammar_of(function_call["name"])
        tool_id = _tool_id()
        chunk = None
        for i, chunk in enumerate(complete(prompt, stops, grammar)):
            text = chunk["choices"][0]["text"]
            if i == 0:
                yield _chunk(chunk["id"], chunk["created"], chunk["model"],
                             {"index": 0, "logprobs": None,
                              "delta": {"role": None, "content": None,
                                        **_call(tools, 0, tool_id, function_call["name"], "")}})
            if len(text.rstrip()) > 0:
                yield _chunk(chunk["id"], chunk["created"], chunk["model"],
                             {"index": 0, "logprobs": logprobs_to_chat(chunk["choices"][0]["logprobs"]),
                              "delta": {"role": None, "content": None,
                                        **_call(tools, 0, tool_id, None, text.rstrip())}})
        yield _chunk(chunk["id"], chunk["created"], chunk["model"],
                     {"index": 0, "finish_reason": "tool_calls" if tools is not None else "function_call",
                      "logprobs": None, "delta": dict(_STOP_DELTA)})
        return
    if not (isinstance(function_call, str) and function_call == "auto"):
        return
    cid = created = None
    tool_index = 0
    while True:
        name_text = ""
        for chunk in complete(prompt, V2["content"], None):
            name_text += chunk["choices"][0]["text"]
        cid = chunk["id"] if cid is None else cid
        created = chunk["created"] if created is None else created
        name = name_text.strip()
        grammar = None
        if name == "all":
            prompt += "all\n<|content|>"
            yield _chunk(cid, created, chunk["model"], {"index": 0, "delta": {"role": "assistant", "content": ""},
                                                        "logprobs": None, "finish_reason": None})
        else:
            prompt += f"{name}\n<|content|>"
            grammar = grammar_of(name)
            tool_id = _tool_id()
            yield _chunk(cid, created, chunk["model"],
                         {"index": 0, "logprobs": logprobs_to_chat(chunk["choices"][0]["logprobs"]),
                          "delta": {"role": "assistant", "content": None,
                                    **_call(tools, tool_index, tool_id, name, "")}})
        stops = [V2["recipient"], V2["stop"]]
        completion = complete(prompt, stops, grammar)
        if name == "all":
            text_all = ""
            held, buffer, at_end = "\n<|from|>assistant\n<|recipient|>", [], False
            for i, chunk in enumerate(completion):
                t = chunk["choices"][0]["text"]
                text_all += t
                if at_end:
                    buffer.append(t.strip(" "))
                    if held.startswith("".join(buffer)):
                        continue
                    buffer.pop()
                    while len(buffer) > 0:
                        yield _chunk(cid, created, chunk["model"],
                                     {"index": 0, "logprobs": logprobs_to_chat(chunk["choices"][0]["logprobs"]),
                                      "delta": {"role": "assistant", "content": buffer.pop(0)}})
                    at_end = False
                elif t == "\n":
                    at_end = True
                    buffer.append(t.strip(" "))
                    continue
                if len(buffer) == 0 and len(t) > 0:
                    yield _chunk(cid, created, chunk["model"],
                                 {"index": 0, "logprobs": logprobs_to_chat(chunk["choices"][0]["logprobs"]),
                                  "delta": {"role": "assistant", "content": t if i > 0 else t.lstrip()}})
            if "<|from|> assistant" in text_all or "<|from|>assistant" in text_all:
                if text_all.endswith("\n<|from|>assistant\n"):
                    cleaned = text_all[: -len("\n<|from|>assistant\n")].strip()
                elif text_all.endswith("\n<|from|> assistant\n"):
                    cleaned = text_all[: -len("\n<|from|> assistant\n")].strip()
                else:
                    cleaned = text_all.strip()
                prompt += f"{cleaned}\n<|from|>assistant\n<|recipient|>"
            else:
                yield _chunk(cid, created, chunk["model"], {"index": 0, "delta": {}, "logprobs": None,
                                                            "finish_reason": "stop"})
                break
        else:
            body = ""
            for chunk in completion:
                t = chunk["choices"][0]["text"]
                body += t
                if len(t.rstrip()) > 0:
                    yield _chunk(cid, created, chunk["model"],
                                 {"index": 0, "logprobs": logprobs_to_chat(chunk["choices"][0]["logprobs"]),
                                  "delta": {"role": None, "content": None,
                                            **_call(tools, tool_index, tool_id, None, t.rstrip())}})
            prompt += body.strip()
            last = chunk
            body += "".join(c["choices"][0]["text"] for c in complete(prompt, stops, None))
            if ("<|from|> assistant" in body or "<|from|>assistant" in body) and tools is not None:
                prompt += "\n<|from|>assistant\n<|recipient|>"
                tool_index += 1
            else:
                yield _chunk(cid, created, last["model"],
                             {"index": 0, "finish_reason": "tool_calls" if tools is not None else "function_call",
                              "logprobs": None, "delta": dict(_STOP_DELTA)})
                break
