"""Outlines' llama.cpp model (outlines.from_llamacpp) runs unchanged on ubatch after install_as_llama_cpp(): text
generation, streaming, a stop sequence, chat, and structured output (a choice, a regex, a pydantic model) through
the llguidance backend, whose tokenizer reads the vocabulary with llama_token_to_piece / llama_token_get_attr and
tokenizes through the C llama_tokenize. Compared with what the same calls returned over the real llama-cpp-python
0.3.36 (tests/data/llama_cpp_python/integrations.json) and, for the free text, with the recorded greedy tokens."""
import pytest

import ubatch.llama_cpp as L
from integrations_common import REF, cases, check_structured, greedy_text, installed, require

require("outlines", "outlines_core", "llguidance")
pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def run():
    with installed() as llm:
        import llguidance.llamacpp
        assert llguidance.llamacpp.llama_cpp is L, "llguidance was imported over another llama_cpp"
        yield cases.run_outlines(llm), llm


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
    # Outlines' JSON schema of a pydantic model allows further properties (llguidance follows it)
    check_structured(run[0], REF["outlines"], "choice", extra_keys_allowed=True)
