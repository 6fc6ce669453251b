"""Exact speculative decoding on the embedded tiny model: with a draft (prompt lookup, a LlamaDraftModel-like
callable, a draft model) the engine's and Llama's outputs are token for token those without it — greedy, seeded
sampling with penalties, stop strings, max_tokens, logprobs, streamed chunks, batched (per-sequence and unified
KV), a full KV cache — and the KV cache after a request (Llama) or after every step (engine) is what decoding
without the draft leaves. Also: LlamaPromptLookupDecoding against a numpy transcription of llama-cpp-python's
search, the adaptive policy, the sliding-window room."""
from __future__ import annotations

import numpy as np
import pytest

import ubatch
import ubatch.llama_cpp as L
from ubatch.engine.llm_engine import LLMEngine, SamplingParams
from ubatch.engine.speculative import CostModel, DraftGate, plan_depths, sliding_room
from ubatch.llama_cpp import _model
from ubatch.llama_cpp.llama_speculative import LlamaDraftModel, LlamaPromptLookupDecoding
from ubatch.models import TINY_LLAMA_PATH, tiny_llama

from spec_helpers import kv_state, repetitive_prompts
from byte_vocab import ByteVocab

MODEL = tiny_llama()


class _PriorCost(CostModel):
    """The step-cost model at its prior (b = R0 * a), not fitted to this machine's wall clock: whether the engine
    drafts must not depend on how fast the machine runs the tests (the ASan build, a loaded machine)."""

    def observe(self, ubatches: int, rows: int, seconds: float, prompt_rows: int = 0) -> None:
        pass


class _OpenGate(DraftGate):
    """The gate always open, measuring nothing: for the same reason."""

    def tick(self, B: int) -> bool:
        return True

    def observe(self, B: int, drafted: bool, emitted: int, seconds: float) -> None:
        pass


@pytest.fixture(autouse=True)
def _cost_at_prior(monkeypatch):
    import ubatch.engine.spec_engine as se
    monkeypatch.setattr(se, "CostModel", _PriorCost)
    monkeypatch.setattr(se, "DraftGate", _OpenGate)


SAMPLING = [dict(temperature=0.0),
            dict(temperature=0.9, top_k=0, top_p=0.9, min_p=0.0, seed=11, repeat_penalty=1.1),
            dict(temperature=0.0, repeat_penalty=1.3, frequency_penalty=0.2, repeat_last_n=8)]
IDS = ["greedy", "seeded-penalty", "greedy-window8"]


# ------------------------------------------------------------------------------------------ prompt lookup
def _reference_lookup(input_ids, max_ngram_size, num_pred_tokens):
    """llama-cpp-python 0.3.36's find_candidate_pred_tokens, transcribed: sliding windows, earliest match."""
    n = input_ids.shape[0]
    for g in range(min(max_ngram_size, n - 1), 0, -1):
        windows = np.lib.stride_tricks.sliding_window_view(input_ids, (g,))
        for idx in np.nonzero(np.all(windows == input_ids[-g:], axis=1))[0]:
            s, e = idx + g, min(idx + g + num_pred_tokens, n)
            if s < e:
                return input_ids[s:e]
    return np.array([], dtype=np.intc)


def test_prompt_lookup_matches_llama_cpp_python_search():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        a = rng.integers(0, int(rng.integers(1, 6)), int(rng.integers(0, 40))).astype(np.intc)
        g, k = int(rng.integers(-1, 5)), int(rng.integers(-1, 12))
        got = LlamaPromptLookupDecoding.find_candidate_pred_tokens(a, g, k)
        assert got.tolist() == _reference_lookup(a, g, k).tolist() and got.dtype == np.intc
    d = LlamaPromptLookupDecoding()
    assert (d.max_ngram_size, d.num_pred_tokens) == (2, 10) and isinstance(d, LlamaDraftModel)
    assert d(np.array([1, 2, 3, 9, 1, 2], np.intc)).tolist() == [3, 9, 1, 2]
    with pytest.raises(ValueError, match="1-D"):
        d(np.zeros((2, 2), np.intc))
    with pytest.raises(TypeError):
        LlamaDraftModel()


