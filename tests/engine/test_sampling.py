"""The C sampler (ubatch.engine.sampling) against a numpy reference of llama.cpp's chain (penalty -> top-k ->
top-p -> min-p -> temperature -> draw) using the same uniform numbers, its batch / thread invariance, the
distribution it draws from, log-probabilities and bad input."""
from __future__ import annotations

import numpy as np
import pytest

from ubatch.engine.sampling import SampleBatch, SamplingParams, sample, uniform


def reference(x: np.ndarray, p: SamplingParams, seed: int, counter: int, hist) -> int:
    """llama.cpp's chain in numpy (float64 where the C code uses double). Without any cut (no top-k, top-p 1,
    min-p 0) the draw walks the vocabulary in id order (no sort needed), else the sorted candidates."""
    x = x.astype(np.float32).copy()
    raw_max = float(x.max())
    for t, b in (p.logit_bias or {}).items():
        x[t] = x[t] + np.float32(b)
    if p.penalised and hist is not None:
        h = np.asarray(hist).tolist()
        for t in set(h):
            x[t] = x[t] / np.float32(p.repeat_penalty) if x[t] > 0 else x[t] * np.float32(p.repeat_penalty)
            x[t] = x[t] - (np.float32(h.count(t)) * np.float32(p.frequency_penalty) + np.float32(p.presence_penalty))
    order = sorted(range(len(x)), key=lambda i: (-x[i], i))
    if p.temperature <= 0:
        return order[0]
    k = p.top_k if 0 < p.top_k <= len(x) else len(x)
    if k == len(x) and p.top_p >= 1 and p.min_p <= 0:
        w = np.exp((x.astype(np.float64) - raw_max) / np.float32(p.temperature))
        hit = np.flatnonzero(np.cumsum(w) > uniform(seed, counter) * w.sum())
        return int(hit[0]) if hit.size else int(np.flatnonzero(w > 0)[-1])
    cand = order[:k]
    v = x[cand].astype(np.float64)
    if p.top_p < 1.0:
        pr = np.exp(v - v[0])
        pr /= pr.sum()
        cum = 0.0
        for j in range(len(cand)):
            cum += pr[j]
            if cum >= np.float32(p.top_p):
                cand, v = cand[:j + 1], v[:j + 1]
                break
    if p.min_p > 0 and len(cand) > 1:
        lim = np.float32(x[cand[0]]) + np.float32(np.log(np.float32(p.min_p)))
        keep = 1
        while keep < len(cand) and x[cand[keep]] >= lim:
            keep += 1
        cand, v = cand[:keep], v[:keep]
    w = np.exp((v - v[0]) / np.float32(p.temperature))
    target = uniform(seed, counter) * w.sum()
    cum = np.cumsum(w)
    hit = np.flatnonzero(cum > target)
    return cand[hit[0]] if hit.size else cand[-1]


def _one(x, p, seed=0, counter=0, hist=None, **kw):
    sb = SampleBatch()
    sb.add(0, p.validated(), seed, counter, None if hist is None else np.asarray(hist, np.int32))
    return int(sample(x[None, :], sb, **kw)[0][0])


def test_greedy_is_argmax_lowest_id_on_ties():
    rng = np.random.default_rng(0)
    L = rng.standard_normal((16, 5000)).astype(np.float32)
    L[3, [10, 20]] = 50.0                                # tie: the lower id wins, as np.argmax
    sb = SampleBatch()
    for i in range(16):
        sb.add(i, SamplingParams(), 0, 0, None)
    tok = sample(L, sb)[0]
    assert np.array_equal(tok, np.argmax(L, axis=1)) and tok[3] == 10


