"""Continuous batching (ubatch.engine.batcher): greedy outputs equal one-sequence-at-a-time decoding, the server's
KV-full retry/evict path, rejection and the context limit, statistics that add up."""
from __future__ import annotations

import numpy as np
import pytest

import ubatch
from ubatch.common.errors import BatchError
from ubatch.models import tiny_llama
from ubatch.engine.batcher import ContinuousBatcher
from ubatch.engine.request import EVICTED, FINISHED, REJECTED, Request, make_requests, parse_range
from ubatch.engine.scheduler import Scheduler


@pytest.fixture(scope="module")
def model():
    return tiny_llama()


def reference(model, req: Request, n_ctx: int = 512) -> list:
    """The request decoded alone: whole prompt in one batch, then one token per decode, greedy; stops
    after max_new tokens or when the sequence reaches n_ctx_seq cells (as the server does)."""
    ctx = ubatch.Context(model, n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_seq_max=1)
    p = req.prompt
    ctx.decode(ubatch.Batch.from_arrays(tokens=p, pos=np.arange(len(p)), seq_ids=np.zeros(len(p), np.int32)))
    out = [int(np.argmax(ctx.get_logits_ith(len(p) - 1)))]
    n_past = len(p)
    while len(out) < req.max_new and n_past < ctx.n_ctx_seq:
        b = ubatch.Batch(1)
        b.add_token(out[-1], n_past, 0, output=True)
        ctx.decode(b)
        n_past += 1
        out.append(int(np.argmax(ctx.get_logits_ith(0))))
    return out


def fresh(reqs):
    return [Request(r.rid, r.prompt.copy(), r.max_new) for r in reqs]


@pytest.mark.parametrize("unified,n_batch,n_ubatch", [(False, 16, 8), (True, 16, 8), (True, 7, 3), (False, 64, 64)])
def test_outputs_equal_sequential_reference(model, unified, n_batch, n_ubatch):
    reqs = make_requests(9, prompt_len=(3, 24), gen_len=(2, 9), n_vocab=model.n_vocab, seed=11)
    ctx = ubatch.Context(model, n_ctx=768 if not unified else 256, n_batch=n_batch, n_ubatch=n_ubatch, n_seq_max=3,
                         kv_unified=unified)
    run = fresh(reqs)
    st = ContinuousBatcher(ctx).run(run)
    assert st.finished == 9 and st.evicted == 0 and st.rejected == 0 and st.retries == 0
    for r in run:
        assert r.status == FINISHED and r.finish_reason == "length"
        assert len(r.generated) == r.max_new
        assert r.generated == reference(model, r), f"request {r.rid}"
    # the cache is empty again, every sequence retired
    assert all(ctx.memory.used(s) == 0 for s in range(ctx.memory.n_stream))
    # statistics add up
    assert st.prompt_tokens == sum(len(r.prompt) for r in reqs)
    assert st.generated_tokens == sum(r.max_new for r in reqs)
    assert st.decode_tokens == st.generated_tokens - 9          # the last sampled token is never decoded
    assert sum(u.n_tokens for u in st.ubatches) == st.prompt_tokens + st.decode_tokens
    assert sum(sum(p + d for p, d in u.seq_tokens.values()) for u in st.ubatches) == st.prompt_tokens + st.decode_tokens
    assert all(u.n_tokens <= n_ubatch for u in st.ubatches)
    assert all(u.shape[0] * u.shape[1] == u.n_tokens for u in st.ubatches)
    assert sum(st.shapes.values()) == len(st.ubatches)
    assert st.decode_calls == st.steps                         # no retries: one decode per step
    assert 0 < max(st.peak_kv_cells) <= ctx.memory.size


def test_kv_full_retries_and_evicts_without_crashing(model):
    reqs = make_requests(10, prompt_len=(20, 60), gen_len=(20, 40), n_vocab=model.n_vocab, seed=3)
    ctx = ubatch.Context(model, n_ctx=256, n_batch=64, n_ubatch=32, n_seq_max=6, kv_unified=True)
    run = fresh(reqs)
    st = ContinuousBatcher(ctx).run(run)
    assert st.retries > 0 and st.failed_calls >= st.retries
    assert st.evicted > 0 and st.finished + st.evicted == 10
    assert st.peak_kv_cells == [256]
    d = st.to_dict()
    assert d["retries"] == st.retries and len(d["messages"]) == st.evicted
    for r in run:
        assert r.status in (FINISHED, EVICTED)
        ref = reference(model, r)
        if r.status == EVICTED:
            assert f"request {r.rid}" in r.message and "KV cache is full" in r.message
            assert r.generated == ref[:len(r.generated)]     # what it produced before eviction is right
        else:
            assert r.generated == ref, f"request {r.rid}"     # retries never change the outputs
    assert ctx.memory.used(0) == 0


