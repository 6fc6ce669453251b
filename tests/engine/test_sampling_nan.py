"""A NaN logit never wins and never freezes the choice; the other tokens are chosen exactly
as if it were -inf (bitwise the same token and log-probabilities, every sampling path, AVX2 and plain C).
Non-finite sampling parameters are refused (ValueError naming the field; the server's 400 is tested over HTTP
in test_server_round2.py)."""
import math

import numpy as np
import pytest

from ubatch._ffi import lib
from ubatch.engine.sampling import SampleBatch, SamplingParams, sample

PARAMS = [SamplingParams(),                                                          # greedy
          SamplingParams(temperature=0.8, top_k=0, top_p=1.0, min_p=0.0),            # whole vocabulary
          SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),         # top-k path
          SamplingParams(temperature=1.0, top_k=0, top_p=0.9, min_p=0.0),            # growing candidates
          SamplingParams(temperature=0.7, top_k=0, top_p=1.0, min_p=0.1),
          SamplingParams(temperature=0.0, repeat_penalty=1.3)]


def _run(L, p, counters, hist=None):
    sb = SampleBatch()
    for i, c in enumerate(counters):
        sb.add(i, p.validated(), 11, c, hist)
    toks, lps = sample(L, sb, n_logprobs=4)[:2]
    return np.asarray(toks), np.asarray(lps)


@pytest.mark.parametrize("plain", [0, 1])
@pytest.mark.parametrize("where", ["first", "spread", "best", "all_but_two"])
def test_nan_logits_are_minus_infinity(plain, where):
    rng = np.random.default_rng(3)
    nv, rows = 3000, 24
    L = rng.standard_normal((rows, nv)).astype(np.float32) * 3
    nan = np.zeros_like(L, dtype=bool)
    if where == "first":
        nan[:, 0] = True                       # the old heap took L[0] first and then nothing could beat it
    elif where == "spread":
        nan[rng.random(L.shape) < 0.2] = True
    elif where == "best":
        nan[np.arange(rows), L.argmax(1)] = True
    else:
        nan[:, 2:] = True
    Ln, Li = L.copy(), L.copy()
    Ln[nan], Li[nan] = np.nan, -np.inf
    was = lib.ub_sample_force_plain(plain)
    try:
        for p in PARAMS:
            hist = np.array([5, 0, 1], np.int32)
            tn, ln = _run(Ln, p, range(rows), hist)
            ti, li = _run(Li, p, range(rows), hist)
            assert np.array_equal(tn, ti), p
            assert not nan[np.arange(rows), tn].any()
            assert np.array_equal(ln.view(np.uint32), li.view(np.uint32))
    finally:
        lib.ub_sample_force_plain(was)


@pytest.mark.parametrize("field", ["temperature", "repeat_penalty", "top_p", "min_p", "frequency_penalty",
                                   "presence_penalty"])
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_non_finite_parameters_are_refused(field, value):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value}).validated()