@pytest.mark.parametrize("case", range(60))
def test_chain_matches_reference(case):
    rng = np.random.default_rng(case)
    nv = int(rng.choice([7, 50, 300, 2000]))
    x = (rng.standard_normal(nv) * rng.uniform(0.5, 4)).astype(np.float32)
    if case % 5 == 0:
        x[rng.integers(0, nv, 3)] = x.max()                # ties at the top
    p = SamplingParams(temperature=float(rng.choice([0.0, 0.3, 0.8, 1.0, 1.7])),
                       top_k=int(rng.choice([0, 1, 5, 40, nv + 3])), top_p=float(rng.choice([1.0, 0.95, 0.5, 0.1])),
                       min_p=float(rng.choice([0.0, 0.05, 0.3])), repeat_penalty=float(rng.choice([1.0, 1.3, 0.8])),
                       frequency_penalty=float(rng.choice([0.0, 0.0, 0.5])),
                       presence_penalty=float(rng.choice([0.0, 0.0, 0.7, -0.3])),
                       logit_bias=None if case % 3 else {int(t): float(rng.normal() * 3) for t in
                                                         rng.integers(0, nv, 4)} | {int(rng.integers(nv)): -np.inf})
    p = p.validated(nv)
    hist = rng.integers(0, nv, int(rng.integers(0, 12)))
    for counter in range(8):
        seed = int(rng.integers(0, 2**63))
        assert _one(x, p, seed, counter, hist) == reference(x, p, seed, counter, hist), (p, counter)


@pytest.mark.parametrize("kw", [dict(top_k=0, top_p=1.0, min_p=0.0), dict(top_k=0, top_p=0.9, min_p=0.0),
                                dict(top_k=0, top_p=1.0, min_p=0.01), dict(top_k=0, top_p=0.999, min_p=0.0)])