# ------------------------------------------------------------------------------------------ engine
def _gen(draft, prompts, kv_unified=False, n_seq_max=4, n_ctx=4096, **samp):
    llm = ubatch.LLM(MODEL, n_ctx=n_ctx, n_batch=64, n_ubatch=16, n_seq_max=n_seq_max, kv_unified=kv_unified,
                     draft=draft)
    outs = llm.generate(prompts, max_tokens=samp.pop("max_tokens", 40), **samp)
    return outs, llm.engine


@pytest.mark.parametrize("sampling", SAMPLING, ids=IDS)
@pytest.mark.parametrize("kv_unified", [False, True], ids=["per-seq", "unified"])
def test_engine_identical_with_prompt_lookup(sampling, kv_unified):
    ps = repetitive_prompts(6, seed=1)
    plain, _ = _gen(None, ps, kv_unified, **sampling)
    spec, eng = _gen("prompt-lookup", ps, kv_unified, **sampling)
    assert [o.tokens for o in spec] == [o.tokens for o in plain]
    assert [o.text for o in spec] == [o.text for o in plain]
    assert [o.finish_reason for o in spec] == [o.finish_reason for o in plain]
    st = eng.stats()
    if sampling["temperature"] == 0.0:                                   # greedy on repetitive prompts:
        assert st["draft_tokens"] > 0 and st["draft_accepted"] > 0       # the draft really ran and helped
    else:   # sampled: the acceptance rate may rightly switch drafting off (it depends on the exact logits, which
        print(f"sampled: {st['draft_tokens']} draft tokens")   # differ between an -O1 ASan build and -O3)
    assert st["generated_tokens"] == sum(len(o.tokens) for o in plain) + sum(o.finish_reason == "stop" for o in plain)


@pytest.mark.parametrize("sampling", SAMPLING[:2], ids=IDS[:2])
@pytest.mark.parametrize("prefix_cache", [True, False], ids=["prefix-cache", "no-cache"])
def test_engine_kv_state_after_each_request_identical(sampling, prefix_cache):
    """One request after the other: after each, the whole KV state (cells, heads, used counts and the K/V
    data of the cells the prefix cache keeps) is the one decoding without a draft leaves."""
    kw = dict(n_ctx=1024, n_batch=64, n_ubatch=16, n_seq_max=2, enable_prefix_caching=prefix_cache)
    plain, spec = ubatch.LLM(MODEL, **kw), ubatch.LLM(MODEL, draft="prompt-lookup", **kw)
    ps = repetitive_prompts(3, seed=12)
    stop = [c.text[10:12] for c in ubatch.LLM(MODEL, **kw).generate(ps[1:2], max_tokens=30, temperature=0.0)]
    for i, p in enumerate(ps + ps[:1]):
        a = plain.generate([p], max_tokens=36, stop=stop if i == 1 else None, **sampling)
        b = spec.generate([p], max_tokens=36, stop=stop if i == 1 else None, **sampling)
        assert [c.tokens for c in a] == [c.tokens for c in b]
        assert kv_state(plain.ctx) == kv_state(spec.ctx)
    assert spec.engine.stats()["draft_tokens"] > 0


def test_engine_stop_strings_logprobs_and_n():
    ps = repetitive_prompts(4, seed=2)
    texts = [c.text for c in ubatch.LLM(MODEL, n_ctx=4096, n_seq_max=4).generate(ps, max_tokens=30, temperature=0.0)]
    stops = [t[12:14] for t in texts[:2]]
    kw = dict(stop=stops, logprobs=3, n=2, temperature=0.0, top_k=20)
    plain = ubatch.LLM(MODEL, n_ctx=4096, n_batch=64, n_seq_max=8)
    spec = ubatch.LLM(MODEL, n_ctx=4096, n_batch=64, n_seq_max=8, draft="prompt-lookup")
    for p in ps:
        a = plain.engine.add_request(p, SamplingParams(max_tokens=30, **kw))
        b = spec.engine.add_request(p, SamplingParams(max_tokens=30, **kw))
    res = []
    for llm in (plain, spec):
        lp, final = {}, {}
        while llm.engine.has_unfinished_requests():
            for out in llm.engine.step():
                for o in out.outputs:
                    lp.setdefault((out.request_id, o.index), []).extend(o.logprobs_delta or [])
                    if out.finished:
                        final[(out.request_id, o.index)] = (o.text, o.token_ids, o.finish_reason)
        res.append((final, lp))
    assert res[0] == res[1]
    assert any(f[2] == "stop" for f in res[0][0].values())


