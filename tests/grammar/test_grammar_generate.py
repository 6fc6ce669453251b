"""Grammar-constrained generation in the engine (each sequence its own grammar state inside continuous
batching): completions always parse and validate; a constrained sequence's tokens do not depend on what else
is batched."""
from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.realmodel

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "age": {"type": "integer"},
                                           "color": {"enum": ["red", "green", "blue"]}},
          "required": ["name", "age", "color"], "additionalProperties": False}


@pytest.fixture(scope="module")
def llm():
    import ubatch
    return ubatch.LLM("gemma3-270m", n_ctx=2048, n_seq_max=4)


def _valid(obj):
    assert set(obj) == {"name", "age", "color"}
    assert isinstance(obj["name"], str) and len(obj["name"]) <= 12
    assert isinstance(obj["age"], int) and obj["color"] in ("red", "green", "blue")


def test_json_schema_generations_parse_and_validate(llm):
    prompts = ["Describe a person as JSON:", "A cat in JSON:", "JSON please:"]
    outs = llm.generate(prompts, json_schema=SCHEMA, max_tokens=80, temperature=0.9, seed=3)
    for c in outs:
        assert c.finish_reason == "stop", c.text
        _valid(json.loads(c.text))
    # batch invariance: alone, the same tokens
    alone = llm.generate(prompts[1], json_schema=SCHEMA, max_tokens=80, temperature=0.9, seed=3)[0]
    assert alone.text == outs[1].text


def test_gbnf_and_plain_requests_mixed(llm):
    g = 'root ::= ("yes" | "no") "." '
    outs = llm.generate(["Is water wet? Answer:", "The capital of France is"], grammar=g, max_tokens=8)
    assert all(c.text in ("yes.", "no.") for c in outs)
    plain = llm.generate("The capital of France is", max_tokens=4)[0]
    assert plain.text                      # unconstrained requests are untouched


def test_bad_grammar_names_the_position(llm):
    from ubatch.grammar import GrammarError
    with pytest.raises(GrammarError, match="byte 11 .*unexpected end of input"):
        llm.generate("x", grammar='root ::= "a', max_tokens=2)
