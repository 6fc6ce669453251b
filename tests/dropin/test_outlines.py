"""Outlines' llama.cpp model (outlines.from_llamacpp) runs unchanged on ubatch after install_as_llama_cpp(): text
generation, streaming, a stop sequence, chat, and structured output (a choice, a regex, a pydantic model) through
the llguidance backend, whose tokenizer reads the vocabulary with llama_token_to_piece / llama_token_get_attr and
tokenizes through the C llama_tokenize. Compared with what the same calls returned over the real llama-cpp-python
0.3.36 (tests/data/llama_cpp_python/integrations.json) and, for the free text, with the recorded greedy tokens."""
import json
import re

import pytest

import ubatch.llama_cpp as L
from integrations_common import REF, cases, greedy_text, load_llm, require

require("outlines", "outlines_core", "llguidance")
pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def run():
    L.install_as_llama_cpp()
    llm = load_llm()
    try:
        import llguidance.llamacpp
        assert llguidance.llamacpp.llama_cpp is L, "llguidance was imported over another llama_cpp"
        yield cases.run_outlines(llm), llm
    finally:
        llm.close()
        L.uninstall_as_llama_cpp()


def test_generate_stream_stop_chat_equal_llama_cpp_python(run):
    got, llm = run
    ref = REF["outlines"]
    counting, hello = greedy_text(llm, "default:counting"), greedy_text(llm, "default:chat")
    assert got["generate"] == ref["generate"] == counting
    assert got["stream"] == ref["stream"] and "".join(got["stream"]) == counting
    assert got["stop"] == ref["stop"] == counting.split(",")[0]
    assert got["chat"] == ref["chat"] == hello
    assert got["chat_stream"] == ref["chat_stream"] and "".join(got["chat_stream"]) == hello


def test_structured_outputs(run):
    got, _ = run
    ref = REF["outlines"]
    assert got["choice"] in cases.CHOICES
    assert re.fullmatch(cases.YEAR_RE, got["regex"])
    obj = json.loads(got["json"])
    assert isinstance(obj["name"], str) and isinstance(obj["age"], int)
    assert [got[k] for k in ("choice", "regex", "json")] == [ref[k] for k in ("choice", "regex", "json")]
