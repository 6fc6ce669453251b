"""`ubatch serve --model gemma3-270m` answering the official openai client: greedy completions agree with
llama.cpp's recorded tokens (tests/data/engine, up to llama.cpp's own near-ties), concurrent = alone, chat
(with Gemma's turn format: this GGUF has no template), streaming and embeddings. Kept small (a few dozen
generated tokens in all) so the real model costs little CPU."""
from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="the [server] extra (fastapi, uvicorn) is not installed")
openai = pytest.importorskip("openai", reason="the openai client is not installed")

from server_util import ServerProcess  # noqa: E402

pytestmark = pytest.mark.realmodel
MODEL = "gemma3-270m"
import suite_paths  # noqa: E402
DATA = os.path.join(suite_paths.DATA, "engine", "llama_cpp_greedy_gemma3-270m.jsonl")
N_TOK = 6


@pytest.fixture(scope="module")
def server():
    with ServerProcess("--parallel", "4", "--n-ctx", "2048", model=MODEL, timeout=300) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def _records(k: int):
    with open(DATA) as f:
        return [json.loads(line) for line in f][:k]


def _agreeing_prefix(rec) -> int:
    """Steps before llama.cpp's first near-tie (margin below the agreement threshold of the real-model tests:
    max(0.2, the largest margin at which llama.cpp's own configurations disagreed))."""
    from realmodel_replay import margin_threshold
    tie = margin_threshold(MODEL)
    n = 0
    for m in rec["margins"][:N_TOK]:
        if m < tie:
            break
        n += 1
    return n


def test_completions_agree_with_llama_cpp_and_batch_invariant(server, client):
    recs = _records(4)

    def ask(rec):
        r = client.completions.create(model=MODEL, prompt=rec["prompt"], max_tokens=N_TOK, temperature=0,
                                      extra_body={"return_token_ids": True})
        return r

    alone = [ask(rec) for rec in recs[:2]]
    with ThreadPoolExecutor(4) as ex:
        together = list(ex.map(ask, recs))
    checked = []
    for rec, r in zip(recs, together):
        assert r.usage.prompt_tokens == len(rec["prompt_tokens"])          # same tokenization as llama.cpp
        ids = r.choices[0].model_extra["token_ids"]
        k = _agreeing_prefix(rec)
        checked.append(k)
        assert ids[:k] == rec["tokens"][:k], (rec["prompt"], ids, rec["tokens"])
    assert sum(checked) >= 4, checked                                     # the comparison is not vacuous
    for a, t in zip(alone, together):                                      # concurrency changes nothing
        assert a.choices[0].model_extra["token_ids"] == t.choices[0].model_extra["token_ids"]
        assert a.choices[0].text == t.choices[0].text
    server.wait_idle()


def test_chat_stream_and_non_stream(server, client):
    msgs = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    r = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=5, temperature=0)
    text = r.choices[0].message.content
    assert r.choices[0].finish_reason in ("stop", "length") and text.strip()
    assert "<start_of_turn>" not in text and "<end_of_turn>" not in text
    parts = list(client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=5, temperature=0,
                                                stream=True))
    assert "".join(p.choices[0].delta.content or "" for p in parts if p.choices) == text
    # the prompt went through Gemma's turn format (BOS, <start_of_turn>user ... <start_of_turn>model)
    import ubatch
    from ubatch.model import fetch
    from ubatch.chat.resolve import GEMMA3_TEMPLATE
    tok = ubatch.Tokenizer.from_gguf(fetch.path(MODEL))
    ids = tok.encode(tok.apply_chat_template(msgs, template=GEMMA3_TEMPLATE), add_special=False, parse_special=True)
    assert ids[0] == tok.bos and r.usage.prompt_tokens == len(ids)


def test_embeddings(server, client):
    r = client.embeddings.create(model=MODEL, input=["The cat sat on the mat.", "Stock markets fell today."])
    v = np.array([d.embedding for d in r.data])
    assert v.shape == (2, 640) and np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
    assert r.usage.prompt_tokens > 8
    server.wait_idle()
