"""Prefix caching on the real models: completions and log-probabilities (greedy and seeded) are identical with and
without the cache for a shared system prompt, a multi-turn conversation and a partial overlap met after the cache
was churned (Gemma 3: the sliding-window cache may have lost the window a reuse needs; then the request takes a
shorter match or none), and the logits of a prompt whose prefix was reused are bitwise those of a recomputation.
Token-id prompts (no tokenizer dependence); kept small, the real models cost CPU time in CI."""
from __future__ import annotations

import numpy as np
import pytest

import ubatch
from ubatch.engine.llm_engine import LLMEngine, SamplingParams

pytestmark = pytest.mark.realmodel


def rand(n: int, seed: int):
    return np.random.default_rng(seed).integers(100, 20000, n).tolist()


def conversation(eng: LLMEngine, system, params_list, n_churn: int):
    """A, B share the system prompt; C continues A's conversation (A's prompt + reply + a new message); D shares
    only the first 100 tokens, after E (a long unrelated prompt) churned the cache. Returns every token and
    log-probability, in order."""
    out = []

    def go(prompt, params):
        eng.add_request(prompt, params)
        toks, lps = [], []
        while eng.has_unfinished_requests():
            for o in eng.step():
                c = o.outputs[0]
                toks += c.token_ids_delta
                lps += [(d["token_id"], d["logprob"], tuple(d["top_logprobs"])) for d in c.logprobs_delta or []]
        out.append((toks, lps))
        return toks

    pa = system + rand(6, 1)
    ra = go(pa, params_list[0])
    go(system + rand(9, 2), params_list[1])
    go(pa + ra + rand(5, 3), params_list[0])
    go(rand(n_churn, 4), params_list[1])
    go(system[:min(100, len(system) - 16)] + rand(7, 5), params_list[0])
    return out


@pytest.mark.parametrize("name,n_sys,n_churn,kv_unified", [("gemma3-270m", 560, 100, True),
                                                           ("qwen2.5-0.5b", 48, 16, False)],
                         ids=["gemma-unified", "qwen-per-seq"])
def test_identical_with_and_without_the_cache(name, n_sys, n_churn, kv_unified):
    model = ubatch.models.load(name)
    params = [SamplingParams(max_tokens=3, temperature=0.0, logprobs=2),
              SamplingParams(max_tokens=3, temperature=0.9, top_k=0, top_p=0.95, min_p=0.0, seed=7, logprobs=1)]
    system = rand(n_sys, 0)
    res = {}
    for on in (False, True):
        eng = LLMEngine(model, n_ctx=2048, n_batch=256, n_ubatch=128, n_seq_max=2, kv_unified=kv_unified,
                        enable_prefix_caching=on)
        res[on] = conversation(eng, system, params, n_churn), eng.stats()
    assert res[True][0] == res[False][0]
    st = res[True][1]
    assert st["prefix_cache_hits"] >= 2 and st["prefix_cache_tokens_saved"] >= 2 * n_sys


@pytest.mark.parametrize("name", ["gemma3-270m", "qwen2.5-0.5b"])
def test_reused_prefix_gives_bitwise_the_same_logits(name):
    model = ubatch.models.load(name)
    system = rand(48, 10)
    q2 = system + rand(5, 12)
    eng = LLMEngine(model, n_ctx=1024, n_batch=256, n_ubatch=64, n_seq_max=2, kv_unified=True)
    eng.add_request(system + rand(6, 11), SamplingParams(max_tokens=2))
    while eng.has_unfinished_requests():
        eng.step()
    eng.add_request(q2, SamplingParams(max_tokens=1))
    eng.step()
    assert eng.stats()["prefix_cache_tokens_saved"] == 48
    cached = eng.ctx.get_logits().copy()
    ref = LLMEngine(model, n_ctx=1024, n_batch=256, n_ubatch=64, n_seq_max=2, kv_unified=True,
                    enable_prefix_caching=False)
    ref.add_request(q2, SamplingParams(max_tokens=1))
    ref.step()
    assert np.array_equal(cached.view(np.uint32), ref.ctx.get_logits().view(np.uint32))