@pytest.mark.parametrize("sampling", SAMPLING[:2], ids=IDS[:2])
def test_streamed_chunks_identical(sampling):
    p = repetitive_prompts(1, seed=4)[0]
    plain = ubatch.LLM(MODEL, n_ctx=1024, n_seq_max=1)
    spec = ubatch.LLM(MODEL, n_ctx=1024, n_seq_max=1, draft="prompt-lookup")
    a = list(plain.stream(p, max_tokens=48, stop=["\x00\x01"], **sampling))
    b = list(spec.stream(p, max_tokens=48, stop=["\x00\x01"], **sampling))
    assert "".join(a) == "".join(b) and len("".join(a)) > 0
    # the chunks: every text delta of the plain stream is a boundary of the drafted one's text too
    assert set(np.cumsum([len(x) for x in b]).tolist()) <= set(np.cumsum([len(x) for x in a]).tolist())


class JunkDraft(LlamaDraftModel):
    """A LlamaDraftModel that guesses badly (and sometimes nothing): the output must not change."""

    def __call__(self, input_ids, /, **kwargs):
        n = len(input_ids)
        return np.array([(n * 7 + k) % 256 for k in range(n % 4)], np.intc)


class EchoDraft(LlamaDraftModel):
    """Guesses the last few tokens again (a plain callable is accepted too)."""

    def __call__(self, input_ids, /, **kwargs):
        return input_ids[-12:-6]


@pytest.mark.parametrize("draft", ["junk", "echo", "pld-object", "model"])
def test_engine_identical_with_other_drafters(draft):
    ps = repetitive_prompts(5, seed=5)
    d = {"junk": JunkDraft(), "echo": EchoDraft(), "pld-object": LlamaPromptLookupDecoding(max_ngram_size=3),
         "model": TINY_LLAMA_PATH}[draft]          # a GGUF path: a second model sharing the vocabulary
    for samp in SAMPLING[:2]:
        plain, _ = _gen(None, ps, True, **samp)
        spec, eng = _gen(d, ps, True, **samp)
        assert [o.tokens for o in spec] == [o.tokens for o in plain], samp
    if draft == "model":            # the model drafting for itself: its greedy drafts are accepted (greedy run)
        st = eng.stats()
        assert st["draft_tokens"] > 0 and "draft model" in st["draft"]


@pytest.mark.parametrize("kv_unified", [False, True], ids=["per-seq", "unified"])
def test_the_model_as_its_own_greedy_draft_is_always_accepted(kv_unified):
    """A draft model identical to the model, greedy: batch invariance makes every drafted token the token the
    model then samples, so all are accepted (and the output is the plain one)."""
    from ubatch.engine.speculative import ModelDrafter
    d = ModelDrafter(TINY_LLAMA_PATH, n_vocab=256, n_seq_max=4, n_ctx_seq=4096, n_batch=64, n_threads=None,
                     draft_max=16)
    d.measure = False                      # drafting is free: the policy drafts, so this really runs
    ps = repetitive_prompts(5, seed=13)
    plain, _ = _gen(None, ps, kv_unified, max_tokens=40)
    spec, eng = _gen(d, ps, kv_unified, max_tokens=40)
    assert [o.tokens for o in spec] == [o.tokens for o in plain]
    st = eng.stats()
    assert st["draft_tokens"] > 40 and st["draft_accepted"] == st["draft_tokens"]


