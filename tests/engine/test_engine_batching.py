"""Token-level continuous batching of LLMEngine on the embedded tiny model (what the retired ContinuousBatcher's
tests checked, now on the one engine): greedy outputs equal one-sequence-at-a-time decoding for any n_batch /
n_ubatch / KV layout, the server's KV-full retry and the engine's preemption never change an output, a too-long
prompt is refused and a sequence stops at its context, an unexpected decode error leaves the engine able to go
on, the scheduler's batch order and budget, statistics that add up."""
from __future__ import annotations

import numpy as np
import pytest

import ubatch
from ubatch.common.errors import BatchError
from ubatch.engine.llm_engine import LLMEngine, PromptTooLongError, SamplingParams
from ubatch.engine.prompts import WorkItem, make_workload, parse_range
from ubatch.models import tiny_llama


@pytest.fixture(scope="module")
def model():
    return tiny_llama()


def reference(model, prompt, max_new: int, n_ctx: int = 512) -> list:
    """The prompt decoded alone: whole prompt in one batch, then one token per decode, greedy; stops after
    max_new tokens or when the sequence reaches n_ctx cells."""
    ctx = ubatch.Context(model, n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_seq_max=1)
    p = np.asarray(prompt, np.int32)
    ctx.decode(ubatch.Batch.from_arrays(tokens=p, pos=np.arange(len(p)), seq_ids=np.zeros(len(p), np.int32)))
    out = [int(np.argmax(ctx.get_logits_ith(len(p) - 1)))]
    n_past = len(p)
    while len(out) < max_new and n_past < ctx.n_ctx_seq:
        b = ubatch.Batch(1)
        b.add_token(out[-1], n_past, 0, output=True)
        ctx.decode(b)
        n_past += 1
        out.append(int(np.argmax(ctx.get_logits_ith(0))))
    ctx.close()
    return out


def greedy(n: int) -> SamplingParams:
    return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)


def run(eng: LLMEngine, work) -> dict:
    ids = [eng.add_request(w.prompt, greedy(w.max_tokens), request_id=str(i)) for i, w in enumerate(work)]
    done = {}
    while eng.has_unfinished_requests():
        for r in eng.step():
            if r.finished:
                done[r.request_id] = r.outputs[0]
    return {i: done[i] for i in ids}


@pytest.mark.parametrize("unified,n_batch,n_ubatch", [(False, 16, 8), (True, 16, 8), (True, 7, 3), (False, 64, 64)])
def test_outputs_equal_sequential_reference(model, unified, n_batch, n_ubatch):
    work = make_workload(9, seed=11, prompt_len=(3, 24), gen_len=(2, 9), n_vocab=model.n_vocab)
    eng = LLMEngine(model, n_ctx=768 if not unified else 256, n_batch=n_batch, n_ubatch=n_ubatch, n_seq_max=3,
                    kv_unified=unified, enable_prefix_caching=False, timeline=True)
    out = run(eng, work)
    st = eng.statistics
    assert st.finished == 9 and st.retries == 0 and st.preemptions == 0
    for i, w in enumerate(work):
        o = out[str(i)]
        assert o.finish_reason == "length" and len(o.token_ids) == w.max_tokens
        assert o.token_ids == reference(model, w.prompt, w.max_tokens), f"request {i}"
    kv = eng.ctx.memory
    assert all(kv.used(s) == 0 for s in range(kv.n_stream))      # every sequence retired
    assert st.prompt_tokens == sum(len(w.prompt) for w in work)
    assert st.generated_tokens == sum(w.max_tokens for w in work)
    assert st.decode_tokens == st.generated_tokens - 9           # the last sampled token is never decoded
    assert sum(u.n_tokens for u in st.ubatches) == st.prompt_tokens + st.decode_tokens == st.ub_tokens
    assert sum(sum(p + d for p, d in u.seq_tokens.values()) for u in st.ubatches) == st.ub_tokens
    assert all(u.n_tokens <= n_ubatch for u in st.ubatches)
    assert all(u.shape[0] * u.shape[1] == u.n_tokens for u in st.ubatches)
    assert sum(st.shapes.values()) == len(st.ubatches) == st.n_ubatches
    assert st.decode_calls == st.steps                          # no retries: one decode per step
    assert 0 < max(st.peak_kv_cells) <= kv.size
    d = st.to_dict()
    assert d["ubatches"] == st.n_ubatches and d["decoded_tokens"] == st.ub_tokens
    eng.close()


def test_kv_full_retries_and_preempts_without_changing_outputs(model):
    work = make_workload(10, seed=3, prompt_len=(20, 60), gen_len=(20, 40), n_vocab=model.n_vocab)
    eng = LLMEngine(model, n_ctx=256, n_batch=64, n_ubatch=32, n_seq_max=6, kv_unified=True,
                    enable_prefix_caching=False)
    out = run(eng, work)
    st = eng.statistics
    assert st.retries > 0 and st.failed_calls >= st.retries and st.preemptions > 0
    assert st.finished == 10 and st.peak_kv_cells == [256]
    assert len([m for _, k, m in st.events if k == "preempted"]) == st.preemptions
    for i, w in enumerate(work):
        assert out[str(i)].token_ids == reference(model, w.prompt, w.max_tokens), f"request {i}"
    assert eng.ctx.memory.used(0) == 0
    eng.close()


