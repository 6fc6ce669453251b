"""MeetKai functionary's prompts: the TypeScript-like namespace listing the functions (v0 indents it, v1 / v2
do not), and llama-cpp-python 0.3.36's "functionary-v1" / "functionary-v2" handler, which renders the
conversation with the model's Hugging Face tokenizer (Llama(tokenizer=LlamaHFTokenizer...)) and then steers the
model turn by turn (v2: <|recipient|> name, <|content|> body, <|stop|>; v1: <|START_OF_FUNCTION_CALL|>)."""
from __future__ import annotations

import random
import string
from typing import Any, Dict, List

from ubatch.llama_cpp import _chat_convert as conv

FUNCTIONARY_SYSTEM = ("A chat between a curious user and an artificial intelligence assistant. The assistant gives "
                      "helpful, detailed, and polite answers to the user's questions. The assistant calls functions "
                      "with appropriate input when necessary")


def _type_of(param: Dict[str, Any], level: int) -> str:
    indent = "  " * level
    if "$ref" in param:
        return param["$ref"].split("/")[-1]
    if param.get("type") == "array":
        return f"Array<{_type_of(param.get('items', {}), level + 1)}>"
    if param.get("type") == "object":
        out = "{\n"
        for name, p in param.get("properties", {}).items():
            out += f"{indent}  {name}: {_type_of(p, level + 1)},\n"
        return out + indent + "}"
    if "enum" in param:
        return " | ".join(f'"{v}"' for v in param["enum"])
    return param.get("type", "any")


def _shared_defs(defs: Dict[str, Any], level: int) -> str:
    indent = "  " * level
    out = ""
    for name, d in defs.items():
        out += f"{indent}type {name} = "
        if d.get("type") == "object":
            out += _type_of(d, level)
        elif "enum" in d:
            out += " | ".join(f'"{v}"' for v in d["enum"])
        out += ";\n"
    return out


def schema_from_functions(functions: List[dict], namespace: str = "functions", compact: bool = True) -> str:
    """The namespace text; compact=False: v0's (two-space indented entries, a newline after the closing line)."""
    pad = "" if compact else "  "
    out = "// Supported function definitions that should be called when necessary.\n"
    out += f"namespace {namespace} {{\n\n"
    defs: Dict[str, Any] = {}
    for f in functions:
        defs.update(f.get("parameters", {}).get("$defs", {}))
    out += _shared_defs(defs, 1)
    for f in functions:
        params = f.get("parameters", {})
        required = params.get("required", [])
        out += f"{pad}// {f.get('description', '')}\n"
        out += f"{pad}type {f['name']} = (_: {{\n"
        for name, p in params.get("properties", {}).items():
            opt = "" if name in required else "?"
            out += f"{pad}{pad}// {p.get('description', '')}\n"
            out += f"{pad}{pad}{name}{opt}: {_type_of(p, 2)},\n"
        out += f"{pad}}}) => any;\n\n"
    out += f"}} // namespace {namespace}" + ("" if compact else "\n")
    return out


def _tool_id() -> str:
    return "".join(random.choice(string.ascii_letters + string.digits) for _ in range(24))


V1 = dict(end_assistant="<|END_OF_ASSISTANT|>", start_call="<|START_OF_FUNCTION_CALL|>",
          end_call="<|END_OF_FUNCTION_CALL|>")
V2 = dict(recipient="<|recipient|>", frm="<|from|>", stop="<|stop|>", content="<|content|>")