def test_whole_vocabulary_paths_match_reference(kw):
    """top_k disabled on a large vocabulary: the candidates grow until the cuts fall inside, or (no cut) the draw
    walks the vocabulary without sorting; both equal the full-sort reference."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(30000) * 2).astype(np.float32)
    p = SamplingParams(temperature=0.9, repeat_penalty=1.2, logit_bias={7: 4.0}, **kw).validated(30000)
    hist = rng.integers(0, 30000, 20)
    for c in range(6):
        assert _one(x, p, 99, c, hist) == reference(x, p, 99, c, hist), c


def test_distribution_follows_softmax():
    x = np.array([2.0, 1.0, 0.5, 0.0, -1.0, -3.0], np.float32)
    p = SamplingParams(temperature=0.7, top_k=0, top_p=1.0, min_p=0.0)
    n = 30000
    sb = SampleBatch()
    for c in range(n):
        sb.add(0, p, 12345, c, None)
    tok = sample(x[None, :], sb)[0]
    freq = np.bincount(tok, minlength=6) / n
    want = np.exp(x / 0.7) / np.exp(x / 0.7).sum()
    assert np.abs(freq - want).max() < 4 * np.sqrt(want.max() / n)


def test_cuts_are_never_crossed():
    x = np.log(np.array([0.5, 0.3, 0.15, 0.04, 0.01], np.float32))
    for c in range(2000):
        assert _one(x, SamplingParams(temperature=1.0, top_k=0, top_p=0.75, min_p=0.0), 7, c) in (0, 1)
        assert _one(x, SamplingParams(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0), 7, c) in (0, 1)
        assert _one(x, SamplingParams(temperature=3.0, top_k=0, top_p=1.0, min_p=0.25), 7, c) in (0, 1, 2)


def test_logit_bias_and_frequency_presence_penalties():
    x = np.array([1.0, 3.0, 2.9, 2.0], np.float32)
    assert _one(x, SamplingParams(logit_bias={1: -np.inf})) == 2                     # banned
    assert _one(x, SamplingParams(logit_bias={0: 5})) == 0
    assert _one(x, SamplingParams(frequency_penalty=0.1), hist=[1, 1]) == 2          # 3.0 - 0.2 < 2.9
    assert _one(x, SamplingParams(frequency_penalty=0.1), hist=[1]) == 1             # 3.0 - 0.1 > 2.9
    assert _one(x, SamplingParams(presence_penalty=1.5), hist=[1, 2]) == 3


def test_repeat_penalty_changes_the_greedy_choice():
    x = np.array([1.0, 3.0, 2.9, -1.0], np.float32)
    assert _one(x, SamplingParams()) == 1
    assert _one(x, SamplingParams(repeat_penalty=1.1), hist=[1, 1, 3]) == 2      # 3.0 / 1.1 < 2.9
    assert _one(x, SamplingParams(repeat_penalty=1.1), hist=[0]) == 1


def test_batch_and_thread_invariance():
    rng = np.random.default_rng(1)
    L = rng.standard_normal((32, 20000)).astype(np.float32) * 3
    ps = [SamplingParams(temperature=0.9, top_k=int(k), repeat_penalty=1.2).validated()
          for k in rng.integers(0, 60, 32)]
    hist = [rng.integers(0, 20000, 30).astype(np.int32) for _ in range(32)]
    sb = SampleBatch()
    for i in range(32):
        sb.add(i, ps[i], 1000 + i, 5, hist[i])
    together = [sample(L, sb, n_threads=t)[0] for t in (1, 2, 7)]
    alone = [_one(L[i], ps[i], 1000 + i, 5, hist[i]) for i in range(32)]
    for t in together:
        assert t.tolist() == alone


def test_logprobs_are_log_softmax_of_raw_logits():
    rng = np.random.default_rng(2)
    L = rng.standard_normal((3, 1000)).astype(np.float32) * 2
    sb = SampleBatch()
    for i in range(3):
        sb.add(i, SamplingParams(temperature=0.5, repeat_penalty=1.5).validated(), i, 0, np.arange(50, dtype=np.int32))
    tok, lp, top_id, top_lp = sample(L, sb, n_logprobs=4)
    ls = L.astype(np.float64) - np.log(np.exp(L.astype(np.float64)).sum(axis=1, keepdims=True))
    assert np.allclose(lp, ls[np.arange(3), tok], atol=1e-5)
    assert np.array_equal(top_id, np.argsort(-L, axis=1, kind="stable")[:, :4])
    assert np.allclose(top_lp, np.take_along_axis(ls, top_id, axis=1), atol=1e-5)


def test_uniform_is_a_function_of_seed_and_counter():
    u = [uniform(5, c) for c in range(1000)]
    assert u == [uniform(5, c) for c in range(1000)] and all(0 <= v < 1 for v in u)
    assert abs(np.mean(u) - 0.5) < 0.05 and uniform(5, 0) != uniform(6, 0)


@pytest.mark.parametrize("field,value", [("temperature", -1), ("top_p", 1.5), ("min_p", -0.1), ("repeat_penalty", 0),
                                         ("n", 0), ("max_tokens", 1.5), ("logprobs", -2), ("stop", [3]),
                                         ("seed", "x"), ("temperature", float("nan")),
                                         ("logit_bias", {100: 1.0}), ("logit_bias", {1: float("nan")}),
                                         ("frequency_penalty", "a")])
def test_bad_params_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value}).validated(100)


def test_bad_arrays_raise():
    x = np.zeros((2, 10), np.float32)
    sb = SampleBatch()
    sb.add(5, SamplingParams(), 0, 0, None)
    with pytest.raises(ValueError, match="row"):
        sample(x, sb)
    sb = SampleBatch()
    sb.add(0, SamplingParams(repeat_penalty=1.2), 0, 0, np.array([11], np.int32))
    with pytest.raises(ValueError, match="penalised token"):
        sample(x, sb)


def test_plain_c_path_equals_avx2_bitwise():
    from ubatch._ffi import lib
    rng = np.random.default_rng(3)
    L = (rng.standard_normal((8, 50003)) * 4).astype(np.float32)
    sb = SampleBatch()
    for i in range(8):
        sb.add(i, SamplingParams(temperature=0.9, top_k=int(5 + 7 * i), repeat_penalty=1.3).validated(), i, 2,
               rng.integers(0, 50003, 40).astype(np.int32))
    for i, kw in enumerate([dict(top_p=1.0, min_p=0.0), dict(top_p=0.5, min_p=0.0), dict(top_p=1.0, min_p=0.2)]):
        for c in range(4):        # whole vocabulary: the id-order walk and the growing candidate sets
            sb.add(i, SamplingParams(temperature=1.1, top_k=0, frequency_penalty=0.3, logit_bias={3: 2.0},
                                     **kw).validated(), 50 + i, c, rng.integers(0, 50003, 10).astype(np.int32))
    fast = sample(L, sb, n_logprobs=3)
    was = lib.ub_sample_force_plain(1)
    try:
        plain = sample(L, sb, n_logprobs=3)
    finally:
        lib.ub_sample_force_plain(was)
    for a, b in zip(fast, plain):
        assert np.array_equal(a, b)
