"""The speculative-decoding policy on synthetic costs (deterministic: no wall clock): the step-cost model is
fitted on decode steps only, the gate turns drafting off for a batch whose drafted steps are measured slower
than its plain steps and probes again later, and in the engine (a fake clock) a draft whose rows are dear is
turned off while cheap rows keep drafting — the tokens identical to decoding without a draft either way."""
from __future__ import annotations

import types

import numpy as np
import pytest

import ubatch
import ubatch.engine.spec_engine as se
from ubatch.engine.speculative import CostModel, DraftGate
from ubatch.models import tiny_llama

from spec_helpers import repetitive_prompts

MODEL = tiny_llama()


def test_cost_model_fits_decode_steps_and_ignores_prefill():
    c = CostModel()
    for n in (8, 16, 24, 12, 40, 8, 30) * 4:
        c.observe(1, n, 0.05 + 0.01 * n)                          # decode steps: 10 ms per row
        c.observe(1, 512, 0.05 + 0.004 * 512, prompt_rows=504)     # a prefill step: rows far cheaper
    assert abs(c.a - 0.05) < 0.01 and abs(c.b - 0.01) < 0.002
    assert c.predict(1, 8) == pytest.approx(c.a + 8 * c.b)
    a0, b0 = c.a, c.b
    c.observe(1, 40, 30.0)                                         # a stall: clipped to 2x the prediction
    assert abs(c.b - b0) < 0.3 * b0 and abs(c.a - a0) < 0.3 * a0              # unclipped: a 75x, b 14x
    d = CostModel()
    for n in (8, 16, 24, 12, 40, 8, 30) * 4:
        d.observe(1, n, 0.05 + 0.01 * n)
        d.observe(1, 512, 0.05 + 0.004 * 512)                      # had they been fitted: b far too low
    assert d.b < 0.6 * c.b


def test_gate_needs_a_measured_plain_step_first():
    g = DraftGate()
    assert not g.tick(8)                                           # no plain step of 8 sequences measured yet
    g.observe(8, True, 20, 0.1)                                    # a drafted step without a reference: ignored
    assert g.n == 0 and g.closures == 0
    g.observe(8, False, 8, 0.1)
    assert g.tick(8) and not g.tick(7)                             # per batch size, without a cost model
    h = DraftGate(predict=lambda rows: 0.05 + 0.01 * rows)
    h.observe(8, False, 8, 0.13)
    assert h.tick(7) and h.reference(7) == pytest.approx(0.12)     # the nearest measured B, scaled
    h.observe(7, False, 7, 0.2)
    assert h.reference(7) == pytest.approx(0.2) and h.reference(1) == pytest.approx(0.2 * 0.06 / 0.12)


def test_gate_closes_on_slow_drafted_steps_backs_off_and_probes():
    g = DraftGate()
    g.observe(8, False, 8, 0.100)                                  # plain: 8 tokens in 100 ms
    slow = dict(emitted=10, seconds=0.160)                         # 10 tokens in 160 ms: 0.78x
    for k in range(DraftGate.MIN_STEPS):
        assert g.tick(8)
        g.observe(8, True, **slow)
    assert g.speedup < DraftGate.LOW and g.closures == 0 and not g.tick(8)    # a plain step confirms first
    g.observe(8, False, 8, 0.100)
    assert g.closures == 1
    closed = 0
    while not g.tick(8):                                           # closed for OFF_MIN steps, then a probe
        closed += 1
        g.observe(8, False, 8, 0.100)
    assert closed == DraftGate.OFF_MIN and g.n == 0 and g.speedup == 1.0
    for k in range(DraftGate.MIN_STEPS):                           # the probe fails again: twice as long
        g.observe(8, True, **slow)
        if k < DraftGate.MIN_STEPS - 1:
            assert g.tick(8)
    assert not g.tick(8)
    g.observe(8, False, 8, 0.100)
    assert g.closures == 2
    closed = 0
    while not g.tick(8):
        closed += 1
    assert closed == 2 * DraftGate.OFF_MIN
    for _ in range(3 * DraftGate.MIN_STEPS):                       # drafting pays now: it stays on
        g.observe(8, True, emitted=20, seconds=0.150)              # 20 tokens in 150 ms: 1.67x
        assert g.tick(8)
    assert g.closures == 2 and g.speedup > 1.5 and g.backoff == DraftGate.OFF_MIN


