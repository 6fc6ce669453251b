"""Chat formats against llama-cpp-python 0.3.36's own formatters (recordings in tests/data/chat, made by
tests/data/chat/record.py without a model): every registered format's prompt text / stop / added_special on
every conversation, Jinja2ChatFormatter's rendering (loop controls, generation tags, tojson, raise_exception,
the Qwen2.5 GGUF's template with tools), the format guessed from GGUF metadata, llama_types."""
import copy
import json
import os
import sys
import typing

import typing_extensions

import pytest

from ubatch.chat import formats as F
from ubatch.llama_cpp import llama_chat_format as LCF
from ubatch.llama_cpp import llama_types as T

import suite_paths  # noqa: E402
DATA = os.path.join(suite_paths.DATA, "chat")
sys.path.insert(0, DATA)
import conversations as C  # noqa: E402


def _load(name):
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        return json.load(f)


FORMATS = _load("formats.json")["formats"]
JINJA = _load("jinja.json")


def _resp(r):
    return {"prompt": r.prompt, "stop": r.stop, "added_special": r.added_special}


def test_the_registry_has_every_format_of_llama_cpp_python():
    assert sorted(FORMATS) == sorted(F.LLAMA_CPP_FORMATS) and len(FORMATS) == 23
    reg = LCF.LlamaChatCompletionHandlerRegistry()._chat_handlers
    for name in list(FORMATS) + ["chatml-function-calling", "functionary", "functionary-v1", "functionary-v2"]:
        assert callable(LCF.get_chat_completion_handler(name)), name
    with pytest.raises(LCF.LlamaChatCompletionHandlerNotFoundException, match="Invalid chat handler: nope"):
        LCF.get_chat_completion_handler("nope")
    assert "gemma3" in reg                                       # ubatch's template-less Gemma format


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_format_prompt_text_equals_llama_cpp_python(name):
    for cname, want in FORMATS[name].items():
        msgs = copy.deepcopy(C.CONVERSATIONS[cname])
        if "error" in want:
            with pytest.raises(Exception) as ei:
                F.FORMATTERS[name](messages=msgs)
            assert type(ei.value).__name__ == want["error"], (name, cname)
        else:
            assert _resp(F.FORMATTERS[name](messages=msgs)) == want, (name, cname)


def test_jinja_formatter_renders_as_llama_cpp_python():
    qwen = open(os.path.join(DATA, "qwen_template.jinja"), encoding="utf-8").read()
    templates = {"loop": C.LOOP_TEMPLATE, "generation": C.GENERATION_TEMPLATE, "tojson": C.TOJSON_TEMPLATE,
                 "raise": C.RAISE_TEMPLATE, "qwen": qwen, "chatml": LCF.CHATML_CHAT_TEMPLATE,
                 "mistral": LCF.MISTRAL_INSTRUCT_CHAT_TEMPLATE, "mixtral": LCF.MIXTRAL_INSTRUCT_CHAT_TEMPLATE,
                 "llama3": LCF.LLAMA3_INSTRUCT_CHAT_TEMPLATE}
    n = 0
    for key, want in JINJA["render"].items():
        tname, gen, cname = key.split("|")
        fm = LCF.Jinja2ChatFormatter(templates[tname], eos_token="</e>", bos_token="<b>",
                                     add_generation_prompt=gen == "True")
        msgs = copy.deepcopy(C.TOOL_HISTORY if cname == "tools" else C.CONVERSATIONS[cname])
        kw = {"tools": C.TOOLS, "functions": [1], "function_call": "auto", "tool_choice": "auto",
              "extra": "x"} if cname in ("tools", "user") else {}
        if "error" in want:
            with pytest.raises(Exception) as ei:
                fm(messages=msgs, **kw)
            assert (type(ei.value).__name__, str(ei.value)) == (want["error"], want["message"]), key
        else:
            assert _resp(fm(messages=msgs, **kw)) == want, key
        n += 1
    assert n == len(JINJA["render"]) > 150
    assert sum("error" in w for w in JINJA["render"].values()) >= 10      # raise_exception and strict roles


