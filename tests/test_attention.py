"""The C attention kernel (online softmax, GQA, stream groups, f32/f16 K/V) against a float64 numpy reference."""
import numpy as np
import pytest

from ubatch import kernels


def reference(q, k, v, streams, mask, scale):
    ns, per, n_head, hd = q.shape
    n_kv = mask.shape[2]
    r = n_head // k.shape[2]
    out = np.zeros(q.shape, np.float64)
    for g in range(ns):
        kk = k[streams[g], :n_kv].astype(np.float64)
        vv = v[streams[g], :n_kv].astype(np.float64)
        for h in range(n_head):
            s = q[g, :, h].astype(np.float64) @ kk[:, h // r].T * scale + mask[g]
            mx = s.max(axis=1, keepdims=True)
            seen = np.isfinite(mx[:, 0])
            p = np.exp(s - np.where(seen[:, None], mx, 0.0))
            l = p.sum(axis=1, keepdims=True)
            out[g, :, h] = np.where(seen[:, None], (p @ vv[:, h // r]) / np.where(l > 0, l, 1.0), 0.0)
    return out


def make_case(rng, *, ns, per, n_head_kv, ratio, hd, n_kv, kv_size, n_stream, dtype, hole_p=0.3):
    n_head = n_head_kv * ratio
    q = rng.standard_normal((ns, per, n_head, hd)).astype(np.float32)
    k = rng.standard_normal((n_stream, kv_size, n_head_kv, hd)).astype(dtype)
    v = rng.standard_normal((n_stream, kv_size, n_head_kv, hd)).astype(dtype)
    mask = np.where(rng.random((ns, per, n_kv)) < hole_p, -np.inf, 0.0).astype(np.float32)
    mask[0, 0, :] = -np.inf  # a fully masked row
    if per > 2:
        mask[-1, 1, : n_kv // 2] = -np.inf  # a long hole
    streams = rng.integers(0, n_stream, ns).astype(np.int32)
    return q, k, v, streams, mask


CASES = [
    # ns, per, n_head_kv, ratio, hd, n_kv, kv_size, n_stream, dtype
    (1, 1, 2, 1, 16, 1, 8, 1, np.float32),
    (1, 7, 2, 2, 16, 37, 40, 1, np.float32),
    (3, 1, 2, 4, 64, 300, 301, 4, np.float16),
    (2, 5, 1, 4, 128, 257, 300, 2, np.float32),
    (4, 3, 3, 2, 24, 129, 129, 4, np.float16),
    (2, 40, 2, 4, 128, 513, 520, 3, np.float32),
    (1, 9, 4, 1, 20, 17, 33, 1, np.float16),   # head_dim not a multiple of 8: generic loops
    (5, 2, 2, 2, 80, 95, 100, 5, np.float32),
]


@pytest.mark.parametrize("case", CASES, ids=[f"ns{c[0]}-per{c[1]}-r{c[3]}-hd{c[4]}-kv{c[5]}-{np.dtype(c[8]).name}"
                                             for c in CASES])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_attention_matches_numpy(case, n_threads):
    ns, per, hkv, ratio, hd, n_kv, kv_size, n_stream, dtype = case
    rng = np.random.default_rng(hash(case[:8]) % 2**32)
    q, k, v, streams, mask = make_case(rng, ns=ns, per=per, n_head_kv=hkv, ratio=ratio, hd=hd, n_kv=n_kv,
                                       kv_size=kv_size, n_stream=n_stream, dtype=dtype)
    out = kernels.attention(q, k, v, streams, mask, n_threads=n_threads)
    ref = reference(q, k, v, streams, mask, 1.0 / np.sqrt(hd))
    assert not np.isnan(out).any()
    assert np.abs(out - ref).max() < 2e-5
    assert (out[0, 0] == 0).all()  # the fully masked row is zeros


def test_mixed_kv_types_and_thread_independence():
    rng = np.random.default_rng(7)
    q, k, v, streams, mask = make_case(rng, ns=3, per=6, n_head_kv=2, ratio=4, hd=64, n_kv=200, kv_size=210,
                                       n_stream=3, dtype=np.float32)
    v16 = v.astype(np.float16)
    o1 = kernels.attention(q, k, v16, streams, mask, n_threads=1)
    o2 = kernels.attention(q, k, v16, streams, mask, n_threads=2)
    assert np.array_equal(o1, o2)  # one thread owns each row: bit-identical whatever n_threads
    assert np.abs(o1 - reference(q, k, v16, streams, mask, 1 / 8.0)).max() < 2e-5


def test_finite_mask_bias_and_cells_beyond_n_kv_ignored():
    rng = np.random.default_rng(3)
    q, k, v, streams, mask = make_case(rng, ns=1, per=4, n_head_kv=1, ratio=2, hd=16, n_kv=30, kv_size=64,
                                       n_stream=1, dtype=np.float32, hole_p=0.0)
    mask = mask + rng.standard_normal(mask.shape).astype(np.float32)  # additive bias, as ggml's soft_max_ext
    k[:, 30:] = np.nan  # cells past n_kv must never be read
    v[:, 30:] = np.nan
    out = kernels.attention(q, k, v, streams, mask)
    assert np.abs(out - reference(q, k[:, :30], v[:, :30], streams, mask, 0.25)).max() < 2e-5


@pytest.mark.parametrize("bad, msg", [
    (lambda a: a.update(q=a["q"].astype(np.float64)), "q must have dtype float32"),
    (lambda a: a.update(streams=np.array([5], np.int32)), "streams"),
    (lambda a: a.update(mask=np.zeros((1, 2, 99), np.float32)), "n_kv=99"),
    (lambda a: a.update(mask=np.full((1, 2, 8), np.nan, np.float32)), "NaN"),
    (lambda a: a.update(v=np.zeros((1, 16, 2, 8), np.float32)), "v shape"),
    (lambda a: a.update(k=np.zeros((1, 16, 3, 16), np.float32), v=np.zeros((1, 16, 3, 16), np.float32)),
     "multiple of n_head_kv"),
    (lambda a: a.update(q=np.zeros((1, 2, 4, 16), np.float32)[:, :, :, ::1].transpose(0, 1, 2, 3)[::-1]),
     None),
])
def test_bad_arguments_raise(bad, msg):
    a = dict(q=np.zeros((1, 2, 4, 16), np.float32), k=np.zeros((1, 16, 2, 16), np.float32),
             v=np.zeros((1, 16, 2, 16), np.float32), streams=np.zeros(1, np.int32),
             mask=np.zeros((1, 2, 8), np.float32))
    bad(a)
    if msg is None:  # a valid call (reversed view of a 1-group array is still contiguous)
        kernels.attention(**a)
        return
    with pytest.raises(ValueError, match=msg):
        kernels.attention(**a)


def test_non_contiguous_rejected():
    q = np.zeros((1, 2, 4, 32), np.float32)[:, :, :, ::2]
    with pytest.raises(ValueError, match="C-contiguous"):
        kernels.attention(q, np.zeros((1, 4, 2, 16), np.float32), np.zeros((1, 4, 2, 16), np.float32),
                          np.zeros(1, np.int32), np.zeros((1, 2, 4), np.float32))