def test_draft_model_must_share_the_vocabulary():
    other = ubatch.models.load("tiny-llama")
    assert other.n_vocab == MODEL.n_vocab
    with pytest.raises(ValueError, match="draft must be"):
        ubatch.LLM(MODEL, draft=3.5)
    with pytest.raises(ValueError, match="draft_max"):
        ubatch.LLM(MODEL, draft="prompt-lookup", draft_max=0)

    class Bad(LlamaDraftModel):
        def __call__(self, input_ids, /, **kwargs):
            return np.array([9999], np.intc)
    llm = ubatch.LLM(MODEL, n_ctx=1024, n_seq_max=1, draft=Bad())
    with pytest.raises(ValueError, match="9999"):
        llm.generate([[1, 2, 3]], max_tokens=8)


def test_opt_out_draws_no_draft_rows_and_kv_tracks_plain_every_step():
    ps = repetitive_prompts(3, seed=6)
    eng = LLMEngine(MODEL, n_ctx=4096, n_batch=64, n_ubatch=16, n_seq_max=3, draft="prompt-lookup")
    for p in ps:
        eng.add_request(p, SamplingParams(max_tokens=40, speculative=False))
    while eng.has_unfinished_requests():
        eng.step()
    assert eng.stats()["draft_rows"] == 0
    # opted in: after every step each running sequence holds exactly its positions 0 .. n_past - 1
    for p in ps:
        eng.add_request(p, SamplingParams(max_tokens=40))
    while eng.has_unfinished_requests():
        eng.step()
        for sid, s in eng.scheduler.active.items():
            assert eng.ctx.memory.used(sid) == s.n_past
            assert eng.ctx.memory.seq_pos_max(sid) == s.n_past - 1
    assert eng.stats()["draft_accepted"] > 0
    with pytest.raises(ValueError, match="speculative"):
        eng.add_request([1, 2], SamplingParams(speculative="yes"))


def test_full_kv_cache_with_drafts_loses_nothing():
    ps = repetitive_prompts(6, seed=7, lo=30, hi=60)
    kw = dict(kv_unified=True, n_seq_max=6, n_ctx=256, max_tokens=80, temperature=0.0)
    plain, e0 = _gen(None, ps, **kw)
    spec, e1 = _gen("prompt-lookup", ps, **kw)
    assert [o.tokens for o in spec] == [o.tokens for o in plain]
    assert e0.stats()["preemptions"] + e0.stats()["retries"] > 0


# ------------------------------------------------------------------------------------------ Llama drop-in
@pytest.fixture
def byte_vocab(monkeypatch):
    monkeypatch.setattr(_model, "_load_tokenizer", lambda path, raw: ByteVocab())


def _llama_state(llm):
    from ubatch.llama_cpp._handles import REGISTRY
    c = REGISTRY.get(llm._ctx.ctx, "context")
    return llm.n_tokens, llm._input_ids.tolist(), kv_state(c.ctx)


@pytest.mark.parametrize("draft", [LlamaPromptLookupDecoding(), JunkDraft()], ids=["pld", "junk"])
def test_llama_draft_model_identical_and_kv_state(byte_vocab, draft):
    plain = L.Llama(TINY_LLAMA_PATH, n_ctx=512, verbose=False, logits_all=True)
    spec = L.Llama(TINY_LLAMA_PATH, n_ctx=512, verbose=False, draft_model=draft)
    for i, p in enumerate(repetitive_prompts(2, seed=8)):
        for samp in (dict(temperature=0.0), dict(temperature=0.8, seed=5, repeat_penalty=1.1)):
            kw = dict(max_tokens=50, logprobs=2, stop=[bytes(p[2:4]).decode("latin-1")] if i == 1 else [], **samp)
            a, b = plain.create_completion(p, **kw), spec.create_completion(p, **kw)
            assert a["choices"] == b["choices"] and a["usage"] == b["usage"]
            assert _llama_state(plain) == _llama_state(spec)
            sa = [c["choices"][0]["text"] for c in plain.create_completion(p, stream=True, **kw)]
            sb = [c["choices"][0]["text"] for c in spec.create_completion(p, stream=True, **kw)]
            assert sa == sb
            assert _llama_state(plain) == _llama_state(spec)
    ga = plain.generate(repetitive_prompts(1, seed=9)[0], temp=0.0)
    gb = spec.generate(repetitive_prompts(1, seed=9)[0], temp=0.0)
    assert [next(ga) for _ in range(30)] == [next(gb) for _ in range(30)]
    ga.close()
    gb.close()
    assert _llama_state(plain) == _llama_state(spec)
    if isinstance(draft, LlamaPromptLookupDecoding):
        assert spec._draft_state.accepted > 0


