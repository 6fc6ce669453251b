"""Automatic prefix caching (docs/engine.md) on the embedded tiny model: completions (greedy, seeded sampling,
log-probabilities, n > 1) are identical with and without the cache for shared system prompts, multi-turn chats and
partial overlaps, per-sequence and unified KV; the logits of a prompt whose prefix was reused are bitwise those of
a recomputation; requests arriving together compute their shared prefix once; the KV accounting stays consistent
(every indexed sequence holds exactly what the index says, no cell is leaked) after eviction, the size bound,
preemption and a failed decode; the block index finds exact longest prefixes."""
from __future__ import annotations

import numpy as np
import pytest

import ubatch
from ubatch.common.errors import UbatchError
from ubatch.engine.llm_engine import LLMEngine, SamplingParams
from ubatch.engine.prefix_index import BlockIndex, common_prefix
from ubatch.models import tiny_llama

MODEL = tiny_llama()
LAYOUTS = [dict(kv_unified=False, n_ctx=4 * 512), dict(kv_unified=True, n_ctx=2048)]
LAYOUT_IDS = ["per-seq", "unified"]
SAMPLING = [dict(temperature=0.0, logprobs=3), dict(temperature=0.9, top_k=0, top_p=0.9, min_p=0.0, seed=11,
                                                   repeat_penalty=1.1, logprobs=2)]


def rand(n: int, seed: int):
    return np.random.default_rng(seed).integers(0, 256, n).tolist()


def check_accounting(eng: LLMEngine) -> None:
    """Every sequence the index names holds exactly [0, valid) in the KV cache; no cell holds an id that is
    neither running nor a cached entry; cached cells are what the stats say."""
    pc, kv = eng._prefix, eng.ctx.memory
    if pc is None:
        return
    for key, src in pc.src.items():
        n = src.valid() if src.seq is None else src.seq.n_past
        if src.seq is not None:
            assert src.seq.seq_id == key
            if src.seq.state == "generating":
                n = src.seq.n_past
        assert kv.seq_pos_max(key) == n - 1, (key, n)
        if n:
            assert kv.seq_pos_min(key) == 0 or pc.iswa
    live = set(eng.scheduler.active) | set(pc.src)
    for cache in ((kv.base, kv.swa) if pc.iswa else (kv,)):
        assert set(np.flatnonzero(cache.seq_counts(kv.n_seq)).tolist()) <= live
    assert pc.cached_cells() == eng.stats()["prefix_cache_cells"]


def run(eng: LLMEngine, prompts, params, check: bool = True):
    rids = [eng.add_request(p, params) for p in prompts]
    got = {}
    while eng.has_unfinished_requests():
        for o in eng.step():
            if o.finished:
                got[o.request_id] = o
        if check:
            check_accounting(eng)
    return [got[r] for r in rids]


def summary(outs):
    """Tokens, text, finish reasons and log-probabilities of every completion."""
    res = []
    for o in outs:
        for c in o.outputs:
            res.append((c.index, tuple(c.token_ids), c.text, c.finish_reason))
    return res


def with_logprobs(eng, prompts, params):
    """Like run, with the log-probabilities of every token collected (as floats, compared exactly)."""
    rids = [eng.add_request(p, params) for p in prompts]
    lps = {(r, j): [] for r in rids for j in range(params.n)}
    while eng.has_unfinished_requests():
        for o in eng.step():
            for c in o.outputs:
                if c.logprobs_delta:
                    lps[(o.request_id, c.index)].extend((d["token_id"], d["logprob"], tuple(d["top_logprobs"]))
                                                        for d in c.logprobs_delta)
        check_accounting(eng)
    return [lps[(r, j)] for r in rids for j in range(params.n)]


