"""llama-cpp-python 0.3.36's function-calling chat handlers, re-written: "chatml-function-calling" (a ChatML
prompt listing the tools; forced tool: arguments under the tool's schema grammar; auto: a grammar choosing
"message:" or "functions.<name>:", then each call's arguments, until the model ends its turn) and "functionary"
(MeetKai functionary v0's TypeScript-like namespace prompt). Same prompts, stop strings, grammars and answers
as llama-cpp-python (tests/chat/test_chat_tools.py replays its recorded calls). functionary-v1 / -v2:
ubatch.llama_cpp._functionary."""
from __future__ import annotations

import json
import sys
from typing import Any, Dict, List, Optional

from ubatch.llama_cpp import _chat_convert as conv
from ubatch.llama_cpp._functionary import functionary_v1_v2_chat_handler, schema_from_functions  # noqa: F401

_CHATML_TOOLS_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message.role }}\n"
    "{% if message.role == 'system' %}"
    "{{ message.content }}"
    "{% if tool_calls %}"
    "\n\nYou have access to the following functions:\n"
    "{% for tool in tools %}"
    "\nfunctions.{{ tool.function.name }}:\n"
    "{{ tool.function.parameters | tojson }}"
    "\n{% endfor %}"
    "\n\nYou can respond to users messages with either a single message or one or more function calls."
    "\n\nTo respond with a message begin the message with 'message:', use the following format:"
    "\n\nmessage:"
    "\n<message>"
    "\n\nTo respond with one or more function calls begin the message with 'functions.<function_name>:', use the "
    "following format:"
    "\n\nfunctions.<function_name>:"
    '\n{ "arg1": "value1", "arg2": "value2" }'
    "\nfunctions.<function_name>:"
    '\n{ "arg1": "value1", "arg2": "value2" }'
    "{% endif %}"
    "<|im_end|>\n"
    "{% endif %}"
    "{% if message.role == 'user' %}"
    "{{ message.content }}"
    "<|im_end|>\n"
    "{% endif %}"
    "{% if message.role == 'assistant' %}"
    "{% if message.content and message.content | length > 0 %}"
    "{% if tool_calls %}"
    "message:\n"
    "{% endif %}"
    "{{ message.content }}"
    "<|im_end|>\n"
    "{% endif %}"
    "{% if 'tool_calls' in message %}"
    "{% for tool_call in message.tool_calls %}"
    "functions.{{ tool_call.function.name }}:\n"
    "{{ tool_call.function.arguments }}"
    "{% endfor %}"
    "<|im_end|>\n"
    "{% endif %}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _chatml_tools_renderer():
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    # llama-cpp-python renders this one with HTML autoescaping and strict undefined (not the chat environment)
    return ImmutableSandboxedEnvironment(autoescape=jinja2.select_autoescape(["html", "xml"]),
                                         undefined=jinja2.StrictUndefined).from_string(_CHATML_TOOLS_TEMPLATE)


def _grammar_text(text: str, verbose: bool):
    from ubatch.llama_cpp import llama_grammar
    return llama_grammar.LlamaGrammar.from_string(text, verbose=verbose)


def _schema_grammar(schema, verbose: bool):
    """The grammar of a JSON schema (JSON's when the schema does not convert), as llama-cpp-python falls back."""
    from ubatch.llama_cpp import llama_grammar
    try:
        return llama_grammar.LlamaGrammar.from_json_schema(json.dumps(schema), verbose=verbose)
    except NotImplementedError:
        raise
    except Exception as e:
        if verbose:
            print(f"Failed to parse function body as JSON schema, falling back to default grammar\n{e}",
                  file=sys.stderr)
        return llama_grammar.LlamaGrammar.from_string(llama_grammar.JSON_GBNF, verbose=verbose)