def test_llama_chat_with_draft_model(byte_vocab):
    plain = L.Llama(TINY_LLAMA_PATH, n_ctx=512, verbose=False, chat_format="llama-2")
    spec = L.Llama(TINY_LLAMA_PATH, n_ctx=512, verbose=False, chat_format="llama-2",
                   draft_model=LlamaPromptLookupDecoding(num_pred_tokens=4))
    msgs = [{"role": "user", "content": "abcabcabcabc"}]
    a = plain.create_chat_completion(msgs, max_tokens=24, temperature=0.0)
    b = spec.create_chat_completion(msgs, max_tokens=24, temperature=0.0)
    assert a["choices"] == b["choices"]
    with pytest.raises(ValueError, match="callable"):
        L.Llama(TINY_LLAMA_PATH, n_ctx=512, verbose=False, draft_model=5)


# ------------------------------------------------------------------------------------------ policy, room
def test_plan_depths_follows_acceptance_and_cost():
    one = dict(a=1.0, b=0.2, base_rows=1, base_value=1.0, n_ubatch=512, common_depth=False)
    d = [int(plan_depths(np.array([al]), np.array([16]), **one)[0]) for al in (0.05, 0.3, 0.6, 0.9)]
    assert d[0] == 0 and d == sorted(d) and d[-1] >= 5
    assert plan_depths(np.array([0.3]), np.array([16]), **{**one, "b": 1.0})[0] == 0      # rows too dear
    common = plan_depths(np.array([0.9, 0.1, 0.8]), np.array([8, 8, 8]), a=1.0, b=0.05, base_rows=3,
                         base_value=3.0, n_ubatch=512, common_depth=True)
    assert len(set(common.tolist())) == 1 and common[0] > 0
    c = CostModel()
    for n in (1, 3, 5, 9, 2, 7) * 5:
        c.observe(1, n, 0.05 + 0.01 * n)
    assert abs(c.a - 0.05) < 0.01 and abs(c.b - 0.01) < 0.003


def test_sliding_room_never_lets_a_draft_overwrite_a_cell():
    ctx = ubatch.Context(n_ctx=256, n_batch=256, n_ubatch=256, n_seq_max=1, n_swa=16, swa_pattern=2, n_layer=2,
                         swa_full=False)
    kv = ctx.memory
    assert sliding_room(ubatch.Context(n_ctx=256).memory, 0) is None          # a plain cache never evicts
    n = 0
    while True:
        room = sliding_room(kv, 0)
        if room == 0:
            break
        k = min(room, 5)
        before = kv.swa.cells(0)
        ctx.decode(ubatch.Batch.from_arrays(tokens=np.ones(k, np.int32), pos=np.arange(n, n + k, dtype=np.int32)))
        after = {c: p for c, p, _ in kv.swa.cells(0)}
        assert all(after.get(c) == p for c, p, _ in before)                     # nothing overwritten
        n += k
    assert kv.swa.size < n + 1 <= kv.swa.size + 1


# ------------------------------------------------------------------------------------------ server
def test_serve_draft_option_gives_the_same_completions():
    pytest.importorskip("fastapi", reason="the [server] extra (fastapi, uvicorn) is not installed")
    from server_util import ServerProcess
    ps = repetitive_prompts(3, seed=10)
    want = [c.tokens for c in ubatch.LLM(MODEL, n_ctx=4096, n_seq_max=4).generate(ps, max_tokens=32,
                                                                                  temperature=0.0)]
    with ServerProcess("--parallel", "4", "--n-ctx", "4096", "--draft", "prompt-lookup", "--draft-max", "8") as s:
        with s.client() as c:
            for p, w in zip(ps, want):
                r = c.post("/v1/completions", json={"model": "tiny-llama", "prompt": p, "max_tokens": 32,
                                                    "temperature": 0, "return_token_ids": True})
                assert r.status_code == 200, r.text
                assert r.json()["choices"][0]["token_ids"] == w
            r = c.post("/v1/completions", json={"model": "tiny-llama", "prompt": ps[0], "max_tokens": 32,
                                                "temperature": 0, "return_token_ids": True, "speculative": False})
            assert r.status_code == 200 and r.json()["choices"][0]["token_ids"] == want[0]
            r = c.post("/v1/completions", json={"model": "tiny-llama", "prompt": ps[0], "speculative": "maybe"})
            assert r.status_code in (400, 422) and "speculative" in r.text
        assert s.metrics()  # the server stayed up