@pytest.mark.parametrize("sampling", SAMPLING, ids=["greedy", "seeded"])
@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
def test_shared_system_prompt_identical_with_and_without(sampling, layout):
    system = rand(120, 1)
    prompts = [system + rand(3 + 5 * i % 17, 100 + i) for i in range(10)]
    params = SamplingParams(max_tokens=6, n=2 if layout["kv_unified"] else 1, **sampling)
    res = {}
    for on in (False, True):
        eng = LLMEngine(MODEL, n_batch=64, n_ubatch=16, n_seq_max=4, enable_prefix_caching=on, **layout)
        res[on] = with_logprobs(eng, prompts, params), eng.stats()
    assert res[True][0] == res[False][0]
    st_on, st_off = res[True][1], res[False][1]
    assert st_off["prefix_cache"] is False
    assert st_on["prefix_cache_hits"] >= 9 and st_on["prefix_cache_tokens_saved"] >= 9 * 112
    assert st_on["prompt_tokens"] == st_off["prompt_tokens"] - st_on["prefix_cache_tokens_saved"]


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
def test_multi_turn_chat_reuses_the_conversation(layout):
    """Each turn sends the whole conversation so far (prompt + the reply's tokens + a new message)."""
    params = SamplingParams(max_tokens=7, temperature=0.7, seed=5)
    res = {}
    for on in (False, True):
        eng = LLMEngine(MODEL, n_batch=32, n_ubatch=8, n_seq_max=2, enable_prefix_caching=on, **layout)
        convs = [rand(30, 7), rand(25, 8)]
        replies = []
        for turn in range(4):
            outs = run(eng, convs, params)
            replies.append(summary(outs))
            convs = [c + list(o.outputs[0].token_ids) + rand(9, 50 + 10 * turn + k)
                     for k, (c, o) in enumerate(zip(convs, outs))]
        res[on] = replies, eng.stats()
    assert res[True][0] == res[False][0]
    st = res[True][1]
    # turns 2..4 reuse everything but the last reply token and the new message
    assert st["prefix_cache_hits"] >= 6 and st["prefix_cache_tokens_saved"] >= 6 * 30


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
def test_partial_overlaps(layout):
    """Prompts diverging at every kind of place: inside a block, at a block edge, one token before the end, a
    prompt that is a prefix of a cached one, the same prompt again."""
    base = rand(90, 3)
    ps = [base, base[:40] + rand(30, 4), base[:47] + rand(5, 5), base[:48] + rand(20, 6), base[:89] + [7],
          base[:60], base, base + rand(10, 9), rand(50, 10)]
    params = SamplingParams(max_tokens=5, temperature=0.0, logprobs=1)
    res = {}
    for on in (False, True):
        eng = LLMEngine(MODEL, n_batch=64, n_ubatch=16, n_seq_max=2, enable_prefix_caching=on, **layout)
        out = []
        for p in ps:                      # one after the other: each sees what the earlier ones left
            out += with_logprobs(eng, [p], params)
        res[on] = out, eng.stats()
    assert res[True][0] == res[False][0]
    assert res[True][1]["prefix_cache_hits"] >= 6


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
def test_reused_prefix_gives_bitwise_the_same_logits(layout):
    system = rand(100, 11)
    q1, q2 = system + rand(10, 12), system + rand(7, 13)
    eng = LLMEngine(MODEL, n_batch=512, n_ubatch=32, n_seq_max=2, **layout)
    run(eng, [q1], SamplingParams(max_tokens=3))
    eng.add_request(q2, SamplingParams(max_tokens=1))
    eng.step()                                         # q2: only its 7 last tokens are computed
    assert eng.stats()["prefix_cache_tokens_saved"] == 100
    cached = eng.ctx.get_logits().copy()
    ref = LLMEngine(MODEL, n_batch=512, n_ubatch=32, n_seq_max=2, enable_prefix_caching=False, **layout)
    ref.add_request(q2, SamplingParams(max_tokens=1))
    ref.step()
    fresh = ref.ctx.get_logits()
    assert cached.shape == fresh.shape == (1, MODEL.n_vocab)
    assert np.array_equal(cached.view(np.uint32), fresh.view(np.uint32))


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
def test_requests_arriving_together_compute_the_shared_prefix_once(layout):
    system = rand(200, 20)
    tails = [rand(5 + i, 200 + i) for i in range(4)]
    eng = LLMEngine(MODEL, n_batch=64, n_ubatch=16, n_seq_max=4, **layout)
    outs = run(eng, [system + t for t in tails], SamplingParams(max_tokens=4, temperature=0.0))
    st = eng.stats()
    assert st["prompt_tokens"] == 200 + sum(len(t) for t in tails)
    assert st["prefix_cache_tokens_saved"] == 3 * 200
    off = LLMEngine(MODEL, n_batch=64, n_ubatch=16, n_seq_max=4, enable_prefix_caching=False, **layout)
    assert summary(outs) == summary(run(off, [system + t for t in tails], SamplingParams(max_tokens=4)))