def test_too_long_prompt_refused_and_stop_at_context_limit(model):
    rng = np.random.default_rng(0)
    eng = LLMEngine(model, n_ctx=512, n_batch=128, n_ubatch=64, n_seq_max=2, enable_prefix_caching=False)
    assert eng.ctx.n_ctx_seq == 256
    with pytest.raises(PromptTooLongError, match="257 tokens"):
        eng.add_request(rng.integers(0, 256, 257).tolist(), greedy(5))
    long_p, short_p = rng.integers(0, 256, 250).tolist(), rng.integers(0, 256, 10).tolist()
    out = run(eng, [WorkItem(long_p, 20), WorkItem(short_p, 4)])
    assert out["0"].finish_reason == "length" and len(out["0"].token_ids) == 256 - 250 + 1
    assert out["0"].token_ids == reference(model, long_p, 20, n_ctx=256)
    assert out["1"].token_ids == reference(model, short_p, 4)
    assert 256 in eng.statistics.peak_kv_cells
    eng.close()


def test_unexpected_decode_error_is_raised_and_the_engine_goes_on(model, monkeypatch):
    work = make_workload(4, seed=1, prompt_len=(4, 8), gen_len=(3, 5), n_vocab=model.n_vocab)
    eng = LLMEngine(model, n_ctx=512, n_batch=32, n_ubatch=32, n_seq_max=2, kv_unified=True,
                    enable_prefix_caching=False)
    real = eng.ctx.decode
    calls = []

    def flaky(batch):
        calls.append(batch.n_tokens)
        if len(calls) == 3:
            raise BatchError("injected failure")
        return real(batch)

    monkeypatch.setattr(eng.ctx, "decode", flaky)
    for i, w in enumerate(work):
        eng.add_request(w.prompt, greedy(w.max_tokens), request_id=str(i))
    done, raised = {}, 0
    while eng.has_unfinished_requests():
        try:
            outs = eng.step()
        except BatchError as e:
            assert "injected failure" in str(e)
            raised += 1
            continue
        done.update({r.request_id: r.outputs[0].token_ids for r in outs if r.finished})
    assert raised == 1 and eng.statistics.failed_calls == 1
    for i, w in enumerate(work):            # the rows not decoded were decoded again: nothing lost or doubled
        assert done[str(i)] == reference(model, w.prompt, w.max_tokens), f"request {i}"
    assert eng.ctx.memory.used(0) == 0
    eng.close()


def test_scheduler_batch_order_and_budget(model):
    eng = LLMEngine(model, n_ctx=768, n_batch=16, n_ubatch=16, n_seq_max=3, enable_prefix_caching=False)
    for i, n in enumerate([10, 30, 5, 7]):
        eng.add_request(list(range(1, n + 1)), greedy(3), request_id=str(i))
    sch = eng.scheduler
    sch.admit()
    assert sorted(sch.active) == [0, 1, 2] and eng.waiting_request_ids() == {"3"}
    tok, pos, seq, out, owners, own, prompt = sch.build()
    assert len(tok) == 16 and prompt.all()
    assert seq.tolist() == [0] * 10 + [1] * 6
    assert out.tolist() == [0] * 9 + [1] + [0] * 6                 # only a finished prompt's last token
    assert pos.tolist() == list(range(10)) + list(range(6))
    s0 = sch.active[0]
    s0.state, s0.generated = "generating", [42]                      # request 0 sampled a token
    tok, pos, seq, out, owners, own, prompt = sch.build()
    assert seq[0] == 0 and tok[0] == 42 and pos[0] == 10 and not prompt[0] and out[0] == 1
    assert seq[1:].tolist() == [1] * 15 and pos[1:].tolist() == list(range(6, 21))
    eng.abort_request("0")
    assert 0 in sch.free and 0 not in sch.active
    sch.admit()
    assert sch.active[0].req.rid == "3"                              # the freed id is reused
    assert sorted(sch.active) == [0, 1, 2]
    eng.close()


def test_parse_range_and_make_workload():
    assert parse_range("8-48") == (8, 48) and parse_range("5") == (5, 5) and parse_range("3:4") == (3, 4)
    for bad in ("0-3", "9-2", "a", "1-2-3", ""):
        with pytest.raises(ValueError, match="LO-HI"):
            parse_range(bad, "--x")
    a = make_workload(20, seed=5, prompt_len=(2, 6), gen_len=(1, 3), n_vocab=50)
    b = make_workload(20, seed=5, prompt_len=(2, 6), gen_len=(1, 3), n_vocab=50)
    assert [w.prompt for w in a] == [w.prompt for w in b]
    assert all(2 <= len(w.prompt) <= 6 and 1 <= w.max_tokens <= 3 and max(w.prompt) < 50 for w in a)
    c = make_workload(20, seed=6, prompt_len=(2, 6), gen_len=(1, 3), n_vocab=50)
    assert [w.prompt for w in c] != [w.prompt for w in a]


def test_engine_needs_a_model():
    with pytest.raises(ValueError, match="model"):
        LLMEngine(None)