def _sampling(kw: Dict[str, Any]) -> Dict[str, Any]:
    keys = ("top_p", "top_k", "min_p", "typical_p", "presence_penalty", "frequency_penalty", "repeat_penalty",
            "tfs_z", "mirostat_mode", "mirostat_tau", "mirostat_eta", "model", "logits_processor")
    return {k: kw[k] for k in keys}


def chatml_function_calling(llama, messages: List[dict], functions=None, function_call=None, tools=None,
                            tool_choice=None, temperature: float = 0.2, top_p: float = 0.95, top_k: int = 40,
                            min_p: float = 0.05, typical_p: float = 1.0, stream: bool = False, stop=[],
                            response_format=None, max_tokens=None, presence_penalty: float = 0.0,
                            frequency_penalty: float = 0.0, repeat_penalty: float = 1.1, tfs_z: float = 1.0,
                            mirostat_mode: int = 0, mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                            model=None, logits_processor=None, grammar=None, logprobs=None, top_logprobs=None,
                            **kwargs):
    from ubatch.llama_cpp.llama_chat_format import _grammar_for_response_format, legacy_to_tools
    s = _sampling(locals())
    render = _chatml_tools_renderer().render
    tools, tool_choice = legacy_to_tools(functions, function_call, tools, tool_choice)
    stop = [stop, "<|im_end|>"] if isinstance(stop, str) else stop + ["<|im_end|>"] if stop else ["<|im_end|>"]
    lp = top_logprobs if logprobs else None
    verbose = llama.verbose

    # no tool asked for: a plain ChatML conversation
    if tool_choice is None or tool_choice == "none" or tools is None or len(tools) == 0:
        prompt = render(messages=messages, tools=[], tool_calls=None, add_generation_prompt=True)
        if response_format is not None and response_format["type"] == "json_object":
            grammar = _grammar_for_response_format(response_format)
        return conv.completion_to_chat(llama.create_completion(
            prompt=prompt, temperature=temperature, stream=stream, stop=stop, max_tokens=max_tokens,
            grammar=grammar, logprobs=lp, **s), stream=stream)

    # a forced tool: its arguments under its schema
    if isinstance(tool_choice, dict):
        name = tool_choice["function"]["name"]
        tool = next((t for t in tools if t["function"]["name"] == name), None)
        if tool is None:
            raise ValueError(f"Tool with name '{name}' not found in tools")
        prompt = render(messages=messages, tools=tools, tool_calls=True, add_generation_prompt=True)
        prompt += f"functions.{name}:\n"
        grammar = _schema_grammar(tool["function"]["parameters"], verbose)
        out = llama.create_completion(prompt=prompt, temperature=temperature, stream=stream, stop=stop,
                                      max_tokens=max_tokens, grammar=grammar, **s)
        return conv.completion_to_chat_function(name, out, stream)

    # "auto": a message or one or more calls, the model chooses under a grammar
    assert isinstance(tool_choice, str) and tool_choice == "auto"
    names = " | ".join(f'"functions.{t["function"]["name"]}:"' for t in tools)
    first_grammar = f'root   ::= functions | "message:"\nfunctions ::= {names}\n'
    next_grammar = f'root   ::= functions | "<|im_end|>"\nfunctions ::= {names}\n'
    prompt = render(messages=messages, tools=tools, tool_calls=True, add_generation_prompt=True)
    head = llama.create_completion(prompt=prompt, temperature=0, stream=False, stop=[":"], max_tokens=None,
                                   grammar=_grammar_text(first_grammar, verbose), **s)
    text = head["choices"][0]["text"]
    if "message" in text:
        return conv.completion_to_chat(llama.create_completion(
            prompt=prompt + "message:\n", temperature=temperature, stream=stream, stop=["<|im_end|>"],
            logprobs=lp, max_tokens=None, grammar=_grammar_text(next_grammar, verbose), **s), stream=stream)
    name = text[len("functions."):]
    tool = next((t for t in tools if t["function"]["name"] == name), None)
    if stream:
        raise ValueError("Automatic streaming tool choice is not supported")
    calls: List[tuple] = []
    while tool is not None:
        prompt += f"functions.{name}:\n"
        args = llama.create_completion(prompt=prompt, temperature=temperature, stream=False, stop=stop,
                                       max_tokens=None, grammar=_schema_grammar(tool["function"]["parameters"],
                                                                                verbose), **s)
        calls.append((name, args))
        prompt += args["choices"][0]["text"] + "\n"
        nxt = llama.create_completion(prompt=prompt, temperature=temperature, stream=False, stop=stop,
                                      max_tokens=None, grammar=_grammar_text(next_grammar, verbose), **s)
        name = nxt["choices"][0]["text"][len("functions."):]
        tool = next((t for t in tools if t["function"]["name"] == name), None)
    legacy = ({"function_call": {"name": name, "arguments": calls[0][1]["choices"][0]["text"]}}
              if len(calls) == 1 else {})

    def usage(key: str) -> int:
        return sum(c["usage"][key] if "usage" in c else 0 for _, c in calls)

    return {"id": "chat" + head["id"], "object": "chat.completion", "created": head["created"],
            "model": head["model"],
            "choices": [{"finish_reason": "tool_calls", "index": 0,
                         "logprobs": conv.logprobs_to_chat(head["choices"][0]["logprobs"]),
                         "message": {"role": "assistant", "content": None,
                                     "tool_calls": [{"id": "call_" + f"_{i}_" + n + "_" + c["id"],
                                                     "type": "function",
                                                     "function": {"name": n, "arguments": c["choices"][0]["text"]}}
                                                    for i, (n, c) in enumerate(calls)],
                                     **legacy}}],
            "usage": {"completion_tokens": usage("completion_tokens"), "prompt_tokens": usage("prompt_tokens"),
                      "total_tokens": usage("total_tokens")}}