def functionary_v1_v2_chat_handler(llama, messages: List[dict], functions=None, function_call=None, tools=None,
                                   tool_choice=None, temperature: float = 0.2, top_p: float = 0.95, top_k: int = 40,
                                   min_p: float = 0.05, typical_p: float = 1.0, stream: bool = False, stop=[],
                                   response_format=None, max_tokens=None, presence_penalty: float = 0.0,
                                   frequency_penalty: float = 0.0, repeat_penalty: float = 1.1, tfs_z: float = 1.0,
                                   mirostat_mode: int = 0, mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                                   model=None, logits_processor=None, grammar=None, **kwargs):
    from ubatch.llama_cpp._chat_tools import _sampling, _schema_grammar
    s = _sampling(locals())
    tokenizer = llama.tokenizer_
    assert hasattr(tokenizer, "hf_tokenizer"), ("Please provide a valid hf_tokenizer_path from "
                                                "https://huggingface.co/meetkai when initializing the Llama class")
    version = "v1" if V1["start_call"] in tokenizer.hf_tokenizer.additional_special_tokens else "v2"
    if tools is not None:
        functions = [t["function"] for t in tools if t["type"] == "function"]
    if tool_choice is not None:
        function_call = tool_choice if isinstance(tool_choice, str) else tool_choice["function"]
    elif function_call is None:
        function_call = "auto"

    # the prompt: the function namespace (none for "none"), the system message, the conversation
    head: List[dict] = []
    if function_call == "none":
        head.append({"role": "system", "content": schema_from_functions([])})
    elif functions is not None:
        head.append({"role": "system", "content": schema_from_functions(functions)})
    elif tools is not None:
        head.append({"role": "system", "content": schema_from_functions(
            [t["function"] for t in tools if t["type"] == "function"])})
    head.append({"role": "system", "content": FUNCTIONARY_SYSTEM})
    for m in messages:
        if m["role"] == "function" and "name" in m:
            m["name"] = f"functions.{m['name']}"
        if "function_call" in m:
            m["function_call"]["name"] = f"functions.{m['function_call']['name']}"
    suffix = "assistant:\n" if version == "v1" else "<|from|>assistant\n<|recipient|>"
    prompt = tokenizer.hf_tokenizer.apply_chat_template(head + list(messages), tokenize=False) + suffix

    def complete(prompt: str, stop, grammar):
        return llama.create_completion(prompt=prompt, temperature=temperature, stream=stream, stop=stop,
                                       max_tokens=max_tokens, grammar=grammar, **s)

    def grammar_of(name):
        body = None
        for f in functions or []:
            if f["name"] == name:
                body = f["parameters"]
                break
        for t in tools or []:
            if t["type"] == "function" and t["function"]["name"] == name:
                body = t["function"]["parameters"]
                break
        return _schema_grammar(body, llama.verbose)

    if function_call == "none" or functions is None or len(functions) == 0:
        if version == "v1":
            stop = V1["end_assistant"]
        else:
            stop = V2["stop"]
            prompt += "all\n<|content|>"
        out = complete(prompt, stop, grammar)
        if stream is False:
            out["choices"][0]["text"] = out["choices"][0]["text"].lstrip()
        return conv.completion_to_chat(out, stream=stream)

    if stream is not False:
        from ubatch.llama_cpp._functionary_stream import stream_v2
        return stream_v2(complete, grammar_of, tools, function_call, prompt, version)

    content = ""
    calls: List[str] = []
    bodies: List[str] = []
    n_completion = 0
    if version == "v1":
        if isinstance(function_call, str) and function_call == "auto":
            stops = ["\n", V1["end_assistant"]]
        elif isinstance(function_call, dict):
            prompt += f"{V1['start_call']}{function_call['name']}:\n"
            stops = V1["end_call"]
            function_call = function_call["name"]
            calls.append(function_call)
            grammar = grammar_of(function_call)
        else:
            stops = ["\n", V1["end_assistant"]]
        completion = complete(prompt, stops, grammar)
        text = completion["choices"][0]["text"]
        n_completion += completion["usage"]["completion_tokens"]
        if V1["start_call"] not in prompt and V1["start_call"] not in text:
            completion["usage"]["completion_tokens"] = n_completion
            return conv.completion_to_chat(completion, stream=stream)
        if V1["start_call"] not in prompt:
            prompt += text.replace(f"{V1['start_call']} ", V1["start_call"]) + "\n"
            calls.append(text.split(V1["start_call"])[-1][:-1].strip())
            completion = complete(prompt, V1["end_call"], grammar_of(calls[-1]))
            n_completion += completion["usage"]["completion_tokens"]
            bodies.append(completion["choices"][0]["text"].strip())
        else:
            bodies.append(text.strip())
    elif isinstance(function_call, dict):
        prompt += f"{function_call['name']}\n{V2['content']}"
        function_call = function_call["name"]
        calls.append(function_call)
        completion = complete(prompt, [V2["stop"], V2["frm"]], grammar_of(function_call))
        n_completion += completion["usage"]["completion_tokens"]
        bodies.append(completion["choices"][0]["text"].strip())
    elif isinstance(function_call, str) and function_call == "auto":
        while True:
            completion = complete(prompt, V2["content"], None)          # the recipient: "all" or a function
            text = completion["choices"][0]["text"]
            n_completion += completion["usage"]["completion_tokens"]
            name = text.strip()
            grammar = None
            if name == "all":
                prompt += "all\n<|content|>"
            else:
                prompt += f"{name}\n<|content|>"
                calls.append(name)
                grammar = grammar_of(name)
            stops = [V2["recipient"], V2["stop"]]
            completion = complete(prompt, stops, grammar)
            text = completion["choices"][0]["text"]
            n_completion += completion["usage"]["completion_tokens"]
            if name == "all":
                # (kept as upstream: the second test slices one character, not a suffix)
                if text.endswith("\n<|from|>assistant\n"):
                    content += text[: -len("\n<|from|>assistant\n")]
                if text.endswith("\n<|from|> assistant\n"):
                    content += text[-len("\n<|from|> assistant\n")]
                else:
                    content += text
                content = content.lstrip()
                if "<|from|> assistant" in text or "<|from|>assistant" in text:
                    if text.endswith("\n<|from|>assistant\n"):
                        cleaned = text[: -len("\n<|from|>assistant\n")].strip()
                    elif text.endswith("\n<|from|> assistant\n"):
                        cleaned = text[-len("\n<|from|> assistant\n")].strip()
                    else:
                        cleaned = text.strip()
                    prompt += f"{cleaned}\n<|from|>assistant\n<|recipient|>"
                else:
                    break
            else:
                bodies.append(text.strip())
                prompt += text.strip()
                completion = complete(prompt, stops, None)               # another turn?
                n_completion += completion["usage"]["completion_tokens"]
                more = completion["choices"][0]["text"]
                if "<|from|> assistant" in more or "<|from|>assistant" in more:
                    prompt += "\n<|from|>assistant\n<|recipient|>"
                else:
                    break

    assert "usage" in completion
    assert len(calls) == len(bodies)
    tool_calls = [{"id": "call_" + _tool_id(), "type": "function", "function": {"name": n, "arguments": b}}
                  for n, b in zip(calls, bodies)]
    extra: Dict[str, Any] = {}
    if tool_calls:
        if tools is not None:
            extra["tool_calls"] = tool_calls
        else:
            extra["function_call"] = {"name": tool_calls[0]["function"]["name"],
                                      "arguments": tool_calls[0]["function"]["arguments"]}
    completion["usage"]["completion_tokens"] = n_completion
    return {"id": "chat" + completion["id"], "object": "chat.completion", "created": completion["created"],
            "model": completion["model"],
            "choices": [{"index": 0, "logprobs": conv.logprobs_to_chat(completion["choices"][0]["logprobs"]),
                         "message": {"role": "assistant", "content": None if content == "" else content, **extra},
                         "finish_reason": "tool_calls" if tool_calls else "stop"}],
            "usage": completion["usage"]}
