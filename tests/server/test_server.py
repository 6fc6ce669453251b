"""`ubatch serve` on the embedded tiny model, over real HTTP on 127.0.0.1: the official openai client,
batch invariance end to end (32 concurrent clients), streaming, embeddings, and the engine left empty."""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="the [server] extra (fastapi, uvicorn) is not installed")
openai = pytest.importorskip("openai", reason="the openai client is not installed")

from server_util import ServerProcess  # noqa: E402

MODEL = "tiny-llama"


@pytest.fixture(scope="module")
def server():
    with ServerProcess("--parallel", "16", "--n-ctx", "4096") as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def _prompt(i: int, n: int = 6):
    return [(17 * i + 5 * k + 3) % 256 for k in range(n + i % 5)]


def test_models_and_health(server, client):
    ids = [m.id for m in client.models.list().data]
    assert ids == [MODEL]
    with server.client() as c:
        h = c.get("/health").json()
    assert h["status"] == "ok" and h["model"] == MODEL


def test_completion_openai_client(server, client):
    r = client.completions.create(model=MODEL, prompt=_prompt(1), max_tokens=7, temperature=0,
                                  extra_body={"return_token_ids": True})
    ch = r.choices[0]
    assert r.object == "text_completion" and ch.finish_reason == "length" and ch.index == 0
    assert r.usage.prompt_tokens == len(_prompt(1)) and r.usage.completion_tokens == 7
    assert len(ch.model_extra["token_ids"]) == 7
    # the tiny model's vocabulary is bytes: the text is those bytes decoded (invalid UTF-8 replaced)
    assert ch.text == bytes(ch.model_extra["token_ids"]).decode("utf-8", "replace")
    # the same greedy completion as the engine run in this process, alone
    from ubatch.engine.llm_engine import LLMEngine, SamplingParams
    import ubatch
    eng = LLMEngine(ubatch.models.tiny_llama(), n_ctx=512, n_seq_max=1)
    eng.add_request(_prompt(1), SamplingParams(max_tokens=7, temperature=0.0), request_id="x")
    toks = []
    while eng.has_unfinished_requests():
        for o in eng.step():
            toks += o.outputs[0].token_ids_delta
    assert toks == ch.model_extra["token_ids"]


def test_text_prompt_stop_n_and_seed(server, client):
    r = client.completions.create(model=MODEL, prompt="Hello", max_tokens=6, temperature=0.9, seed=7, n=3)
    assert [c.index for c in r.choices] == [0, 1, 2]
    again = client.completions.create(model=MODEL, prompt="Hello", max_tokens=6, temperature=0.9, seed=7, n=3)
    assert [c.text for c in r.choices] == [c.text for c in again.choices]      # seeded: reproducible
    g = client.completions.create(model=MODEL, prompt="Hello", max_tokens=12, temperature=0)
    text = g.choices[0].text
    stop = text[3:5]
    if stop and "\ufffd" not in stop:
        s = client.completions.create(model=MODEL, prompt="Hello", max_tokens=12, temperature=0, stop=[stop])
        assert s.choices[0].finish_reason == "stop" and s.choices[0].text == text[:text.index(stop)]


