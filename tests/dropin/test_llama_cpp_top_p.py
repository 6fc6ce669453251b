"""top-p without a sorted input looks for its cut among the best 256 (then 2048, ...) candidates before sorting
the whole vocabulary (ubatch/llama_cpp/_samplers.py TopP._cut_in_head): on many random distributions, with ties
(quantised logits, whole plateaus, ties across the head's boundary), -inf and NaN logits and min_keep, the kept
candidates, their order and their probabilities are bitwise those of the full stable sort (the reference below,
the code before the change)."""
import numpy as np
import pytest

import ubatch.llama_cpp as L
from ubatch.llama_cpp import _samplers as S

TD = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])


def _array(logits):
    n = len(logits)
    data = (L.llama_token_data * n)()
    view = np.frombuffer(data, dtype=TD)
    view["id"], view["logit"] = np.arange(n), logits
    return data, view, L.llama_token_data_array(data, n, -1, False)


def _full_sort_top_p(logits, p, min_keep):
    """The full-sort top-p: softmax as the sampler does, stable sort of the whole array, sequential f32 cumsum."""
    data, view, cur = _array(logits)
    c = S.Cur(cur)
    S.softmax(c, False)
    S.partial_sort(c, c.size)
    a = c.a
    cum = np.cumsum(a["p"], dtype=np.float32)
    hits = np.flatnonzero((cum >= np.float32(p)) & (np.arange(1, len(a) + 1) >= min_keep))
    m = int(hits[0]) + 1 if len(hits) else len(a)
    return view[:m].copy()


def _ubatch_top_p(logits, p, min_keep):
    data, view, cur = _array(logits)
    L.llama_sampler_apply(L.llama_sampler_init_top_p(p, min_keep), cur)
    assert cur.sorted
    return view[:cur.size].copy()


def _cases():
    rng = np.random.default_rng(2026)
    for i in range(120):
        n = int(rng.choice([900, 1500, 5000, 32000, 151936 if i % 20 == 0 else 20000]))
        kind = i % 6
        if kind == 0:
            x = rng.standard_normal(n) * rng.uniform(0.5, 8)
        elif kind == 1:                          # quantised: many ties everywhere
            x = np.round(rng.standard_normal(n) * 4) / 2
        elif kind == 2:                          # a plateau straddling the head's 256th place
            x = rng.standard_normal(n)
            x[rng.choice(n, 600, replace=False)] = 3.0
        elif kind == 3:                          # flat: the cut lies far beyond the head
            x = rng.standard_normal(n) * 0.01
        elif kind == 4:                          # peaked, with -inf
            x = rng.standard_normal(n) * 2
            x[rng.choice(n, n // 3, replace=False)] = -np.inf
            x[rng.integers(n)] = 25.0
        else:                                    # NaN in the row
            x = rng.standard_normal(n) * 3
            x[rng.integers(n)] = np.nan
        p = float(rng.choice([0.05, 0.5, 0.9, 0.95, 0.999, float(rng.uniform(0, 1))]))
        min_keep = int(rng.choice([0, 1, 5, 300]))
        yield pytest.param(x.astype(np.float32), p, min_keep, id=f"{i}-k{kind}-n{n}")


@pytest.mark.parametrize("logits, p, min_keep", list(_cases()))
def test_top_p_is_the_full_sort_result(logits, p, min_keep):
    got, ref = _ubatch_top_p(logits, p, min_keep), _full_sort_top_p(logits, p, min_keep)
    assert got.tobytes() == ref.tobytes()


def test_top_desc_is_the_stable_sort_head():
    rng = np.random.default_rng(5)
    for _ in range(200):
        n = int(rng.integers(2, 3000))
        x = (np.round(rng.standard_normal(n) * rng.choice([1, 3, 20])) / 2).astype(np.float32)
        k = int(rng.integers(1, n))
        assert S.top_desc(x, k).tolist() == np.argsort(-x, kind="stable")[:k].tolist()