@pytest.mark.parametrize("n_ctx,want", [(512, "prefix_cache_evictions"), (256, "preemptions")])
def test_eviction_and_preemption_on_a_full_unified_cache(n_ctx, want):
    """A small unified cache shared by cached entries and 4-6 running sequences with a common prefix: cached
    cells are evicted before any retry, sequences are preempted (n_ctx 256) and recompute; every completion is
    its run alone; the accounting holds after every step; what is left is the cache's."""
    system = rand(32, 30)
    ps = [system + rand(8 + 4 * i, 300 + i) for i in range(10)]
    eng = LLMEngine(MODEL, n_ctx=n_ctx, n_batch=128, n_ubatch=32, n_seq_max=6, kv_unified=True)
    params = [SamplingParams(max_tokens=40, temperature=0.7, seed=i) for i in range(10)]
    rids = [eng.add_request(p, q) for p, q in zip(ps, params)]
    got = {}
    while eng.has_unfinished_requests():
        for o in eng.step():
            if o.finished:
                got[o.request_id] = o.outputs[0].token_ids
        check_accounting(eng)
    st = eng.stats()
    assert st[want] > 0 and st["prefix_cache_hits"] > 0
    alone = ubatch.LLM(MODEL, n_ctx=256, n_seq_max=1, enable_prefix_caching=False)
    for i, (p, r) in enumerate(zip(ps, rids)):
        assert got[r] == alone.generate([p], max_tokens=40, temperature=0.7, seed=i)[0].tokens, i
    assert eng.ctx.memory.used(0) == st["prefix_cache_cells"]
    eng._prefix.clear()
    assert eng.ctx.memory.used(0) == 0 and eng.stats()["prefix_cache_entries"] == 0


def test_cached_cells_never_cause_a_retry_scratch_would_not():
    """A unified cache filled with cached entries, then a workload that fits without them: no retry, no
    preemption (the cached cells are evicted on demand), exactly as without the cache."""
    eng = LLMEngine(MODEL, n_ctx=512, n_batch=256, n_ubatch=64, n_seq_max=4, kv_unified=True)
    run(eng, [rand(100, 40 + i) for i in range(4)], SamplingParams(max_tokens=20))
    assert eng.stats()["prefix_cache_cells"] >= 400
    work = [rand(110, 60 + i) for i in range(4)]
    outs = run(eng, work, SamplingParams(max_tokens=10))
    st = eng.stats()
    assert st["retries"] == 0 and st["preemptions"] == 0 and st["prefix_cache_evictions"] > 0
    off = LLMEngine(MODEL, n_ctx=512, n_batch=256, n_ubatch=64, n_seq_max=4, kv_unified=True,
                    enable_prefix_caching=False)
    assert summary(outs) == summary(run(off, work, SamplingParams(max_tokens=10)))


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
def test_size_bound(layout):
    eng = LLMEngine(MODEL, n_batch=64, n_ubatch=16, n_seq_max=2, prefix_cache_max_cells=100, **layout)
    for i in range(5):
        run(eng, [rand(60, 70 + i)], SamplingParams(max_tokens=4))
        assert eng.stats()["prefix_cache_cells"] <= 100
    assert eng.stats()["prefix_cache_evictions"] >= 3
    with pytest.raises(ValueError, match="prefix_cache_max_cells"):
        LLMEngine(MODEL, n_ctx=512, prefix_cache_max_cells=-1)


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
def test_failed_decode_keeps_the_index_consistent(layout, monkeypatch):
    system = rand(64, 80)
    eng = LLMEngine(MODEL, n_batch=32, n_ubatch=8, n_seq_max=2, **layout)
    run(eng, [system + rand(5, 81)], SamplingParams(max_tokens=3))
    eng.add_request(system + rand(40, 82), SamplingParams(max_tokens=3), request_id="x")
    real = eng.ctx.decode
    calls = {"n": 0}

    def failing(batch):
        calls["n"] += 1
        if calls["n"] == 2:
            raise UbatchError("injected failure")
        return real(batch)

    monkeypatch.setattr(eng.ctx, "decode", failing)
    eng.step()
    with pytest.raises(UbatchError, match="injected"):
        eng.step()
    check_accounting(eng)
    got = None
    while eng.has_unfinished_requests():
        for o in eng.step():
            if o.finished:
                got = o
        check_accounting(eng)
    off = LLMEngine(MODEL, n_batch=32, n_ubatch=8, n_seq_max=2, enable_prefix_caching=False, **layout)
    assert summary([got]) == summary(run(off, [system + rand(40, 82)], SamplingParams(max_tokens=3)))


