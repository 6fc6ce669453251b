"""LLMEngine / LLM on the embedded tiny model: greedy generation equals stepping Context by hand; a prompt's
completion does not depend on what else runs (per-seq and unified KV, greedy and seeded sampling, n_batch,
n_ubatch); n = 4 decodes the prompt once and its forks equal 4 separate runs; a full KV cache loses nothing;
prompts too long are refused before any decode; abort; the engine interface."""
from __future__ import annotations

import numpy as np
import pytest

import ubatch
from ubatch.batch.container import Batch
from ubatch.engine import PromptTooLongError
from ubatch.engine.llm_engine import LLMEngine, SamplingParams
from ubatch.models import tiny_llama

MODEL = tiny_llama()


def prompts(n: int, lo: int = 3, hi: int = 40, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, int(rng.integers(lo, hi + 1))).tolist() for _ in range(n)]


def by_hand(prompt, n_gen: int, **ctx_kw):
    """Greedy decoding with Context directly: the prompt in one decode, then one token per decode."""
    ctx = ubatch.Context(MODEL, n_ctx=512, n_batch=512, n_ubatch=512, n_seq_max=1, type_k="f16", type_v="f16",
                         **ctx_kw)
    b = Batch.from_arrays(tokens=np.array(prompt, np.int32), pos=np.arange(len(prompt), dtype=np.int32))
    ctx.decode(b)
    out = []
    for i in range(n_gen):
        t = int(np.argmax(ctx.get_logits_ith(-1)))
        out.append(t)
        if i + 1 < n_gen:
            ctx.decode(Batch.from_arrays(tokens=np.array([t], np.int32), pos=np.array([len(prompt) + i], np.int32)))
    return out


def test_generate_is_greedy_identical_to_context_by_hand():
    ps = prompts(5, seed=1)
    llm = ubatch.LLM(MODEL, n_ctx=1024, n_batch=16, n_ubatch=8, n_seq_max=4)
    outs = llm.generate(ps, max_tokens=12)
    assert [o.tokens for o in outs] == [by_hand(p, 12) for p in ps]
    assert all(o.finish_reason == "length" and o.prompt_tokens == len(p) for o, p in zip(outs, ps))


SAMPLING = [dict(temperature=0.0), dict(temperature=0.9, top_k=0, top_p=0.9, min_p=0.0, seed=11, repeat_penalty=1.1)]


@pytest.mark.parametrize("sampling", SAMPLING, ids=["greedy", "seeded"])
@pytest.mark.parametrize("layout", [dict(kv_unified=False, n_ctx=32 * 256), dict(kv_unified=True, n_ctx=4096)],
                         ids=["per-seq", "unified"])
def test_alone_equals_among_31_others(sampling, layout):
    ps = prompts(32, seed=2)
    many = ubatch.LLM(MODEL, n_batch=64, n_ubatch=16, n_seq_max=32, **layout).generate(ps, max_tokens=10, **sampling)
    alone_llm = ubatch.LLM(MODEL, n_ctx=256, n_batch=512, n_ubatch=512, n_seq_max=1)
    for i in (0, 7, 31):
        alone = alone_llm.generate([ps[i]], max_tokens=10, **sampling)[0]
        assert alone.tokens == many[i].tokens, i
        assert alone.text == many[i].text


@pytest.mark.parametrize("kv_unified", [False, True])
def test_n4_decodes_the_prompt_once_and_forks_match_separate_runs(kv_unified):
    p = prompts(1, 20, 20, seed=3)[0]
    kw = dict(max_tokens=8, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=100)
    eng = LLMEngine(MODEL, n_ctx=1024, n_batch=64, n_ubatch=32, n_seq_max=4, kv_unified=kv_unified)
    eng.add_request(p, SamplingParams(n=4, **kw))
    eng.step()                                                 # prompt decoded, forked, 4 first tokens sampled
    assert eng.statistics.prompt_tokens == len(p)
    eng.step()                                                 # the 4 first tokens decoded
    kv = eng.ctx.memory
    if kv_unified:
        assert kv.used(0) == len(p) + 4                        # the prompt's cells are shared
    else:
        assert [kv.used(s) for s in range(4)] == [len(p) + 1] * 4
    outs = []
    while eng.has_unfinished_requests():
        outs += [o for o in eng.step() if o.finished]
    assert eng.statistics.prompt_tokens == len(p)              # the decoder saw the prompt once
    forks = outs[0].outputs
    assert [f.index for f in forks] == [0, 1, 2, 3]
    llm = ubatch.LLM(MODEL, n_ctx=256, n_seq_max=1)
    sep = [llm.generate([p], **dict(kw, seed=100 + j))[0].tokens for j in range(4)]
    assert [f.token_ids for f in forks] == sep
    assert len({tuple(s) for s in sep}) > 1                    # the seeds do differ


