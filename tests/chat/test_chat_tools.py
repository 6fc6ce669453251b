"""The function-calling handlers (chatml-function-calling, functionary, functionary-v1 / -v2) and a registered
format's handler with tools, against llama-cpp-python 0.3.36: each case of tests/data/chat/conversations.py is
run against the stand-in model of tests/data/chat/fake_llama.py, and every create_completion call (prompt, stop,
stream, grammar text, ...) and the chat completion returned must be the recorded ones (handlers.json). The
grammars of JSON schemas are the recorded converter texts (the grammar engine's own converter is tested by
the grammar tests)."""
import json
import os
import sys

import pytest

from ubatch.llama_cpp import llama_chat_format as LCF
from ubatch.llama_cpp import llama_grammar

import suite_paths  # noqa: E402
DATA = os.path.join(suite_paths.DATA, "chat")
sys.path.insert(0, DATA)
sys.path.insert(0, os.path.dirname(__file__))
import conversations as C  # noqa: E402
from fake_llama import run_handler  # noqa: E402

with open(os.path.join(DATA, "handlers.json"), encoding="utf-8") as _f:
    _REC = json.load(_f)
CASES, SCHEMAS = _REC["cases"], _REC["schemas"]


class RecordedGrammar:
    """LlamaGrammar with the recorded JSON-schema conversions (from_string keeps the text, as LlamaGrammar)."""

    def __init__(self, text):
        self._grammar = text

    @classmethod
    def from_string(cls, grammar, verbose=True):
        return cls(grammar)

    @classmethod
    def from_json_schema(cls, json_schema, verbose=True):
        if json_schema not in SCHEMAS:
            raise ValueError(f"schema not recorded: {json_schema}")
        return cls(SCHEMAS[json_schema])


@pytest.fixture
def grammar(monkeypatch):
    monkeypatch.setattr(llama_grammar, "LlamaGrammar", RecordedGrammar)
    monkeypatch.setattr(llama_grammar, "JSON_GBNF", _REC["json_gbnf"])


