"""The repacked Q4_K / Q6_K panels (csrc/compute/rp_kquant.c, rp_kq_avx2.c, rp_kq_avx512.c): unlike IQ4_NL's
they keep every back-end's own k-quant results, so a weight gives bitwise the same matmul repacked or in GGUF
layout, on every back-end (generic, avx2, avxvnni, avx512: the panel kernels perform the GGUF dot kernels'
operations), at any row count (dot kernels, GEMM tiles, tile edges, the GGUF tail) and thread count; the
panels give back the GGUF bytes and dequantise as gguf.quants does; bad shapes fall back or are refused.
(test_matmul.py / test_backends.py run their checks on these layouts too: Q4_K / Q6_K weights of 8 rows or
more are repacked by default.)"""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from ubatch._ffi import ffi, lib
from ubatch.compute import matmul as mm
from panel_checks import assert_rows_invariant, panel_x
from matmul_ref import deq, random_weight

KQ = [T.Q4_K, T.Q6_K]


@pytest.mark.parametrize("t", KQ, ids=lambda t: t.name)
def test_layout_rows(t):
    assert mm.repack_rows(int(t)) == 8
    assert mm.repack_rows(int(T.Q5_K)) == 0  # no panel layout: GGUF layout (its own GEMM tiles)


@pytest.mark.parametrize("t", KQ, ids=lambda t: t.name)
@pytest.mark.parametrize("n_rows,k", [(8, 256), (13, 512), (45, 768), (64, 1024)])
def test_round_trip_and_dequantisation(t, n_rows, k):
    rng = np.random.default_rng(n_rows * 3 + k + int(t))
    data = random_weight(t, n_rows, k, rng)
    w = mm.QWeight(int(t), n_rows, k, data, repack=True)
    assert w.repacked and w.dropped_bytes == 0
    assert np.array_equal(w.unpacked_bytes(), data)
    ids = np.array([n_rows - 1, 0, 7, n_rows // 2, n_rows - 1], np.int32)
    np.testing.assert_array_equal(mm.get_rows(w, ids), deq(t, data, n_rows, k)[ids].astype(np.float32))


@pytest.mark.parametrize("t", KQ, ids=lambda t: t.name)
def test_repacked_gives_the_gguf_layouts_bits(t, backend):
    """Every back-end: the same bits as the GGUF layout, for 1..33 rows (dot kernels for <= 6 rows, GEMM
    tiles of 6 beyond, the rows after the last whole tile), 1 or 2 threads, the 5 tail rows after the last
    whole panel; and batch-invariant: a row alone, in a batch, permuted."""
    rng = np.random.default_rng(int(t) + 70)
    n_rows, k = 8 * 24 + 5, 768
    data = random_weight(t, n_rows, k, rng)
    wr = mm.QWeight(int(t), n_rows, k, data, repack=True)
    wg = mm.QWeight(int(t), n_rows, k, data, repack=False)
    assert wr.repacked and not wg.repacked
    x = panel_x(33, k, rng)
    full = mm.matmul(x, wg, n_threads=2)
    assert np.array_equal(mm.matmul(x, wr, n_threads=2), full)
    assert_rows_invariant(x, wr, full, rng, other_first=False)


@pytest.mark.parametrize("t", KQ, ids=lambda t: t.name)
def test_bad_shapes(t):
    rng = np.random.default_rng(int(t) + 72)
    bb = {T.Q4_K: 144, T.Q6_K: 210}[t]
    data = random_weight(t, 16, 512, rng)
    # fewer rows than a panel: kept in GGUF layout
    assert not mm.QWeight(int(t), 7, 512, data[:7 * 2 * bb], repack=True).repacked
    buf = ffi.from_buffer("uint8_t[]", data)
    assert lib.ub_rp_new(buf, data.size, int(t), 16, 512 + 256, 0) == ffi.NULL   # bytes disagree with the shape
    assert lib.ub_rp_new(buf, data.size, int(t), 16, 511, 0) == ffi.NULL         # not whole blocks
    assert lib.ub_rp_new(buf, 7 * 2 * bb, int(t), 7, 512, 0) == ffi.NULL        # fewer rows than a panel
    w = mm.QWeight(int(t), 16, 512, data, repack=True)
    y = np.full((2, 16), 7.0, np.float32)
    x = panel_x(2, 512, rng)
    xb, yb = ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", y)
    R = lib.UB_MM_REPACKED
    other = int(T.Q6_K if t == T.Q4_K else T.Q4_K)
    assert lib.ub_matmul(xb, 2, 512, w.c_buf, w.nbytes, other | R, 16, yb, 1) == lib.UB_E_ARG  # the other k-quant
    assert lib.ub_matmul(xb, 2, 256, w.c_buf, w.nbytes, int(t) | R, 32, yb, 1) == lib.UB_E_ARG  # same bytes, other shape
    assert (y == 7.0).all()