def test_gate_hysteresis_and_the_plain_reference_is_remeasured():
    g = DraftGate()
    g.observe(4, False, 4, 0.050)
    for _ in range(DraftGate.REF_EVERY - 1):
        assert g.tick(4)
        g.observe(4, True, 4, 0.0505)                             # 0.99x: below 1, above LOW: stays open
    assert g.closures == 0 and DraftGate.LOW < g.speedup < 1.0
    g.observe(4, True, 4, 0.0505)
    assert not g.tick(4)                                          # REF_EVERY drafted steps: a plain step is due
    g.observe(4, False, 4, 0.030)                                 # the reference is faster now
    assert g.tick(4)
    for _ in range(DraftGate.MIN_STEPS):
        g.observe(4, True, 4, 0.0505)
    assert g.confirm and not g.tick(4)
    g.observe(4, False, 4, 0.030)
    assert g.closures == 1                                        # measured against the new reference


def test_gate_a_stale_reference_is_confirmed_before_it_closes():
    g = DraftGate()
    g.observe(8, False, 8, 0.050)                                 # plain measured at a quiet moment
    for _ in range(DraftGate.MIN_STEPS):                          # then the machine is twice as slow:
        g.observe(8, True, 10, 0.100)                             # 10 tokens in 100 ms looks like 0.62x
    assert g.confirm and not g.tick(8)
    g.observe(8, False, 8, 0.100)                                 # the plain step now takes 100 ms: 1.25x
    assert g.closures == 0 and g.speedup == pytest.approx(1.25) and g.tick(8)


# ------------------------------------------------------------------------------------------ in the engine
class _PriorCost(CostModel):
    """The cost model at its prior: it keeps reading draft rows as cheap, whatever they cost, so only the gate
    can stop a draft that does not pay."""

    def observe(self, ubatches: int, rows: int, seconds: float, prompt_rows: int = 0) -> None:
        pass


def _run(monkeypatch, draft_row_s: float, kv_unified: bool):
    """Generates with prompt lookup on a fake clock: a step costs 0.1 s + 0.01 s per sequence row +
    draft_row_s per draft row. Returns (outputs, stats)."""
    clock = types.SimpleNamespace(t=0.0)
    monkeypatch.setattr(se, "time", types.SimpleNamespace(perf_counter=lambda: clock.t))
    monkeypatch.setattr(se, "CostModel", _PriorCost)
    llm = ubatch.LLM(MODEL, n_ctx=4096, n_batch=64, n_ubatch=64, n_seq_max=4, kv_unified=kv_unified,
                     draft="prompt-lookup")
    eng = llm.engine
    decode = eng._decode

    def timed(tok, pos, seq, out, prompt):
        decode(tok, pos, seq, out, prompt)
        dec = ~prompt.astype(bool)
        n_seq = len(np.unique(seq[dec]))
        clock.t += 0.1 + 0.01 * n_seq + draft_row_s * (int(dec.sum()) - n_seq)

    eng._decode = timed
    outs = llm.generate(repetitive_prompts(4, seed=3), max_tokens=240, temperature=0.0)
    return [o.tokens for o in outs], eng.stats()


