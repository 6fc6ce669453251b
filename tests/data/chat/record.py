"""Records what llama-cpp-python 0.3.36 does with chat formats, so the tests can compare ubatch with it without
llama-cpp-python installed. Run (with llama-cpp-python 0.3.36 importable; no model is needed):

    python tests/data/chat/record.py        # rewrites tests/data/chat/*.json

formats.json   every format registered with register_chat_format, on every conversation of conversations.py:
               its formatter's (prompt, stop, added_special), called directly (taken out of its registered
               completion handler's closure)
jinja.json     llama_chat_format.Jinja2ChatFormatter on the templates of conversations.py, the Qwen2.5 GGUF's
               template (qwen_template.jinja) and the well-known templates; guess_chat_format_from_gguf_metadata
handlers.json  (with the GBNF text of every JSON schema involved, by llama_grammar.json_schema_to_gbnf)
               the function-calling handlers (chatml-function-calling, functionary, functionary-v1 / -v2) and a
               chat_formatter handler with a forced tool, run against a stand-in model that records every
               create_completion call (prompt, stop, grammar text, ...) and answers with the texts given in
               conversations.py: the calls and the chat completion returned
llama_types.json  every TypedDict / alias of llama_cpp.llama_types: fields, required keys, resolved types
"""
import copy
import json
import os
import random
import sys
import types
import typing

import typing_extensions

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import conversations as C  # noqa: E402
from fake_llama import FakeLlama, run_handler  # noqa: E402,F401

import jinja2  # noqa: E402
import llama_cpp  # noqa: E402
import llama_cpp.llama_grammar  # noqa: E402
import llama_cpp.llama_chat_format as F  # noqa: E402
import llama_cpp.llama_types as T  # noqa: E402


def formatter_of(handler):
    for cell in handler.__closure__ or ():
        v = cell.cell_contents
        if callable(v) and getattr(v, "__name__", "") != "chat_completion_handler":
            return v
    raise LookupError(handler)


def resp(r):
    return {"prompt": r.prompt, "stop": r.stop, "added_special": r.added_special}


def record_formats():
    reg = F.LlamaChatCompletionHandlerRegistry()._chat_handlers
    out = {}
    for name, h in reg.items():
        if h.__name__ != "chat_completion_handler":
            continue                                   # a hand-written handler, not a registered format
        f = formatter_of(h)
        out[name] = {}
        for cname, msgs in C.CONVERSATIONS.items():
            try:
                out[name][cname] = resp(f(messages=copy.deepcopy(msgs)))
            except Exception as e:                      # noqa: BLE001 - the failure is the recording
                out[name][cname] = {"error": type(e).__name__}
    return out


def record_jinja():
    qwen = open(os.path.join(HERE, "qwen_template.jinja"), encoding="utf-8").read()
    templates = {"loop": C.LOOP_TEMPLATE, "generation": C.GENERATION_TEMPLATE, "tojson": C.TOJSON_TEMPLATE,
                 "raise": C.RAISE_TEMPLATE, "qwen": qwen, "chatml": F.CHATML_CHAT_TEMPLATE,
                 "mistral": F.MISTRAL_INSTRUCT_CHAT_TEMPLATE, "mixtral": F.MIXTRAL_INSTRUCT_CHAT_TEMPLATE,
                 "llama3": F.LLAMA3_INSTRUCT_CHAT_TEMPLATE}
    out = {"render": {}, "guess": {}}
    for tname, tpl in templates.items():
        for gen in (True, False):
            fm = F.Jinja2ChatFormatter(tpl, eos_token="</e>", bos_token="<b>", add_generation_prompt=gen)
            for cname, msgs in list(C.CONVERSATIONS.items()) + [("tools", C.TOOL_HISTORY)]:
                key = f"{tname}|{gen}|{cname}"
                kw = {"tools": C.TOOLS, "functions": [1], "function_call": "auto", "tool_choice": "auto",
                      "extra": "x"} if cname in ("tools", "user") else {}
                try:
                    out["render"][key] = resp(fm(messages=copy.deepcopy(msgs), **kw))
                except Exception as e:                  # noqa: BLE001
                    out["render"][key] = {"error": type(e).__name__, "message": str(e)}
    for tname, tpl in list(templates.items()) + [("none", None)]:
        md = {} if tpl is None else {"tokenizer.chat_template": tpl}
        out["guess"][tname] = F.guess_chat_format_from_gguf_metadata(md)
    out["constants"] = {k: getattr(F, k) for k in dir(F) if k.endswith(("_CHAT_TEMPLATE", "_BOS_TOKEN", "_EOS_TOKEN"))}
    out["names"] = sorted(k for k, v in vars(F).items() if not k.startswith("__")
                          and (getattr(v, "__module__", None) == F.__name__ or k in out["constants"]))
    return out