def _cases():
    out = []
    for hname, cases in C.HANDLER_CASES.items():
        for cname, (kw, texts) in cases.items():
            out += [(hname, f"{hname}|{cname}", kw, texts, False, {}), (hname, f"{hname}|{cname}|stream", kw, texts,
                                                                          True, {})]
    fv = {"hf_template": C.FUNCTIONARY_HF_TEMPLATE}
    for cname, (kw, texts) in C.FUNCTIONARY_V2_CASES.items():
        out += [("functionary-v2", f"functionary-v2|{cname}", kw, texts, False, fv),
                ("functionary-v2", f"functionary-v2|{cname}|stream", kw, texts, True, fv)]
    for cname, (kw, texts) in C.FUNCTIONARY_V1_CASES.items():
        out += [("functionary-v1", f"functionary-v1|{cname}", kw, texts, False, dict(fv, v1=True)),
                ("functionary-v1", f"functionary-v1|{cname}|stream", kw, texts, True, dict(fv, v1=True))]
    forced = {"messages": C.TOOL_CONVERSATION, "tools": C.TOOLS,
              "tool_choice": {"type": "function", "function": {"name": "add"}}, "stop": ["X"]}
    out += [("chatml", "chatml|forced", forced, ['{"a": 1, "b": 2}'], False, {}),
            ("chatml", "chatml|forced|stream", forced, ['{"a": 1, "b": 2}'], True, {}),
            ("chatml", "chatml|plain|stream", {"messages": C.CONVERSATIONS["user"], "stop": "Q"}, ["Hi you"], True,
             {}),
            ("chatml", "chatml|json_object", {"messages": C.CONVERSATIONS["user"],
                                              "response_format": {"type": "json_object"}}, ["{}"], False, {}),
            ("chatml", "chatml|json_schema", {"messages": C.CONVERSATIONS["user"], "response_format": {
                "type": "json_object", "schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}},
             ["{}"], False, {}),
            ("chatml", "chatml|missing_tool", dict(forced, tool_choice={"type": "function",
                                                                        "function": {"name": "nope"}}), [], False, {}),
            ("chatml", "chatml|legacy", {"messages": C.TOOL_CONVERSATION,
                                         "functions": [t["function"] for t in C.TOOLS],
                                         "function_call": {"name": "get_weather"}}, ['{"city": "x"}'], False, {})]
    return out


ALL = _cases()


def test_every_recorded_case_is_replayed():
    assert sorted(k for _, k, *_ in ALL) == sorted(CASES)


@pytest.mark.parametrize("hname,key,kw,texts,stream,fake", ALL, ids=[c[1] for c in ALL])
def test_handler_matches_llama_cpp_python(grammar, hname, key, kw, texts, stream, fake):
    got = run_handler(LCF.get_chat_completion_handler(hname), kw, texts, stream=stream, **fake)
    want = CASES[key]
    assert got["calls"] == want["calls"], key
    assert json.loads(json.dumps(got["result"])) == want["result"], key


def test_tool_handlers_on_the_tiny_model(monkeypatch):
    """The handlers on a real Llama (the tiny model, a byte vocabulary): answers without tools go through
    create_completion and come back as chat completions; a forced tool's arguments are sampled under its
    schema's grammar (they parse and validate even from random weights); "auto" chooses under a grammar."""
    import ubatch.llama_cpp as L
    from ubatch.llama_cpp import _model
    from ubatch.models import TINY_LLAMA_PATH
    from byte_vocab import ByteVocab
    monkeypatch.setattr(_model, "_load_tokenizer", lambda path, raw: ByteVocab())
    llm = L.Llama(TINY_LLAMA_PATH, n_ctx=2048, verbose=False, chat_format="chatml-function-calling")
    r = llm.create_chat_completion(C.TOOL_CONVERSATION, tools=C.TOOLS, tool_choice="none", max_tokens=4,
                                   temperature=0.0)
    assert r["object"] == "chat.completion" and r["choices"][0]["message"]["role"] == "assistant"
    chunks = list(llm.create_chat_completion(C.TOOL_CONVERSATION, tools=C.TOOLS, tool_choice="none",
                                             max_tokens=4, temperature=0.0, stream=True))
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == \
        r["choices"][0]["message"]["content"]
    llm.chat_format = "functionary"
    assert llm.create_chat_completion(C.CONVERSATIONS["user"], max_tokens=3)["object"] == "chat.completion"
    llm.chat_format = "chatml-function-calling"
    forced = {"type": "function", "function": {"name": "add"}}
    r = llm.create_chat_completion(C.TOOL_CONVERSATION, tools=C.TOOLS, tool_choice=forced, max_tokens=100)
    (call,) = r["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "add" and r["choices"][0]["finish_reason"] == "tool_calls"
    args = json.loads(call["function"]["arguments"])           # sampled under add's schema: it validates
    assert set(args) <= {"a", "b"} and all(type(v) is int for v in args.values()), args
    r = llm.create_chat_completion(C.TOOL_CONVERSATION, tools=C.TOOLS, tool_choice="auto", max_tokens=40)
    msg = r["choices"][0]["message"]                           # the grammar chose a message or calls
    assert msg["role"] == "assistant" and (msg.get("tool_calls") is not None) == (
        r["choices"][0]["finish_reason"] == "tool_calls")
    llm.close()


def test_schema_grammars_are_llama_cpp_pythons_text():
    """The tool schemas the handlers convert: ubatch's json_schema_to_gbnf gives llama-cpp-python's text (or,
    without the grammar engine, refuses by name)."""
    for schema, gbnf in SCHEMAS.items():
        try:
            got = llama_grammar.json_schema_to_gbnf(schema)
        except NotImplementedError as e:
            assert "GBNF" in str(e) or "grammar" in str(e)
            continue
        assert got == gbnf, schema