def test_generate_n_orders_completions_by_prompt():
    ps = prompts(3, seed=4)
    outs = ubatch.LLM(MODEL, n_ctx=2048, n_seq_max=8).generate(ps, max_tokens=4, n=2, temperature=0.8, seed=1)
    assert [(o.index, o.prompt_tokens) for o in outs] == [(j, len(p)) for p in ps for j in range(2)]


def test_full_kv_cache_loses_nothing():
    """A unified cache of 256 cells for 8 prompts of 30-60 tokens generating 40 each (6 at a time): the batch is
    halved and retried, sequences are preempted and recomputed; every completion equals its run alone."""
    ps = prompts(8, 30, 60, seed=5)
    eng = LLMEngine(MODEL, n_ctx=256, n_batch=128, n_ubatch=32, n_seq_max=6, kv_unified=True)
    for i, p in enumerate(ps):
        eng.add_request(p, SamplingParams(max_tokens=40, temperature=0.7, seed=i), request_id=str(i))
    got = {}
    while eng.has_unfinished_requests():
        for o in eng.step():
            if o.finished:
                got[o.request_id] = o.outputs[0].token_ids
    st = eng.statistics
    assert st.retries > 0 and st.preemptions > 0 and st.finished == 8
    alone = ubatch.LLM(MODEL, n_ctx=256, n_seq_max=1)
    for i, p in enumerate(ps):
        assert got[str(i)] == alone.generate([p], max_tokens=40, temperature=0.7, seed=i)[0].tokens, i
    assert st.generated_tokens >= 8 * 40                        # recomputation re-samples nothing twice...
    assert sum(len(v) for v in got.values()) == 8 * 40          # ...and every completion is whole


def test_context_limit_finishes_with_length():
    llm = ubatch.LLM(MODEL, n_ctx=512, n_seq_max=2)          # 256 cells per sequence
    out = llm.generate([list(range(250))], max_tokens=100)[0]
    assert out.finish_reason == "length" and len(out.tokens) == 256 - 250 + 1


def test_prompt_too_long_raises_before_any_decode():
    llm = ubatch.LLM(MODEL, n_ctx=512, n_seq_max=2)
    with pytest.raises(PromptTooLongError, match="257 tokens, more than the 256 cells"):
        llm.generate([[1, 2, 3], list(range(256)) + [0]], max_tokens=4)
    st = llm.engine.statistics
    assert st.decode_calls == 0 and not llm.engine.has_unfinished_requests()
    assert issubclass(PromptTooLongError, ValueError)


@pytest.mark.parametrize("prompt,msg", [([], "empty"), ([1, 300], "token id 300"), ([[1, 2]], "flat list"),
                                        (3.5, "prompt must be")])
def test_bad_prompts(prompt, msg):
    eng = LLMEngine(MODEL, n_ctx=256, n_seq_max=1)
    with pytest.raises(ValueError, match=msg):
        eng.add_request(prompt)


def test_bad_requests():
    eng = LLMEngine(MODEL, n_ctx=512, n_seq_max=2)
    with pytest.raises(ValueError, match="n = 3 completions need 3 sequences"):
        eng.add_request([1], SamplingParams(n=3))
    with pytest.raises(ValueError, match="top_p"):
        eng.add_request([1], SamplingParams(top_p=2))
    eng.add_request([1], request_id="a")
    with pytest.raises(ValueError, match="already in use"):
        eng.add_request([2], request_id="a")