def test_off_switch_and_llm_option():
    llm = ubatch.LLM(MODEL, n_ctx=1024, n_seq_max=2, enable_prefix_caching=False)
    p = rand(80, 90)
    llm.generate([p, p], max_tokens=3)
    st = llm.engine.stats()
    assert st["prefix_cache"] is False and st["prompt_tokens"] == 160 and llm.ctx.memory.used(0) == 0
    on = ubatch.LLM(MODEL, n_ctx=1024, n_seq_max=2)
    assert on.generate([p], max_tokens=3)[0].tokens == on.generate([p], max_tokens=3)[0].tokens
    assert on.engine.stats()["prefix_cache_tokens_saved"] == 79


def test_block_index_longest_prefix():
    idx = BlockIndex(4)
    a = np.arange(30, dtype=np.int32)
    b = np.r_[np.arange(10), np.arange(100, 120)].astype(np.int32)
    idx.add("a", a)
    idx.add("b", b)
    k, c = idx.match(idx.hashes(np.r_[np.arange(9), [55, 56, 57, 58]].astype(np.int32)))
    assert k == 2 and c == ["a", "b"]
    k, c = idx.match(idx.hashes(np.r_[np.arange(12), [5] * 8].astype(np.int32)))
    assert k == 3 and c == ["a"]
    k, c = idx.match(idx.hashes(np.arange(1, 20, dtype=np.int32)))
    assert (k, c) == (0, [])
    idx.remove("a")
    k, c = idx.match(idx.hashes(a))
    assert k == 2 and c == ["b"]
    assert common_prefix(a, b) == 10 and common_prefix(a, a[:7]) == 7 and common_prefix(a, a[:0]) == 0


def sliding_tiny(n_swa: int = 16):
    """The tiny model with a sliding window of n_swa on its first layer (a two-cache memory, as Gemma 3's)."""
    import dataclasses
    m = tiny_llama()
    hp = m.hparams
    m.hparams = dataclasses.replace(hp, n_swa=n_swa, swa_layers=(True,) + (False,) * (m.n_layer - 1),
                                    rope_freq_base_swa=hp.rope_freq_base, rope_freq_scale_swa=hp.rope_freq_scale)
    assert m.n_swa == n_swa
    return m


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
def test_sliding_window_memory_reuses_only_a_held_window(layout):
    """A two-cache memory (window 16 on layer 0): shared prefixes longer than the window, a multi-turn chat and
    partial overlaps give the completions of runs without the cache; the memory's KVCacheISWA is used."""
    m = sliding_tiny()
    system = rand(70, 120)
    ps = [system + rand(5, 121), system + rand(9, 122), system[:30] + rand(4, 123), system + rand(5, 121) + rand(6, 124)]
    params = SamplingParams(max_tokens=6, temperature=0.0, logprobs=1)
    res = {}
    for on in (False, True):
        eng = LLMEngine(m, n_batch=64, n_ubatch=16, n_seq_max=2, enable_prefix_caching=on, **layout)
        assert hasattr(eng.ctx.memory, "swa")
        out = []
        for p in ps:
            out += with_logprobs(eng, [p], params)
        out += with_logprobs(eng, ps[:2], params)                      # together, after the others
        res[on] = out, eng.stats()
    assert res[True][0] == res[False][0]
    assert res[True][1]["prefix_cache_hits"] >= 4


def test_a_refused_reuse_falls_back_to_computing(monkeypatch):
    """When the memory refuses the copy (e.g. a RewindError: the sliding cache lost the window), the request
    computes its prompt from scratch: same completion, no hit counted, accounting intact."""
    from ubatch.common.errors import RewindError
    system = rand(60, 130)
    eng = LLMEngine(MODEL, n_ctx=1024, n_batch=64, n_ubatch=16, n_seq_max=2, kv_unified=True)
    run(eng, [system + rand(4, 131)], SamplingParams(max_tokens=3))
    real = eng.ctx.memory.seq_cp

    def refuse(src, dst, p0=-1, p1=-1):
        if p1 > 0:
            raise RewindError("injected: window lost", seq_id=dst, first_available=-1, rewind_min=-1)
        return real(src, dst, p0, p1)

    monkeypatch.setattr(eng.ctx.memory, "seq_cp", refuse)
    hits = eng.stats()["prefix_cache_hits"]
    out = run(eng, [system + rand(5, 132)], SamplingParams(max_tokens=4))
    assert eng.stats()["prefix_cache_hits"] == hits
    off = LLMEngine(MODEL, n_ctx=1024, n_batch=64, n_ubatch=16, n_seq_max=2, enable_prefix_caching=False)
    assert summary(out) == summary(run(off, [system + rand(5, 132)], SamplingParams(max_tokens=4)))
