"""Haystack's LlamaCppChatGenerator (llama-cpp-haystack) runs unchanged on ubatch after install_as_llama_cpp(): a
reply, a streamed reply, a stop sequence, a JSON reply constrained by response_format's schema and a reply with a tool
offered (its call comes back as text, as over llama-cpp-python), compared with what
the same calls returned over the real llama-cpp-python 0.3.36 (tests/data/llama_cpp_python/integrations.json) and
with the recorded greedy tokens of the chat prompt (all of whose margins are comfortable)."""
import json

import pytest

import ubatch.llama_cpp as L
from integrations_common import REF, cases, chat_prompt_len, greedy_text, installed, load_llm, require

require("haystack", "haystack_integrations")
pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def got():
    from ubatch.model import fetch
    with installed(with_llm=False):
        from haystack_integrations.components.generators.llama_cpp.chat import chat_generator
        assert chat_generator.Llama is L.Llama, "Haystack's integration was imported over another llama_cpp"
        yield cases.run_haystack(str(fetch.path(cases.MODEL)))


def test_chat_stream_stop_equal_llama_cpp_python(got):
    ref = REF["haystack"]
    llm = load_llm()
    hello = greedy_text(llm, "default:chat")
    llm.close()
    assert got["chat"] == ref["chat"] == hello
    assert got["chat.finish_reason"] == ref["chat.finish_reason"] == "stop"
    assert got["chat.usage"] == ref["chat.usage"]
    assert got["chat.usage"]["prompt_tokens"] == chat_prompt_len()
    assert got["stream"] == ref["stream"]                    # chunk for chunk
    assert "".join(got["stream"]) == got["stream.text"] == hello
    assert got["stop"] == ref["stop"] == hello.split("!")[0]


def test_structured_output_follows_the_schema(got):
    obj = json.loads(got["json"])
    assert set(obj) == {"name", "age"} and isinstance(obj["name"], str) and isinstance(obj["age"], int)
    assert got["json"] == REF["haystack"]["json"]


def test_tool_offered_comes_back_as_llama_cpp_python_returns_it(got):
    text, calls = got["tools"]
    assert [text, calls] == REF["haystack"]["tools"]
    assert calls == [] and json.loads(text) == {"name": "get_weather", "arguments": {"city": "Paris"}}