# ------------------------------------------------------------------------------------------ bench
def test_bench_prompt_sets_and_report():
    from ubatch.bench import spec_bench
    from ubatch.cli.bench import KERNEL_BENCHES
    code, prose = spec_bench.load_set("code"), spec_bench.load_set("prose")
    assert len(code) == len(prose) == 8 and all("```" in c["content"] for c in code)
    assert len({c["id"] for c in code + prose}) == 16
    assert KERNEL_BENCHES["speculative"][0] == "ubatch.bench.spec_bench"
    row = {k: {"tok_s": v, "decode_tok_s": v * 1.2} for k, v in
           (("ubatch", 10.0), ("ubatch+draft", 15.0), ("llama.cpp", 10.0), ("llama.cpp+pld", 5.0))}
    res = {"model": "m", "max_tokens": 8, "threads": 1, "llama_threads": 1, "llama_cpp": True,
           "sets": {"code": {**row, "ubatch_draft_equals_plain": True, "llama_cpp_pld_equals_plain": "3/4"}},
           "batched": {"n": 8, "unified": {"plain_tok_s": 10.0, "draft_tok_s": 13.0, "equal": True}}}
    text = spec_bench.report(res)
    assert "1.50x" in text and "3.00x" in text and "3/4" in text and "1.30x" in text
    assert spec_bench.main(["--sets", "poetry"]) == 2


def test_ubatch_run_draft_option_same_completions(tmp_path, capsys):
    import json
    from ubatch.cli import main
    outs = []
    for extra in ([], ["--draft", "prompt-lookup"]):
        f = tmp_path / f"out{len(extra)}.jsonl"
        assert main(["run", "--model", "tiny-llama", "--requests", "6", "--parallel", "3", "--no-progress",
                     "--temperature", "0", "--out", str(f)] + extra) == 0
        outs.append([(r["request"], r["tokens"]) for r in map(json.loads, f.read_text().splitlines())])
    assert outs[0] == outs[1]
    assert "speculative       prompt-lookup" in capsys.readouterr().out


def test_bench_only_batched_updates_its_part_of_the_results(tmp_path, monkeypatch):
    import json
    from ubatch.bench import spec_bench
    assert spec_bench.main(["--only", "batched", "--batched", "1"]) == 2
    seen = {}

    def fake(model, sets, max_tokens, n_prompts, batched, *a, **k):
        seen.update(sets=sets, batched=batched, repeat=k.get("batched_repeat"))
        return {"model": model, "max_tokens": max_tokens, "threads": 1, "llama_threads": 1, "sets": {},
                "llama_cpp": False, "batched": {"n": batched, "repeat": 2, "unified": {
                    "plain_tok_s": 10.0, "draft_tok_s": 11.0, "equal": True, "draft_stats": {}}}}

    monkeypatch.setattr(spec_bench, "run_bench", fake)
    f = tmp_path / "r.json"
    f.write_text(json.dumps({"sets": {"code": {}}, "draft_stats": {"acceptance": 0.5}, "llama_cpp": True,
                             "llama_threads": 2, "batched": {"n": 8}}))
    assert spec_bench.main(["--only", "batched", "--batched-repeat", "2", "--json", str(f)]) == 0
    assert seen == {"sets": [], "batched": 8, "repeat": 2}
    got = json.loads(f.read_text())
    assert got["sets"] == {"code": {}} and got["draft_stats"] == {"acceptance": 0.5} and got["llama_cpp"] is True
    assert got["batched"]["unified"]["draft_tok_s"] == 11.0