def record_handlers():
    out = {}
    for hname, cases in C.HANDLER_CASES.items():
        h = F.get_chat_completion_handler(hname)
        for cname, (kw, texts) in cases.items():
            out[f"{hname}|{cname}"] = run_handler(h, kw, texts)
            out[f"{hname}|{cname}|stream"] = run_handler(h, kw, texts, stream=True)
    # functionary-v1 / -v2 import transformers.AutoTokenizer only to annotate; the stand-in tokenizer is ours
    sys.modules.setdefault("transformers", types.SimpleNamespace(AutoTokenizer=object))
    for v1, cases in ((False, C.FUNCTIONARY_V2_CASES), (True, C.FUNCTIONARY_V1_CASES)):
        h = F.get_chat_completion_handler("functionary-v1" if v1 else "functionary-v2")
        for cname, (kw, texts) in cases.items():
            name = f"functionary-{'v1' if v1 else 'v2'}|{cname}"
            out[name] = run_handler(h, kw, texts, hf_template=C.FUNCTIONARY_HF_TEMPLATE, v1=v1)
            out[name + "|stream"] = run_handler(h, kw, texts, stream=True, hf_template=C.FUNCTIONARY_HF_TEMPLATE,
                                                v1=v1)
    # a registered format's handler (chatml) with a forced tool, legacy functions, response_format
    h = F.get_chat_completion_handler("chatml")
    forced = {"messages": C.TOOL_CONVERSATION, "tools": C.TOOLS,
              "tool_choice": {"type": "function", "function": {"name": "add"}}, "stop": ["X"]}
    out["chatml|forced"] = run_handler(h, forced, ['{"a": 1, "b": 2}'])
    out["chatml|forced|stream"] = run_handler(h, forced, ['{"a": 1, "b": 2}'], stream=True)
    out["chatml|plain|stream"] = run_handler(h, {"messages": C.CONVERSATIONS["user"], "stop": "Q"}, ["Hi you"],
                                             stream=True)
    out["chatml|json_object"] = run_handler(h, {"messages": C.CONVERSATIONS["user"],
                                                "response_format": {"type": "json_object"}}, ["{}"])
    out["chatml|json_schema"] = run_handler(h, {"messages": C.CONVERSATIONS["user"], "response_format": {
        "type": "json_object", "schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}}, ["{}"])
    out["chatml|missing_tool"] = run_handler(h, dict(forced, tool_choice={"type": "function",
                                                                          "function": {"name": "nope"}}), [])
    out["chatml|legacy"] = run_handler(h, {"messages": C.TOOL_CONVERSATION,
                                           "functions": [t["function"] for t in C.TOOLS],
                                           "function_call": {"name": "get_weather"}}, ['{"city": "x"}'])
    return out


def record_schemas():
    """json_schema_to_gbnf of every schema the handler cases convert (the stand-in grammar of the tests)."""
    import llama_cpp.llama_grammar as G
    schemas = [t["function"]["parameters"] for t in C.TOOLS] + [{"type": "object", "properties": {
        "n": {"type": "integer"}}}]
    return {json.dumps(s): G.json_schema_to_gbnf(json.dumps(s)) for s in schemas}


def norm(s):
    return str(s).replace("llama_cpp.llama_types.", "").replace("typing_extensions.", "typing.")


def record_types():
    out = {}
    for name in dir(T):
        if name.startswith("_"):
            continue
        v = getattr(T, name)
        if isinstance(v, types.ModuleType) or getattr(v, "__module__", None) in ("typing", "typing_extensions") \
                and name in ("Any", "List", "Optional", "Dict", "Union", "TypedDict", "NotRequired", "Literal"):
            continue
        if typing_extensions.is_typeddict(v):          # (typing.is_typeddict misses typing_extensions' kind)
            hints = typing.get_type_hints(v)
            out[name] = {"kind": "TypedDict", "class": v.__name__, "fields": list(v.__annotations__),
                         "required": sorted(v.__required_keys__), "optional": sorted(v.__optional_keys__),
                         "types": {k: norm(t) for k, t in hints.items()}}
        else:
            out[name] = {"kind": "alias", "repr": norm(v)}
    return out


def main():
    def dump(name, data):
        with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, ensure_ascii=False, sort_keys=True)
            f.write("\n")
    dump("formats.json", {"llama_cpp_version": llama_cpp.__version__, "formats": record_formats()})
    dump("jinja.json", dict(record_jinja(), llama_cpp_version=llama_cpp.__version__))
    dump("handlers.json", {"llama_cpp_version": llama_cpp.__version__, "cases": record_handlers(),
                           "schemas": record_schemas(), "json_gbnf": llama_cpp.llama_grammar.JSON_GBNF})
    dump("llama_types.json", {"llama_cpp_version": llama_cpp.__version__, "types": record_types()})


if __name__ == "__main__":
    main()