@pytest.mark.parametrize("prefix_cache", [False, True])
def test_abort_frees_the_sequence(prefix_cache):
    eng = LLMEngine(MODEL, n_ctx=512, n_seq_max=2, enable_prefix_caching=prefix_cache)
    a = eng.add_request(prompts(1, seed=6)[0], SamplingParams(max_tokens=50))
    b = eng.add_request(prompts(1, seed=7)[0], SamplingParams(max_tokens=3))
    eng.step()
    eng.step()
    assert eng.stats()["running"] == 2
    eng.abort_request(a)
    # the aborted sequence's cells are freed, or (prefix cache) kept only as a cached entry of its free stream
    cached = eng.stats()["prefix_cache_cells"] if prefix_cache else 0
    assert eng.stats()["running"] == 1 and eng.ctx.memory.used(0) == cached
    assert cached in (0, eng.ctx.memory.used(0))
    outs = []
    while eng.has_unfinished_requests():
        outs += eng.step()
    assert {o.request_id for o in outs} == {b}


def test_step_outputs_deltas_add_up():
    eng = LLMEngine(MODEL, n_ctx=1024, n_seq_max=4)
    rid = eng.add_request("Hello there", SamplingParams(max_tokens=15, temperature=0.5, seed=3, logprobs=2))
    toks, text, lps, last = [], "", [], None
    while eng.has_unfinished_requests():
        for o in eng.step():
            assert o.request_id == rid and o.prompt_tokens == len("Hello there")
            c = o.outputs[0]
            toks += c.token_ids_delta
            text += c.text_delta
            lps += c.logprobs_delta
            last = o
    c = last.outputs[0]
    assert last.finished and c.finish_reason == "length" and c.token_ids == toks and c.text == text
    assert len(lps) == 15 and [d["token_id"] for d in lps] == toks
    assert all(len(d["top_logprobs"]) == 2 and d["logprob"] <= 0 for d in lps)
    s = eng.stats()
    for k in ("waiting", "running", "kv_cells_used", "steps", "ubatches", "last_step_s", "tokens"):
        assert k in s, k


def test_one_decode_per_step_with_every_generating_sequence():
    """Each step is one decode (n_batch large enough) holding one token of every generating sequence."""
    ps = prompts(6, 5, 10, seed=8)
    eng = LLMEngine(MODEL, n_ctx=2048, n_batch=512, n_ubatch=512, n_seq_max=4, timeline=True)
    for p in ps:
        eng.add_request(p, SamplingParams(max_tokens=6))
    while eng.has_unfinished_requests():
        calls = eng.statistics.decode_calls
        running = sum(1 for s in eng.scheduler.active.values() if s.state == "generating")
        eng.step()
        assert eng.statistics.decode_calls - calls <= 1
        if running:
            last = eng.statistics.ubatches[-1].seq_tokens
            assert sum(d for _, d in last.values()) == running
    assert eng.statistics.steps == eng.statistics.decode_calls


def test_more_generating_sequences_than_n_batch():
    """8 sequences and n_batch 3: a step's decode tokens go out in several slices; results unchanged."""
    ps = prompts(8, seed=9)
    kw = dict(max_tokens=6, temperature=0.8, seed=4)
    small = ubatch.LLM(MODEL, n_ctx=2048, n_batch=3, n_ubatch=2, n_seq_max=8).generate(ps, **kw)
    big = ubatch.LLM(MODEL, n_ctx=2048, n_batch=512, n_ubatch=512, n_seq_max=8, kv_unified=True).generate(ps, **kw)
    assert [c.tokens for c in small] == [c.tokens for c in big]


def test_progress_bar(capsys):
    ubatch.LLM(MODEL, n_ctx=512, n_seq_max=2).generate(prompts(3, seed=10), max_tokens=3, progress=True)
    assert "generate" in capsys.readouterr().err


def test_generate_validates_every_prompt_first():
    llm = ubatch.LLM(MODEL, n_ctx=512, n_seq_max=2)
    with pytest.raises(ValueError, match="prompt 1: prompt token id 999"):
        llm.generate([[1, 2], [999]], max_tokens=2)
    assert not llm.engine.has_unfinished_requests() and llm.engine.statistics.decode_calls == 0
