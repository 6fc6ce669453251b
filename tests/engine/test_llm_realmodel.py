"""ubatch.LLM on the real models (token-id prompts from llama.cpp's recordings, so these tests do not depend on the
tokenizer): greedy generation equals stepping Context by hand and equals llama.cpp's greedy continuations up to
llama.cpp's own near-ties; a prompt's tokens and log-probabilities are bitwise the same alone and among others
(per-sequence and unified KV); n = 2 decodes the prompt once and its forks equal separate runs; pooled embeddings
of a batch equal one at a time, bitwise. Kept small: the real models cost CPU time in CI."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import ubatch
from ubatch.batch.container import Batch
from ubatch.engine.llm_engine import LLMEngine, SamplingParams

pytestmark = pytest.mark.realmodel
from suite_paths import DATA  # noqa: E402


def recorded(model: str):
    with open(os.path.join(DATA, "engine", f"llama_cpp_greedy_{model}.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def near_tie(model: str) -> float:
    """M = max(0.2, the largest margin at which llama.cpp's own configurations chose differently)."""
    with open(os.path.join(DATA, "realmodel", "summary.json")) as f:
        s = json.load(f)
    tag = {"gemma3-270m": "gemma3-270m-q4_k_m", "qwen2.5-0.5b": "qwen2.5-coder-0.5b-q4_k_m"}[model]
    return max(0.2, float(s["models"][tag]["greedy"]["max_margin_at_divergence"]))


@pytest.fixture(scope="module")
def gemma():
    return ubatch.models.load("gemma3-270m")


def _agrees_with_llama_cpp(model: str, ours, rec) -> None:
    ref, margins = rec["tokens"][:len(ours)], rec["margins"]
    k = next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b), None)
    if k is not None:
        assert margins[k] < near_tie(model), (f"prompt {rec['prompt_id']}: token {k} differs from llama.cpp's "
                                              f"where its margin is {margins[k]:.3f}")


def test_gemma_greedy_batched_vs_llama_cpp_vs_alone_vs_by_hand(gemma):
    recs = recorded("gemma3-270m")[:4]
    n_gen = 10
    kw = dict(max_tokens=n_gen, ignore_eos=True, logprobs=0)
    eng = LLMEngine(gemma, n_ctx=1024, n_batch=64, n_ubatch=16, n_seq_max=4, kv_unified=True)
    for r in recs:
        eng.add_request(r["prompt_tokens"], SamplingParams(**kw), request_id=str(r["prompt_id"]))
    batched = {}
    while eng.has_unfinished_requests():
        for o in eng.step():
            c = o.outputs[0]
            batched.setdefault(o.request_id, []).extend((d["token_id"], d["logprob"]) for d in c.logprobs_delta)
    for r in recs:
        _agrees_with_llama_cpp("gemma3-270m", [t for t, _ in batched[str(r["prompt_id"])]], r)
    # two prompts alone, per-sequence KV, one 512-token ubatch: tokens and log-probabilities bitwise equal
    alone_eng = LLMEngine(gemma, n_ctx=256, n_batch=512, n_ubatch=512, n_seq_max=1)
    for r in recs[:2]:
        alone_eng.add_request(r["prompt_tokens"], SamplingParams(**kw), request_id="a")
        got = []
        while alone_eng.has_unfinished_requests():
            for o in alone_eng.step():
                got.extend((d["token_id"], d["logprob"]) for d in o.outputs[0].logprobs_delta)
        assert got == batched[str(r["prompt_id"])]
    # the first prompt by hand with Context
    r = recs[0]
    ctx = ubatch.Context(gemma, n_ctx=256, n_batch=256, n_ubatch=256, type_k="f16", type_v="f16")
    p = np.array(r["prompt_tokens"], np.int32)
    ctx.decode(Batch.from_arrays(tokens=p, pos=np.arange(len(p), dtype=np.int32)))
    toks = []
    for i in range(n_gen):
        toks.append(int(np.argmax(ctx.get_logits_ith(-1))))
        if i + 1 < n_gen:
            ctx.decode(Batch.from_arrays(tokens=np.array(toks[-1:], np.int32), pos=np.array([len(p) + i], np.int32)))
    assert toks == [t for t, _ in batched[str(r["prompt_id"])]]