@pytest.mark.parametrize("kv_unified", [False, True], ids=["per-seq", "unified"])
def test_engine_gate_stops_a_draft_that_does_not_pay(monkeypatch, kv_unified):
    want = [o.tokens for o in ubatch.LLM(MODEL, n_ctx=4096, n_batch=64, n_ubatch=64, n_seq_max=4,
                                         kv_unified=kv_unified).generate(repetitive_prompts(4, seed=3),
                                                                         max_tokens=240, temperature=0.0)]
    cheap, st_cheap = _run(monkeypatch, 0.001, kv_unified)
    dear, st_dear = _run(monkeypatch, 1.0, kv_unified)
    assert cheap == want and dear == want                         # the output never changes
    assert st_cheap["gate_closures"] == 0 and st_cheap["draft_speedup"] > 1.0
    assert st_cheap["gated_steps"] <= 1 + st_cheap["drafted_steps"] // DraftGate.REF_EVERY + 4
    assert st_dear["gate_closures"] >= 1 and st_dear["draft_speedup"] < 1.0
    assert st_dear["gated_steps"] >= DraftGate.OFF_MIN
    assert st_dear["draft_rows"] < 0.5 * st_cheap["draft_rows"]


class _FakeTime:
    """time for ubatch.llama_cpp.llama with a perf_counter that only Llama.eval advances."""

    def __init__(self) -> None:
        import time as real
        self._real, self.now = real, 100.0

    def perf_counter(self) -> float:
        return self.now

    def __getattr__(self, name):
        return getattr(self._real, name)


def test_dropin_cost_fit_sees_decode_evals_only(monkeypatch):
    """Llama(draft_model=...): the prompt's eval of each generate (prompt_rows > 0, also after a prefix-cache
    hit) is left out of the draft-length cost fit, as the engine's prefill steps are; with a fake clock where a
    prompt row costs a tenth of a decode row, the fit is the decode rows' cost (fitted on every eval it would
    come out far lower: the prefill-biased fit that made draft rows look nearly free)."""
    import ubatch.llama_cpp as L
    import ubatch.llama_cpp.llama as llama_mod
    from ubatch.llama_cpp import _model
    from ubatch.llama_cpp.llama_speculative import LlamaPromptLookupDecoding
    from ubatch.models import TINY_LLAMA_PATH
    from byte_vocab import ByteVocab

    monkeypatch.setattr(_model, "_load_tokenizer", lambda path, raw: ByteVocab())
    clock = _FakeTime()
    monkeypatch.setattr(llama_mod, "time", clock)
    llm = L.Llama(TINY_LLAMA_PATH, n_ctx=1024, verbose=False, draft_model=LlamaPromptLookupDecoding(num_pred_tokens=6))
    cost = llm._draft_state.cost
    seen, every = [], CostModel()
    real_observe = cost.observe

    def observe(ubatches, rows, seconds, prompt_rows=0):
        seen.append((rows, prompt_rows))
        every.observe(ubatches, rows, seconds)                 # the same evals, the prompts included
        real_observe(ubatches, rows, seconds, prompt_rows=prompt_rows)
    monkeypatch.setattr(cost, "observe", observe)
    real_eval = llm.eval
    state = {"prompt": False}

    def timed_eval(tokens):
        real_eval(tokens)
        per_row = 0.001 if state["prompt"] else 0.01             # a prefill row: a tenth of a decode row
        clock.now += 0.05 + per_row * len(tokens)
        state["prompt"] = False
    monkeypatch.setattr(llm, "eval", timed_eval)
    real_generate = llm.generate

    def generate(tokens, *a, **kw):
        state["prompt"] = True                                   # its first eval is the prompt's
        return real_generate(tokens, *a, **kw)
    monkeypatch.setattr(llm, "generate", generate)

    prompts = repetitive_prompts(3, seed=4)
    for p in prompts + [prompts[0] + prompts[1][:40]]:          # the last one reuses the first one's prefix
        llm.create_completion(p, max_tokens=40, temperature=0.0)
    prompt_evals = [r for r, k in seen if k]
    assert len(prompt_evals) == 4 and all(r == k for r, k in seen if k)
    assert prompt_evals[-1] < len(prompts[0]) + 40             # the prefix-cache hit left only the new rows
    decode = [r for r, k in seen if not k]
    assert len(set(decode)) > 2 and max(decode) > 1, "no varied draft lengths: the fit went untested"
    assert cost.n_obs == len(decode)
    assert abs(cost.b - 0.01) < 0.002 and abs(cost.a - 0.05) < 0.01
    assert every.b < 0.6 * cost.b