def test_completion_stream_matches_non_stream(server, client):
    full = client.completions.create(model=MODEL, prompt=_prompt(2), max_tokens=20, temperature=0)
    chunks = list(client.completions.create(model=MODEL, prompt=_prompt(2), max_tokens=20, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == full.choices[0].text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 20


def test_raw_sse_framing_ends_with_done(server):
    body = {"model": MODEL, "prompt": _prompt(3), "max_tokens": 4, "temperature": 0, "stream": True}
    with server.client() as c:
        r = c.post("/v1/completions", json=body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = [e for e in r.text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    for e in events[:-1]:
        assert e.startswith("data: ")
        assert json.loads(e[6:])["object"] == "text_completion"


def test_chat_and_chat_stream(server, client):
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    r = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=8, temperature=0)
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    assert r.usage.completion_tokens == 8 and r.choices[0].finish_reason == "length"
    parts = list(client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=8, temperature=0, stream=True))
    assert parts[0].choices[0].delta.role == "assistant"
    assert "".join(p.choices[0].delta.content or "" for p in parts) == r.choices[0].message.content
    assert parts[-1].choices[0].finish_reason == "length"


def test_logprobs(server, client):
    r = client.completions.create(model=MODEL, prompt=_prompt(4), max_tokens=5, temperature=0, logprobs=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 5
    for lp_tok, top in zip(lp.token_logprobs, lp.top_logprobs):
        assert lp_tok <= 0 and len(top) <= 3 and max(top.values()) == pytest.approx(lp_tok)  # greedy: the top one
    c = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=3,
                                       temperature=0, logprobs=True, top_logprobs=2)
    content = c.choices[0].logprobs.content
    assert len(content) == 3 and all(len(t.top_logprobs) == 2 for t in content)


def test_embeddings(server, client):
    inputs = [_prompt(5), _prompt(6, 9), _prompt(7, 3)]
    r = client.embeddings.create(model=MODEL, input=inputs)
    vecs = np.array([d.embedding for d in r.data], np.float32)
    assert vecs.shape == (3, 64) and [d.index for d in r.data] == [0, 1, 2]
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert r.usage.prompt_tokens == sum(len(x) for x in inputs)
    from ubatch.engine.llm_engine import LLMEngine
    import ubatch
    ref = LLMEngine(ubatch.models.tiny_llama(), n_ctx=512, n_seq_max=1).embed(inputs)
    assert np.array_equal(vecs, ref)           # float32 through JSON round-trips exactly; one input at a time
    b64 = client.embeddings.create(model=MODEL, input=inputs[0], encoding_format="base64")
    import base64
    assert np.array_equal(np.frombuffer(base64.b64decode(b64.data[0].embedding), np.float32), ref[0])


def test_32_concurrent_clients_get_their_greedy_completions(server):
    prompts = [_prompt(i) for i in range(32)]

    def one(p):
        with server.client() as c:
            r = c.post("/v1/completions", json={"model": MODEL, "prompt": p, "max_tokens": 40, "temperature": 0,
                                                "return_token_ids": True})
            assert r.status_code == 200, r.text
            return r.json()["choices"][0]["token_ids"]

    alone = [one(p) for p in prompts]
    before = server.metrics()
    with ThreadPoolExecutor(32) as ex:
        together = list(ex.map(one, prompts))
    after = server.metrics()
    assert together == alone
    # batched: steps that decoded several sequences at once (buckets of the per-step sequence histogram)
    multi = (after["ubatch_step_sequences_count"] - after['ubatch_step_sequences_bucket{le="1"}']) - \
            (before["ubatch_step_sequences_count"] - before['ubatch_step_sequences_bucket{le="1"}'])
    assert multi > 0 and after["ubatch_step_max_sequences"] >= 4, after
    server.wait_idle()


def test_several_prompts_and_n_in_one_request(server):
    with server.client() as c:
        body = {"model": MODEL, "prompt": [_prompt(8), _prompt(9)], "max_tokens": 6, "temperature": 0, "n": 2,
                "return_token_ids": True}
        r = c.post("/v1/completions", json=body).json()
        singles = [c.post("/v1/completions", json={**body, "prompt": p, "n": 1}).json()["choices"][0]["token_ids"]
                   for p in (_prompt(8), _prompt(9))]
        streamed = c.post("/v1/completions", json={**body, "stream": True}).text
    assert [ch["index"] for ch in r["choices"]] == [0, 1, 2, 3]
    # prompt k, choice j -> index k * n + j; greedy: both choices of a prompt are its single completion
    assert [ch["token_ids"] for ch in r["choices"]] == [singles[0], singles[0], singles[1], singles[1]]
    assert r["usage"]["prompt_tokens"] == len(_prompt(8)) + len(_prompt(9))
    assert r["usage"]["completion_tokens"] == 4 * 6
    per_index = {}
    for ev in streamed.split("\n\n"):
        if ev.startswith("data: {"):
            for ch in json.loads(ev[6:])["choices"]:
                per_index.setdefault(ch["index"], []).extend(ch.get("token_ids", []))
    assert per_index == {k: ch["token_ids"] for k, ch in enumerate(r["choices"])}
    server.wait_idle()