def test_gemma_seeded_sampling_alone_equals_among_others_and_forks(gemma):
    recs = recorded("gemma3-270m")
    kw = dict(max_tokens=4, temperature=0.9, top_k=40, top_p=0.95, min_p=0.05, seed=7, repeat_penalty=1.1)
    ps = [r["prompt_tokens"] for r in recs]
    many = ubatch.LLM(gemma, n_ctx=8 * 256, n_batch=32, n_ubatch=8, n_seq_max=8).generate(ps, **kw)
    eng = LLMEngine(gemma, n_ctx=512, n_batch=512, n_ubatch=512, n_seq_max=2, kv_unified=True)
    eng.add_request(ps[3], SamplingParams(n=2, **kw))
    forks = []
    while eng.has_unfinished_requests():
        forks += [o for o in eng.step() if o.finished]
    assert eng.statistics.prompt_tokens == len(ps[3])               # the prompt was decoded once
    assert forks[0].outputs[0].token_ids == many[3].tokens           # fork 0 (seed 7) = the run among 7 others
    alone = ubatch.LLM(gemma, n_ctx=256, n_seq_max=1)
    assert forks[0].outputs[1].token_ids == alone.generate([ps[3]], **dict(kw, seed=8))[0].tokens


def test_gemma_embeddings_batch_equals_one_at_a_time(gemma):
    ps = [r["prompt_tokens"] for r in recorded("gemma3-270m")[:3]]
    llm = ubatch.LLM(gemma, n_ctx=512, n_batch=128, n_seq_max=3)
    for pooling in ("mean", "last"):
        many = llm.embed(ps, pooling=pooling, normalize=False)
        one = np.stack([llm.embed([p], pooling=pooling, normalize=False)[0] for p in ps])
        assert many.shape == (3, gemma.n_embd) and np.array_equal(many, one), pooling


def test_qwen_greedy_vs_llama_cpp():
    qwen = ubatch.models.load("qwen2.5-0.5b")
    recs = recorded("qwen2.5-0.5b")[:2]
    outs = ubatch.LLM(qwen, n_ctx=512, n_seq_max=2).generate([r["prompt_tokens"] for r in recs], max_tokens=6,
                                                               ignore_eos=True)
    for o, r in zip(outs, recs):
        _agrees_with_llama_cpp("qwen2.5-0.5b", o.tokens, r)


def test_gemma_text_stream_stop_and_utf8(gemma):
    """Real pieces (SentencePiece with byte fallback): the streamed deltas of CJK / emoji continuations join to the
    text of the pieces, no delta holds a broken sequence, and a stop string taken from that text cuts it there."""
    tok = gemma.tokenizer
    llm = ubatch.LLM(gemma, n_ctx=512, n_seq_max=2)
    for prompt in ("日本の首都は", "My favourite emoji are 😀, 🎉 and"):
        full = llm.generate(prompt, max_tokens=16, ignore_eos=True)[0]
        pieces = b"".join(tok.token_to_piece(t) for t in full.tokens).decode("utf-8", errors="replace")
        assert full.text == pieces
        parts = list(llm.stream(prompt, max_tokens=16, ignore_eos=True))
        assert "".join(parts) == full.text and not any("\ufffd" in p for p in parts if "\ufffd" not in full.text)
        stop = full.text[len(full.text) // 2:len(full.text) // 2 + 2]
        cut = llm.generate(prompt, max_tokens=16, ignore_eos=True, stop=[stop])[0]
        assert cut.finish_reason == "stop" and cut.text == full.text[:full.text.find(stop)]


def test_qwen_chat_template_and_eog():
    qwen = ubatch.models.load("qwen2.5-0.5b")
    llm = ubatch.LLM(qwen, n_ctx=512, n_seq_max=1)
    msgs = [{"role": "user", "content": "Say hello."}]
    c = llm.chat(msgs, max_tokens=24)
    text = qwen.tokenizer.apply_chat_template(msgs, add_generation_prompt=True)
    assert c.prompt_tokens == len(qwen.tokenizer.encode(text, add_special=True, parse_special=True))
    assert c.finish_reason == "stop" and qwen.tokenizer.eot not in c.tokens and c.text.strip()


def test_gemma_full_kv_cache_loses_nothing(gemma):
    """Four 40-60-token prompts generating 30 tokens each in one shared stream of 256 cells: the cache fills up,
    the batch is halved, a sequence is preempted and recomputes its cells; every completion equals its run alone."""
    rng = np.random.default_rng(0)
    ps = [rng.integers(3, 20000, int(rng.integers(40, 60))).tolist() for _ in range(4)]
    kw = dict(max_tokens=30, temperature=0.8, ignore_eos=True)
    eng = LLMEngine(gemma, n_ctx=256, n_batch=64, n_ubatch=32, n_seq_max=4, kv_unified=True)
    for i, p in enumerate(ps):
        eng.add_request(p, SamplingParams(seed=i, **kw), request_id=str(i))
    got = {}
    while eng.has_unfinished_requests():
        got.update({o.request_id: o.outputs[0].token_ids for o in eng.step() if o.finished})
    assert eng.statistics.preemptions > 0 and eng.statistics.retries > 0
    alone = ubatch.LLM(gemma, n_ctx=256, n_seq_max=1)
    for i, p in enumerate(ps):
        assert got[str(i)] == alone.generate([p], seed=i, **kw)[0].tokens, i
