"""The C matmul kernels against float64 references built on gguf.quants dequantisation, the activation
quantisation against a numpy model of ggml-cpu's, bitwise batch invariance, and bad input."""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from ubatch.compute import matmul as mm
from matmul_ref import ACT, ALL_TYPES, BLOCK, act_bytes, deq, random_weight, reference

from backends import BACKENDS


def _cols(t):
    """A K with several blocks; float types get a K that is not a multiple of 8 (tail path)."""
    blck = BLOCK[t][0]
    return 77 if blck == 1 else (96 if blck == 32 else 512)


def _act_rows(n, k, rng):
    x = rng.standard_normal((n, k)).astype(np.float32)
    x[0, :] = 0.0                          # an all-zero row (amax = 0)
    if n > 2:
        x[2, 3] = 40.0                     # an outlier channel
        x[2, 5] = -55.0                    # the largest magnitude is negative (Q8_K sign)
    if n > 3:
        x[3] = np.float32(0.5) * np.round(x[3] * 8)  # many exact ties after scaling
    return x


@pytest.mark.parametrize("t", ALL_TYPES, ids=lambda t: t.name)
def test_matmul_against_reference(t, backend):
    rng = np.random.default_rng(int(t) + 100)
    n_rows, k, n = 37, _cols(t), 9
    data = random_weight(t, n_rows, k, rng)
    w = mm.QWeight(int(t), n_rows, k, data)
    x = _act_rows(n, k, rng)
    y = mm.matmul(x, w, n_threads=2)
    assert y.shape == (n, n_rows) and y.dtype == np.float32
    y_ref, bound, y_float = reference(t, data, n_rows, k, x)
    tol = (1e-6 if t == T.F32 else 2e-6 * max(1, k // BLOCK[t][0])) * bound + 1e-30
    err = np.abs(y.astype(np.float64) - y_ref)
    assert (err <= tol).all(), f"{t.name}: max err {err.max()} (relative to bound {(err / (bound + 1e-30)).max()})"
    # and the whole thing is a matmul: activation rounding stays at its documented size
    rel = np.abs(y - y_float).max() / (np.abs(y_float).max() + 1e-30)
    assert rel < {"f32": 1e-6, "f16": 2e-3, "bf16": 2e-2}.get(ACT[t], 0.1), rel


@pytest.mark.parametrize("t", ALL_TYPES, ids=lambda t: t.name)
def test_activation_quantisation_bytes(t, backend):
    rng = np.random.default_rng(int(t) + 7)
    k = _cols(t) if BLOCK[t][0] > 1 else 77
    if ACT[t] == "q8_k":
        k = 512
    x = _act_rows(4, k, rng)
    for row in x:
        got = mm.quantize_activations(np.ascontiguousarray(row), int(t)).tobytes()
        assert got == act_bytes(ACT[t], row), t.name


@pytest.mark.parametrize("t", ALL_TYPES, ids=lambda t: t.name)
def test_matmul_batch_invariant_bitwise(t, backend):
    rng = np.random.default_rng(int(t) + 3)
    n_rows, k = 301, _cols(t)  # enough work for the call of 33 rows to run on 2 threads (matmul.c)
    data = random_weight(t, n_rows, k, rng)
    x = _act_rows(33, k, rng)
    perm = rng.permutation(33)
    # the GGUF layout, and the repacked panels (+ a GGUF tail: 301 is no multiple of a panel) where t has them
    for repack in (False, True) if mm.repack_rows(int(t)) else (False,):
        w = mm.QWeight(int(t), n_rows, k, data, repack=repack)
        assert w.repacked == repack
        full = mm.matmul(x, w, n_threads=2)
        assert np.array_equal(full, mm.matmul(x, w, n_threads=1))
        for i in (0, 2, 5, 32):
            assert np.array_equal(mm.matmul(x[i:i + 1], w, n_threads=1)[0], full[i])
            assert np.array_equal(mm.matmul(np.ascontiguousarray(x[i]), w), full[i])
        assert np.array_equal(mm.matmul(x[3:10], w, n_threads=2), full[3:10])
        assert np.array_equal(mm.matmul(np.ascontiguousarray(x[perm]), w, n_threads=2), full[perm])


@pytest.mark.parametrize("t", ALL_TYPES, ids=lambda t: t.name)
def test_get_rows_matches_gguf_dequantize(t):
    rng = np.random.default_rng(int(t) + 11)
    n_rows, k = 13, _cols(t)
    data = random_weight(t, n_rows, k, rng)
    w = mm.QWeight(int(t), n_rows, k, data)
    ids = np.array([4, 0, 12, 4, 7], np.int32)
    got = mm.get_rows(w, ids)
    ref = deq(t, data, n_rows, k)[ids].astype(np.float32)
    np.testing.assert_array_equal(got, ref)


def test_native_dtype_data_and_memmap(tmp_path):
    rng = np.random.default_rng(5)
    W = rng.standard_normal((6, 40)).astype(np.float32)
    x = rng.standard_normal((3, 40)).astype(np.float32)
    y32 = mm.matmul(x, mm.QWeight(int(T.F32), 6, 40, W))
    np.testing.assert_allclose(y32, x @ W.T, rtol=1e-5, atol=1e-5)
    p = tmp_path / "w.bin"
    W.astype(np.float16).tofile(p)
    mem = np.memmap(p, dtype=np.uint8, mode="r")
    w16 = mm.QWeight(int(T.F16), 6, 40, mem)
    assert w16.data is mem
    assert np.array_equal(mm.matmul(x, w16), mm.matmul(x, mm.QWeight(int(T.F16), 6, 40, W.astype(np.float16))))


@pytest.mark.parametrize("t", ALL_TYPES, ids=lambda t: t.name)
def test_non_finite_activations_give_nan_rows_only(t, backend):
    rng = np.random.default_rng(int(t) + 21)
    n_rows, k = 5, _cols(t)
    w = mm.QWeight(int(t), n_rows, k, random_weight(t, n_rows, k, rng))
    x = _act_rows(4, k, rng)
    clean = mm.matmul(x, w)
    x[1, 3], x[2, -1] = np.nan, np.inf
    y = mm.matmul(x, w)
    assert np.isnan(y[1]).all() and not np.isfinite(y[2]).any()
    assert np.array_equal(y[[0, 3]], clean[[0, 3]])


def test_empty_shapes():
    w = mm.QWeight(int(T.Q8_0), 0, 64, np.zeros(0, np.uint8))
    assert mm.matmul(np.zeros((3, 64), np.float32), w).shape == (3, 0)
    w = mm.QWeight(int(T.Q8_0), 2, 64, np.zeros(2 * 68, np.uint8))
    assert mm.matmul(np.zeros((0, 64), np.float32), w).shape == (0, 2)
    assert mm.get_rows(w, np.zeros(0, np.int32)).shape == (0, 64)


def test_bad_input_names_the_culprit():
    good = np.zeros(2 * 34, np.uint8)
    with pytest.raises(ValueError, match="unsupported ggml type 99"):
        mm.QWeight(99, 2, 32, good)
    with pytest.raises(ValueError, match="unsupported ggml type"):
        mm.QWeight(15, 1, 256, np.zeros(292, np.uint8))  # Q8_K is activation-only
    with pytest.raises(ValueError, match="n_cols=300 is not a multiple of the Q4_K block size 256"):
        mm.QWeight(int(T.Q4_K), 1, 300, np.zeros(144, np.uint8))
    with pytest.raises(ValueError, match="has 67 bytes"):
        mm.QWeight(int(T.Q8_0), 2, 32, good[:67])
    with pytest.raises(ValueError, match="dtype float64"):
        mm.QWeight(int(T.F32), 2, 4, np.zeros((2, 4)))
    with pytest.raises(ValueError, match="n_rows"):
        mm.QWeight(int(T.Q8_0), -1, 32, good)
    w = mm.QWeight(int(T.Q8_0), 2, 32, good)
    with pytest.raises(ValueError, match="x must have dtype float32"):
        mm.matmul(np.zeros((1, 32)), w)
    with pytest.raises(ValueError, match=r"x must have shape \[n, 32\]"):
        mm.matmul(np.zeros((1, 33), np.float32), w)
    with pytest.raises(ValueError, match="C-contiguous"):
        mm.matmul(np.zeros((32, 2), np.float32).T, w)
    with pytest.raises(ValueError, match="out must be"):
        mm.matmul(np.zeros((1, 32), np.float32), w, out=np.zeros((1, 3), np.float32))
    with pytest.raises(ValueError, match="n_threads"):
        mm.matmul(np.zeros((1, 32), np.float32), w, n_threads=0)
    with pytest.raises(ValueError, match="w must be a QWeight"):
        mm.matmul(np.zeros((1, 32), np.float32), good)
    with pytest.raises(ValueError, match="id 2 out of range"):
        mm.get_rows(w, np.array([0, 2], np.int32))
    with pytest.raises(ValueError, match="ids must be a 1-D int32"):
        mm.get_rows(w, np.array([0], np.int64))
    with pytest.raises(ValueError, match="unknown kernel back-end"):
        mm.set_backend("avx9000")


@pytest.mark.skipif("avx2" not in BACKENDS, reason="no AVX2")
@pytest.mark.parametrize("t", [T.Q4_K, T.Q6_K], ids=lambda t: t.name)
def test_activation_quantisation_avx2_equals_generic(t):
    """The AVX2 Q8_K quantiser gives the generic bytes on hostile rows: ties, the largest magnitude repeated
    (first one wins) or negative, zero blocks, subnormals, huge values, NaN / inf blocks. (The Q8_0 / Q8_1
    quantisers differ from the generic code on blocks whose max is below ~4e-37, where 127 / max overflows.)"""
    rng = np.random.default_rng(int(t))
    rows = [rng.standard_normal(512).astype(np.float32) for _ in range(6)]
    rows[1][:] = np.float32(0.5) * np.round(rows[1] * 8)
    rows[2][10], rows[2][200], rows[2][300] = -7.5, 7.5, -7.5
    rows[3][:256] = 0.0
    rows[3][256:] = rng.standard_normal(256).astype(np.float32) * np.float32(1e-40)
    rows[4][5], rows[4][400] = 3e38, -np.inf
    rows[5][7], rows[5][300] = np.nan, 1e-3
    try:
        for row in rows:
            mm.set_backend("generic")
            want = mm.quantize_activations(row, int(t)).tobytes()
            mm.set_backend("avx2")
            assert mm.quantize_activations(row, int(t)).tobytes() == want
    finally:
        mm.set_backend("auto")
