"""create_completion(stream=True, logprobs=k): one chunk per token carrying its logprobs entry, as
llama-cpp-python 0.3.36 streams them (it yielded None before); the last token cut at a stop string goes out with
its entry and an empty text, as 0.3.36 does; the texts join to the non-streamed text."""
import pytest

import ubatch.llama_cpp as L

pytestmark = pytest.mark.realmodel


def test_stream_logprobs_like_0336():
    from ubatch.model import fetch
    llm = L.Llama(str(fetch.path("gemma3-270m")), n_ctx=256, verbose=False, logits_all=True)
    prompt = "The capital of France is"
    for stop, n_chunks in (([], 6), ([" of"], 4)):
        chunks = list(llm.create_completion(prompt, max_tokens=5, temperature=0, logprobs=2, stream=True,
                                            stop=stop))
        full = llm.create_completion(prompt, max_tokens=5, temperature=0, logprobs=2, stop=stop)["choices"][0]
        assert len(chunks) == n_chunks
        assert "".join(c["choices"][0]["text"] for c in chunks) == full["text"]
        body, last = chunks[:-1], chunks[-1]["choices"][0]
        assert last["logprobs"] is None and last["finish_reason"] == full["finish_reason"]
        for c in body:
            lp = c["choices"][0]["logprobs"]
            assert set(lp) == {"tokens", "text_offset", "token_logprobs", "top_logprobs"}
            assert len(lp["tokens"]) == 1 and len(lp["top_logprobs"][0]) <= 3 and lp["token_logprobs"][0] <= 0
        offsets = [c["choices"][0]["logprobs"]["text_offset"][0] for c in body]
        assert offsets == full["logprobs"]["text_offset"][: len(offsets)] and offsets[0] == len(prompt)
        assert [c["choices"][0]["logprobs"]["token_logprobs"][0] for c in body] == \
            full["logprobs"]["token_logprobs"][: len(body)]


def test_chat_completion_openai_v1_types():
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
    from ubatch.model import fetch
    llm = L.Llama(str(fetch.path("qwen2.5-0.5b")), n_ctx=256, verbose=False)
    msgs = [{"role": "user", "content": "Say hello"}]
    r = llm.create_chat_completion_openai_v1(messages=msgs, max_tokens=6, temperature=0)
    assert isinstance(r, ChatCompletion) and r.choices[0].message.role == "assistant"
    plain = llm.create_chat_completion(messages=msgs, max_tokens=6, temperature=0)
    assert r.choices[0].message.content == plain["choices"][0]["message"]["content"]
    chunks = list(llm.create_chat_completion_openai_v1(messages=msgs, max_tokens=6, temperature=0, stream=True))
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == r.choices[0].message.content
