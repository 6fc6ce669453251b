"""Lazy grammars in the engine (ubatch/grammar/lazy.py, llama.cpp's lazy-grammar semantics) and the tool calls of
"auto" / "required" under them (ubatch.chat.tools.calls_gbnf): the output is token for token the unconstrained
one up to the trigger (greedy and seeded), the grammar holds from the trigger's start on (a trigger split across
tokens replayed from where it starts), a refused trigger text leaves the state waiting, and Qwen's own "auto"
call gets arguments valid under the tool's schema (realmodel)."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

import ubatch
from ubatch.grammar import Grammar, GrammarRejected, GrammarVocab
from ubatch.grammar.lazy import LazyGrammar


@pytest.fixture(scope="module")
def tiny():
    return ubatch.LLM(ubatch.models.tiny_llama(), n_ctx=256)


@pytest.mark.parametrize("seeded", [False, True])
def test_free_until_the_trigger_then_constrained(tiny, seeded):
    kw = dict(max_tokens=20, temperature=0.9, seed=3) if seeded else dict(max_tokens=20, temperature=0.0)
    free = tiny.generate(["hello there"], **kw)[0].tokens
    text = bytes(free)
    # a two-byte ASCII trigger inside the free output (split across two tokens), and a one-token trigger
    k = next(i for i in range(16) if text.find(text[i:i + 2]) == i and all(32 <= b < 127 for b in text[i:i + 2]))
    for trig in (text[k:k + 2], text[k:k + 1]):
        at = text.find(trig)
        lit = "".join(f"\\x{b:02x}" for b in trig)
        lazy = LazyGrammar(f'root ::= "{lit}" [a-z]+', trigger_words=[trig])
        got = tiny.generate(["hello there"], grammar=lazy, **kw)[0].tokens
        end = at + len(trig)
        assert got[:end] == free[:end], trig                 # untouched up to the trigger
        assert len(got) == 20 and all(97 <= t <= 122 for t in got[end:]), (trig, got)


class _Pieces:
    def __init__(self, pieces):
        self.pieces = pieces

    def token_to_piece(self, t, special=False):
        return self.pieces[t]


def _vocab(pieces):
    bs = [p.encode() for p in pieces]
    off = np.concatenate([[0], np.cumsum([len(b) for b in bs])]).astype(np.int64)
    return GrammarVocab(b"".join(bs), off, np.zeros(len(bs), np.uint8), _Pieces(bs))


def test_lazy_state_replay_refusal_clone_and_trigger_tokens():
    pieces = ["a", "<t", "ool>", "x", "1", "<tool>", "<tool>1", "2"]
    v = _vocab(pieces)
    g = Grammar('root ::= "<tool>" [0-9]+', v)
    st = LazyGrammar(g.text, trigger_words=["<tool>"]).bind(g).state()
    row = np.zeros(len(pieces), np.float32)
    st.apply(row)
    assert not st.triggered and np.all(row == 0)             # free: nothing masked
    for t in (0, 3, 1):
        st.accept(t)
    c = st.clone()
    st.accept(2)                                            # "<t" + "ool>": the trigger, replayed from "<t"
    assert st.triggered and not c.triggered
    st.apply(row)
    assert [bool(np.isfinite(x)) for x in row] == [False, False, False, False, True, False, False, True]
    with pytest.raises(GrammarRejected):
        st.accept(3)
    st.accept(4)
    # a trigger whose token carries text the grammar refuses: the output stays free for good
    bad = Grammar('root ::= "<tool>" "2"', v)
    s2 = LazyGrammar(bad.text, trigger_words=["<tool>"]).bind(bad).state()
    s2.accept(6)
    s2.accept(5)
    assert not s2.triggered and s2.refused
    row[:] = 0
    s2.apply(row)
    assert np.all(row == 0)
    # a trigger token: its whole piece goes to the grammar
    s3 = LazyGrammar(g.text, trigger_tokens=[6]).bind(g).state()
    s3.accept(0)
    s3.accept(6)
    assert s3.triggered and s3.inner.can_end
    with pytest.raises(ValueError):
        LazyGrammar("root ::= \"a\"")


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
    "required": ["city", "unit"]}}},
         {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
             "a": {"type": "integer"}, "b": {"type": "integer"}}}}}]


def test_calls_grammar_and_plans():
    from ubatch.chat import tools as T
    from ubatch.chat.tool_plan import check
    g = Grammar(T.calls_gbnf(TOOLS))
    ok = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n</tool_call>'
    assert g.state().matches(ok) and g.state().matches(ok + "\n" + ok.replace("\n", "")) \
        and g.state().matches('<tool_call>{"name": "add", "arguments": {"b": 2}}</tool_call>\n') \
        and g.state().matches('{"name": "add", "arguments": {}}')           # a bare call
    pat = re.compile(T.bare_call_pattern(TOOLS), re.S)
    assert pat.fullmatch(b' {"name": "add", "argu') and not pat.fullmatch(b'x {"name": "add"') \
        and not pat.fullmatch(b'{"name": "ad')
    for bad in (ok.replace('"c"', '"celsius"'), ok.replace("get_weather", "rm"), ok[:-3]):
        assert not g.state().matches(bad)
    one = Grammar(T.calls_gbnf(TOOLS, parallel=False))
    assert one.state().matches(ok) and not one.state().matches(ok + "\n" + ok)
    auto = check(TOOLS, "auto", constrained=True).calls_sampling()
    assert isinstance(auto["grammar"], LazyGrammar) and auto["grammar"].trigger_words == [b"<tool_call>"]
    req = check(TOOLS, "required", constrained=True).calls_sampling()
    assert req["grammar_prefix"] == "<tool_call>\n" and Grammar(req["grammar"]).state().matches(ok)
    assert check(TOOLS, "auto", constrained=False).calls_sampling() == {}
    assert check(TOOLS, {"type": "function", "function": {"name": "add"}}, constrained=True).calls_sampling() == {}


@pytest.mark.realmodel
def test_qwen_auto_call_under_the_tools_schema(monkeypatch):
    """Qwen 2.5 asked about the weather with a tool whose unit is an enum it does not guess ("degC" / "degF"):
    the call it makes by itself ("auto") has arguments valid under the schema, and its tokens are the
    unconstrained answer's up to the trigger."""
    from ubatch.chat import tools as T
    from ubatch.chat.tool_plan import ToolPlan
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"},
                                         "unit": {"type": "string", "enum": ["degC", "degF"]}},
        "required": ["city", "unit"]}}}]
    llm = ubatch.LLM("qwen2.5-0.5b", n_ctx=2048)
    msgs = [{"role": "user", "content": "What's the weather in Paris? Use celsius."}]
    c = llm.chat(msgs, tools=tools, tool_choice="auto", max_tokens=60, temperature=0)
    assert c.finish_reason == "tool_calls", c.text
    (call,) = c.tool_calls
    args = json.loads(call["function"]["arguments"])
    assert call["function"]["name"] == "get_weather" and args["unit"] in ("degC", "degF") and args["city"]
    monkeypatch.setattr(ToolPlan, "calls_sampling", lambda self: {})      # as before: unconstrained
    free = llm.chat(msgs, tools=tools, tool_choice="auto", max_tokens=60, temperature=0)
    pat = re.compile(T.bare_call_pattern(tools), re.S)

    def triggered(ids):
        t = llm.tokenizer.decode(ids, unparse_special=True)
        return "<tool_call>" in t or pat.fullmatch(t.encode()) is not None
    at = next(i for i in range(len(free.tokens) + 1) if triggered(free.tokens[:i]))
    assert 0 < at <= len(c.tokens) and c.tokens[:at] == free.tokens[:at]
