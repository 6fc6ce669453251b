"""LLMEngine's hooks for callers that sample and stop on their own (add_request(driver=), on_context): a driver
that picks the argmax gives the engine's own greedy tokens, also with n > 1 forks, a full cache's preemptions and
other requests in the batch; its stop ends a completion without decoding the token; the engine still ends a
completion at its context and on abort (on_finish); an engine on a borrowed Context leaves it open."""
from __future__ import annotations

import numpy as np
import pytest

import ubatch
from ubatch.engine.llm_engine import LLMEngine, SamplingParams
from ubatch.engine.prompts import make_workload
from ubatch.models import tiny_llama


@pytest.fixture(scope="module")
def model():
    return tiny_llama()


class Argmax:
    """Greedy driver: records what it was shown; stops a completion after `stop_after` tokens (reason "stop")."""

    def __init__(self, n: int, stop_after: int = 10**9) -> None:
        self.tokens = [[] for _ in range(n)]
        self.finished = {}
        self.stop_after = stop_after

    def sample(self, index, logits):
        assert logits.dtype == np.float32 and logits.ndim == 1
        return int(np.argmax(logits))

    def on_token(self, index, token, logits):
        assert index not in self.finished
        if len(self.tokens[index]) >= self.stop_after:
            return "stop"
        self.tokens[index].append(token)
        return None

    def on_finish(self, index, reason):
        assert index not in self.finished
        self.finished[index] = reason


def greedy(m: int, **kw) -> SamplingParams:
    return SamplingParams(max_tokens=m, temperature=0.0, ignore_eos=True, **kw)


def drain(eng):
    out = {}
    while eng.has_unfinished_requests():
        for r in eng.step():
            if r.finished:
                out[r.request_id] = r
    return out


@pytest.mark.parametrize("unified", [False, True])
def test_driver_tokens_equal_the_engines_greedy_ones(model, unified):
    """Drivers beside plain requests, n = 2 forks; on a 256-cell unified cache with preemptions."""
    work = make_workload(10, seed=3, prompt_len=(20, 60), gen_len=(20, 40), n_vocab=model.n_vocab)
    kw = dict(n_ctx=256 if unified else 2048, n_batch=64, n_ubatch=32, n_seq_max=6, kv_unified=unified,
              enable_prefix_caching=False)
    ref = LLMEngine(model, **kw)
    for i, w in enumerate(work):
        ref.add_request(w.prompt, greedy(w.max_tokens, n=2 if i % 3 == 0 else 1), request_id=str(i))
    want = drain(ref)
    eng = LLMEngine(model, **kw)
    drivers = {}
    for i, w in enumerate(work):
        n = 2 if i % 3 == 0 else 1
        if i % 2 == 0:
            drivers[str(i)] = Argmax(n, stop_after=w.max_tokens)
            eng.add_request(w.prompt, SamplingParams(n=n), request_id=str(i), driver=drivers[str(i)])
        else:
            eng.add_request(w.prompt, greedy(w.max_tokens, n=n), request_id=str(i))
    got = drain(eng)
    if unified:
        assert eng.statistics.preemptions > 0
    for rid, r in want.items():
        exp = [c.token_ids for c in r.outputs]
        if rid in drivers:
            d = drivers[rid]
            assert d.tokens == exp and d.finished == {k: "stop" for k in range(len(exp))}, rid
            assert [c.finish_reason for c in got[rid].outputs] == ["stop"] * len(exp)
            assert [c.token_ids for c in got[rid].outputs] == exp and all(c.text == "" for c in got[rid].outputs)
        else:
            assert [c.token_ids for c in got[rid].outputs] == exp, rid
    assert eng.ctx.memory.used(0) == 0 or not unified
    eng.close()
    ref.close()


def test_the_engine_ends_a_driven_completion_at_its_context_and_on_abort(model):
    eng = LLMEngine(model, n_ctx=512, n_batch=128, n_ubatch=64, n_seq_max=2, enable_prefix_caching=False)
    assert eng.ctx.n_ctx_seq == 256
    d = Argmax(1)
    eng.add_request([i % 250 + 1 for i in range(250)], SamplingParams(), request_id="ctx", driver=d)
    drain(eng)
    assert d.finished == {0: "length"} and len(d.tokens[0]) == 256 - 250 + 1
    a = Argmax(2)
    eng.add_request([5, 6, 7], SamplingParams(n=2), request_id="ab", driver=a)
    eng.step()
    eng.abort_request("ab")
    assert a.finished == {0: "abort", 1: "abort"} and not eng.has_unfinished_requests()
    with pytest.raises(ValueError, match="driver"):
        eng.add_request([1, 2], SamplingParams(grammar='root ::= "a"'), driver=Argmax(1))
    eng.close()


def test_on_context_runs_on_a_borrowed_context(model):
    ctx = ubatch.Context(model, n_ctx=256, n_batch=32, n_ubatch=32, n_seq_max=2, kv_unified=True)
    calls = []

    def decode(batch):
        calls.append(batch.n_tokens)
        ctx.decode(batch)

    eng = LLMEngine.on_context(ctx, decode=decode)
    assert eng.ctx is ctx and eng.prefix_cache is not None
    eng.add_request(list(range(1, 40)), greedy(5), request_id="a")
    out = drain(eng)
    ref = LLMEngine(model, n_ctx=256, n_batch=32, n_ubatch=32, n_seq_max=2, kv_unified=True)
    ref.add_request(list(range(1, 40)), greedy(5), request_id="a")
    assert out["a"].outputs[0].token_ids == drain(ref)["a"].outputs[0].token_ids
    assert sum(calls) == eng.statistics.prompt_tokens + eng.statistics.decode_tokens
    eng.close()
    ctx.decode(ubatch.Batch.from_arrays(tokens=np.array([1], np.int32), pos=np.array([0], np.int32),
                                        seq_ids=np.array([1], np.int32)))       # still open
    with pytest.raises(ValueError, match="embeddings=False"):
        LLMEngine.on_context(ubatch.Context(model, n_ctx=64, embeddings=True, pooling="mean"))
    ctx.close()
    ref.close()