def test_jinja_environment_extras():
    import datetime
    fm = LCF.Jinja2ChatFormatter(C.STRFTIME_TEMPLATE, eos_token="", bos_token="")
    assert fm(messages=[]).prompt == str(datetime.datetime.now().year)
    r = LCF.Jinja2ChatFormatter("x", eos_token="<e>", bos_token="", stop_token_ids=[5])(messages=[])
    assert r.stop == ["<e>"] and r.added_special
    assert r.stopping_criteria([1, 5], None) and not r.stopping_criteria([5, 1], None)


def test_guess_chat_format_and_constants():
    for tname, want in JINJA["guess"].items():
        tpl = {"chatml": LCF.CHATML_CHAT_TEMPLATE, "mistral": LCF.MISTRAL_INSTRUCT_CHAT_TEMPLATE,
               "mixtral": LCF.MIXTRAL_INSTRUCT_CHAT_TEMPLATE, "llama3": LCF.LLAMA3_INSTRUCT_CHAT_TEMPLATE,
               "none": None}.get(tname, "{{ x }}")
        md = {} if tpl is None else {"tokenizer.chat_template": tpl}
        assert LCF.guess_chat_format_from_gguf_metadata(md) == want, tname
    for k, v in JINJA["constants"].items():
        assert getattr(LCF, k) == v, k


def test_every_name_of_llama_chat_format():
    missing = [n for n in JINJA["names"] if not hasattr(LCF, n)]
    assert missing == [] and len(JINJA["names"]) > 70
    with pytest.raises(NotImplementedError, match="multimodal"):
        LCF.Llava15ChatHandler(clip_model_path="x")
    msgs = C.CONVERSATIONS["multi_turn"]
    ts = LCF._map_roles(msgs, {"user": "U", "assistant": "A"})
    assert LCF._format_add_colon_two(LCF._get_system_message(msgs), ts, "\n\n", "</s>") == \
        FORMATS["alpaca"]["multi_turn"]["prompt"].replace("### Instruction", "U").replace("### Response", "A")


def _norm(s):
    return str(s).replace("ubatch.llama_cpp.llama_types.", "").replace("typing_extensions.", "typing.")


def test_llama_types_has_every_name_and_field():
    want = _load("llama_types.json")["types"]
    for name, w in want.items():
        v = getattr(T, name)
        if w["kind"] == "TypedDict":
            assert typing.is_typeddict(v) or typing_extensions.is_typeddict(v), name
            hints = typing.get_type_hints(v)
            got = {"kind": "TypedDict", "class": v.__name__, "fields": list(v.__annotations__),
                   "required": sorted(v.__required_keys__), "optional": sorted(v.__optional_keys__),
                   "types": {k: _norm(t) for k, t in hints.items()}}
            assert got == w, name
        else:
            assert _norm(v) == w["repr"], name
    assert len(want) > 60 and sum(w["kind"] == "TypedDict" for w in want.values()) >= 55


def test_register_chat_format_reaches_every_path():
    @LCF.register_chat_format("test-shout")
    def shout(messages, **kw):
        return LCF.ChatFormatterResponse(prompt="".join(m["content"].upper() for m in messages), stop="!")
    try:
        assert F.FORMATTERS["test-shout"] is shout
        from ubatch.chat.resolve import resolve
        assert resolve({}, chat_format="test-shout")([{"role": "user", "content": "hi"}]).prompt == "HI"
        with pytest.raises(ValueError, match="already registered"):
            LCF.LlamaChatCompletionHandlerRegistry().register_chat_completion_handler("test-shout", shout)
    finally:
        LCF.LlamaChatCompletionHandlerRegistry().unregister_chat_handler("test-shout")
        del F.FORMATTERS["test-shout"]