# ---- functionary (v0) ---------------------------------------------------------------------------------------------
FUNCTIONARY_SYSTEM = ("A chat between a curious user and an artificial intelligence assistant. The assistant gives "
                      "helpful, detailed, and polite answers to the user's questions. The assistant calls functions "
                      "with appropriate input when necessary")


def _functionary_line(m: dict) -> str:
    role = m["role"]
    if role == "system":
        return f"system:\n{m['content']}\n"
    if role == "function" and "name" in m:
        return f"function name={m['name']}:\n{m['content']}\n"
    if role == "function" and "function_call" in m:
        return f"function name={m['function_call']['name']}:\n{m['function_call']['arguments']}\n"
    if role == "tool":
        if m["content"] is not None:
            return f"function name={m['tool_call_id']}:\n{m['content']}\n"
        return f"function name={m['tool_call_id']}\n"
    if role == "user":
        return "user:\n</s></s>\n" if m["content"] is None else f"user:\n</s>{m['content']}</s>\n"
    if role == "assistant":
        fc = m.get("function_call")
        if m["content"] is not None and "function_call" in m:
            return f"assistant:\n{m['content']}\nassistant to={fc['name']}:\n{fc['arguments']}</s>\n"
        if "function_call" in m:
            return f"assistant to={fc['name']}:\n{fc['arguments']}</s>\n"
        if "tool_calls" in m and len(m["tool_calls"]) > 0:
            tc = m["tool_calls"][0]                       # llama-cpp-python renders the first call only
            return f"assistant to={tc['id']}:\n{tc['function']['arguments']}</s>\n"
        if m["content"] is None:
            return "assistant"
        return f"assistant:\n{m['content']}\n"
    raise ValueError(f"Unsupported role: {role}")