def test_reject_too_long_prompt_and_stop_at_context_limit(model):
    rng = np.random.default_rng(0)
    reqs = [Request(0, rng.integers(0, 256, 300).astype(np.int32), 5),     # >= n_ctx_seq: rejected
            Request(1, rng.integers(0, 256, 250).astype(np.int32), 20),    # stops at 256 cells
            Request(2, rng.integers(0, 256, 10).astype(np.int32), 4)]
    ctx = ubatch.Context(model, n_ctx=512, n_batch=128, n_ubatch=64, n_seq_max=2)
    st = ContinuousBatcher(ctx).run(reqs)
    assert (st.rejected, st.finished, st.evicted) == (1, 2, 0)
    assert reqs[0].status == REJECTED and "does not fit" in reqs[0].message
    assert reqs[1].finish_reason == "context" and len(reqs[1].generated) == 256 - 250 + 1
    assert reqs[1].generated == reference(model, reqs[1], n_ctx=256)
    assert reqs[2].generated == reference(model, reqs[2])
    assert st.peak_kv_cells[0] == 256 or st.peak_kv_cells[1] == 256


def test_other_decode_error_evicts_the_slice(model, monkeypatch):
    reqs = make_requests(4, prompt_len=(4, 8), gen_len=(3, 5), n_vocab=model.n_vocab, seed=1)
    ctx = ubatch.Context(model, n_ctx=512, n_batch=32, n_ubatch=32, n_seq_max=2, kv_unified=True)
    real = ctx.decode
    calls = []

    def flaky(batch):
        calls.append(batch.n_tokens)
        if len(calls) == 3:
            raise BatchError("injected failure")
        return real(batch)

    monkeypatch.setattr(ctx, "decode", flaky)
    st = ContinuousBatcher(ctx).run(fresh(reqs))
    assert st.errors == 1 and st.evicted == 2 and st.finished == 2
    assert any("injected failure" in m for m in st.to_dict()["messages"])
    assert ctx.memory.used(0) == 0


def test_scheduler_batch_order_and_budget():
    reqs = [Request(i, np.arange(n, dtype=np.int32), 3) for i, n in enumerate([10, 30, 5, 7])]
    s = Scheduler(reqs, n_seq_max=3, n_ctx_seq=256)
    assert s.admit() == [] and [reqs[i].seq_id for i in s.active] == [0, 1, 2]
    sb = s.build(16)
    assert len(sb) == 16
    assert sb.seq.tolist() == [0] * 10 + [1] * 6 and sb.prompt.all()
    assert sb.output.tolist() == [0] * 9 + [1] + [0] * 6            # only a finished prompt's last token
    assert sb.pos.tolist() == list(range(10)) + list(range(6))
    assert s.on_token(0, 42) is False                               # request 0 now generates
    sb = s.build(16)
    assert sb.seq[0] == 0 and sb.tokens[0] == 42 and sb.pos[0] == 10 and not sb.prompt[0] and sb.output[0] == 1
    assert sb.seq[1:].tolist() == [1] * 15 and sb.pos[1:].tolist() == list(range(6, 21))
    s.evict(0, "x")
    assert 0 in s.free and reqs[0].status == EVICTED
    assert s.admit() == [] and reqs[3].seq_id == 0                  # the freed id is reused
    assert [reqs[i].seq_id for i in s.active] == [0, 1, 2]          # slot order


def test_parse_range_and_make_requests():
    assert parse_range("8-48") == (8, 48) and parse_range("5") == (5, 5) and parse_range("3:4") == (3, 4)
    for bad in ("0-3", "9-2", "a", "1-2-3", ""):
        with pytest.raises(ValueError, match="LO-HI"):
            parse_range(bad, "--x")
    a = make_requests(20, prompt_len=(2, 6), gen_len=(1, 3), n_vocab=50, seed=5)
    b = make_requests(20, prompt_len=(2, 6), gen_len=(1, 3), n_vocab=50, seed=5)
    assert [r.prompt.tolist() for r in a] == [r.prompt.tolist() for r in b]
    assert all(2 <= len(r.prompt) <= 6 and 1 <= r.max_new <= 3 and r.prompt.max() < 50 for r in a)
    c = make_requests(20, prompt_len=(2, 6), gen_len=(1, 3), n_vocab=50, seed=6)
    assert [r.prompt.tolist() for r in c] != [r.prompt.tolist() for r in a]


def test_batcher_needs_a_model():
    with pytest.raises(ValueError, match="model"):
        ContinuousBatcher(ubatch.Context(None, n_seq_max=2))
