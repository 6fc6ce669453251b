"""Guidance's guidance.models.LlamaCpp runs unchanged on ubatch after install_as_llama_cpp(). Its engine drives the
low-level API (llama_batch_init / llama_batch_free, the batch's token/pos/seq_id/logits arrays written in place,
llama_decode, llama_get_logits read with np.ctypeslib, llama_get_memory + llama_memory_seq_rm for its own prefix
cache) and llguidance's tokenizer calls the C llama_tokenize through its function pointer. gen, gen with a stop,
select, gen with a regex, guidance.json with a pydantic schema and a chat turn, compared with what the same program
gave over the real llama-cpp-python 0.3.36 (integrations.json) and, for the free text, the recorded greedy tokens."""
import pytest

import ubatch.llama_cpp as L
from integrations_common import REF, cases, check_structured, greedy_text, installed, require

require("guidance", "llguidance")
pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def run():
    with installed() as llm:
        from guidance.models import _llama_cpp
        assert _llama_cpp.llama_cpp is L, "guidance was imported over another llama_cpp"
        yield cases.run_guidance(llm), llm


def test_gen_stop_chat_equal_llama_cpp_python(run):
    got, llm = run
    ref = REF["guidance"]
    counting = greedy_text(llm, "default:counting")
    assert got["gen"] == ref["gen"] == counting
    assert got["stop"] == ref["stop"] == counting.split(",")[0]
    assert got["chat"] == ref["chat"]
    assert got["chat"].strip() == greedy_text(llm, "default:chat")


def test_select_regex_json(run):
    check_structured(run[0], REF["guidance"], "select", extra_keys_allowed=False)