def _functionary_prompt(messages, functions, tools) -> str:
    sys_msgs = []
    if functions is not None:
        sys_msgs.append({"role": "system", "content": schema_from_functions(functions, compact=False)})
    if tools is not None:
        sys_msgs.append({"role": "system", "content": schema_from_functions(
            [t["function"] for t in tools if t["type"] == "function"], compact=False)})
    sys_msgs.append({"role": "system", "content": FUNCTIONARY_SYSTEM})
    for m in messages:                       # the names get the "functions." namespace (in place, as upstream)
        if m["role"] == "function" and "name" in m:
            m["name"] = f"functions.{m['name']}"
        if "function_call" in m:
            m["function_call"]["name"] = f"functions.{m['function_call']['name']}"
    return "".join(_functionary_line(m) for m in sys_msgs + list(messages) + [{"role": "assistant", "content": None}])


def functionary_chat_handler(llama, messages: List[dict], functions=None, function_call=None, tools=None,
                             tool_choice=None, temperature: float = 0.2, top_p: float = 0.95, top_k: int = 40,
                             min_p: float = 0.05, typical_p: float = 1.0, stream: bool = False, stop=[],
                             response_format=None, max_tokens=None, presence_penalty: float = 0.0,
                             frequency_penalty: float = 0.0, repeat_penalty: float = 1.1, tfs_z: float = 1.0,
                             mirostat_mode: int = 0, mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                             model=None, logits_processor=None, grammar=None, **kwargs):
    s = _sampling(locals())
    if tools is not None:
        functions = [t["function"] for t in tools if t["type"] == "function"]
    if tool_choice is not None:
        function_call = tool_choice if isinstance(tool_choice, str) else tool_choice["function"]
    prompt = _functionary_prompt(messages, functions, tools)

    if function_call is None and (functions is None or len(functions) == 0):
        out = llama.create_completion(prompt=prompt + ":\n", temperature=temperature, stream=stream,
                                      stop=["user:", "</s>"], max_tokens=max_tokens, grammar=grammar, **s)
        return conv.completion_to_chat(out, stream=stream)

    if function_call is None or (isinstance(function_call, str) and function_call == "auto"):
        head = llama.create_completion(prompt=prompt, stop="\n", stream=False)
        text = head["choices"][0]["text"]
        function_call = text.split(".")[-1][:-1]          # " to=functions.NAME:" -> NAME
        new_prompt = prompt + text + "\n"
    elif isinstance(function_call, str) and function_call != "none":
        new_prompt = prompt + ":\n"
    elif isinstance(function_call, dict):
        new_prompt = prompt + f" to=functions.{function_call['name']}:\n"
        function_call = function_call["name"]
    else:
        new_prompt = prompt + ":\n"

    body = None
    for f in functions or []:
        if f["name"] == function_call:
            body = f["parameters"]
            break
    for t in tools or []:
        if t["type"] == "function" and t["function"]["name"] == function_call:
            body = t["function"]["parameters"]
            break
    from ubatch.llama_cpp import llama_grammar
    if body is not None:
        grammar = _schema_grammar(body, llama.verbose)
    else:
        grammar = llama_grammar.LlamaGrammar.from_string(llama_grammar.JSON_GBNF, verbose=llama.verbose)
    out = llama.create_completion(prompt=new_prompt, stop=["user:", "</s>"], stream=False, grammar=grammar,
                                  max_tokens=max_tokens, temperature=temperature, **s)
    assert "usage" in out
    assert isinstance(function_call, str)
    assert stream is False                      # as llama-cpp-python: functionary (v0) does not stream
    args = out["choices"][0]["text"]
    return {"id": "chat" + out["id"], "object": "chat.completion", "created": out["created"], "model": out["model"],
            "choices": [{"index": 0,
                         "message": {"role": "assistant", "content": None,
                                     "function_call": {"name": function_call, "arguments": args},
                                     "tool_calls": [{"id": function_call, "type": "function",
                                                     "function": {"name": function_call, "arguments": args}}]},
                         "logprobs": conv.logprobs_to_chat(out["choices"][0]["logprobs"]),
                         "finish_reason": "tool_calls"}],
            "usage": out["usage"]}
