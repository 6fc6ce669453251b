"""The repacked IQ4_XS panels (csrc/compute/rp_iq4xs.c, rp_xs_avx2.c, rp_xs_avx512.c): every back-end's panel
kernel performs the IQ4_XS dot kernels' 8-lane operations (lane j = the exact int32 sum over the sub-blocks of
scale * elements 4j..4j+3, fma(d_w * d_x, lane, acc) per super-block, ggml's hsum_float_8 order: llama.cpp's x86
vec_dot_iq4_xs_q8_K), so on panel columns every back-end gives the GGUF layout's bits, which are the same on every
back-end (plain C included), at any row count, tile position and thread count; the tail rows after the last
whole panel are that back-end's dot kernels; the panels give back the GGUF bytes and dequantise as gguf.quants
does; bad shapes are refused. (test_repack.py's non-finite test and test_backends.py run on this layout too.)"""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from ubatch._ffi import ffi, lib
from ubatch.compute import matmul as mm
from backends import BACKENDS
from panel_checks import assert_rows_invariant, generic_bits, panel_x
from matmul_ref import deq, random_weight, reference

XS = T.IQ4_XS


def test_layout_rows():
    assert mm.repack_rows(int(XS)) == 16


@pytest.mark.parametrize("n_rows,k", [(16, 256), (17, 512), (45, 768), (61, 1280)])
def test_round_trip_and_dequantisation(n_rows, k):
    rng = np.random.default_rng(n_rows * 5 + k)
    data = random_weight(XS, n_rows, k, rng)
    w = mm.QWeight(int(XS), n_rows, k, data, repack=True)
    assert w.repacked and w.dropped_bytes == 0
    assert np.array_equal(w.unpacked_bytes(), data)
    # memory: the panels cost 140 bytes per 256 weights (the file's 136 + 4), the tail rows their GGUF bytes
    assert lib.ub_rp_bytes(w._rp) <= data.size * 140 // 136 + 64
    ids = np.array([n_rows - 1, 0, 15, n_rows // 2, n_rows - 1], np.int32)
    np.testing.assert_array_equal(mm.get_rows(w, ids), deq(XS, data, n_rows, k)[ids].astype(np.float32))


def test_panels_give_the_generic_dot_kernels_bits(backend):
    """Every back-end, panel columns: the plain C dot kernel's bits on the GGUF layout, for 1..33 rows (row tiles
    of every size 1..6 at every offset), 1 or 2 threads, permuted rows, beside another weight; tail columns
    (5 rows after the last whole panel): this back-end's own dot kernels; and near the float64 reference."""
    rng = np.random.default_rng(int(XS) + 80)
    n_rows, k = 16 * 12 + 5, 1024
    n_prow = n_rows - 5
    data = random_weight(XS, n_rows, k, rng)
    wr = mm.QWeight(int(XS), n_rows, k, data, repack=True)
    wg = mm.QWeight(int(XS), n_rows, k, data, repack=False)
    assert wr.repacked and not wg.repacked
    x = panel_x(33, k, rng)
    full = mm.matmul(x, wr, n_threads=2)
    want = generic_bits(XS, x, data, n_rows, k, backend)
    assert np.array_equal(full[:, :n_prow], want[:, :n_prow])
    assert np.array_equal(full[:, n_prow:], mm.matmul(x, wg, n_threads=2)[:, n_prow:])
    assert_rows_invariant(x, wr, full, rng, other_first=True)
    y_ref, bound, _ = reference(XS, data, n_rows, k, x)
    assert (np.abs(full - y_ref) <= 2e-6 * (k // 32) * bound + 1e-30).all()


def test_every_back_end_and_layout_gives_the_same_bits():
    """IQ4_XS has one float sequence everywhere: the plain C, AVX2 and AVX-512 dot kernels / GEMM tiles on the GGUF
    layout and every back-end's panels give the same bits (1..13 rows, a tail of 3 rows after the panels)."""
    rng = np.random.default_rng(int(XS) + 83)
    n_rows, k = 16 * 7 + 3, 1280
    data = random_weight(XS, n_rows, k, rng)
    x = panel_x(13, k, rng)
    got = {}
    try:
        for be in BACKENDS:
            mm.set_backend(be)
            for rp in (True, False):
                got[be, rp] = mm.matmul(x, mm.QWeight(int(XS), n_rows, k, data, repack=rp), n_threads=2)
    finally:
        mm.set_backend("auto")
    assert len(got) >= 4 or BACKENDS == ["generic"], BACKENDS
    first = next(iter(got.values()))
    for key, y in got.items():
        assert np.array_equal(y, first), key


def test_large_scales_and_extreme_values(backend):
    """Every 6-bit scale (-32..31) and nibble, activations at +-127: the int32 sums stay exact (panel = generic)."""
    rng = np.random.default_rng(int(XS) + 81)
    n_rows, k = 32, 512
    data = random_weight(XS, n_rows, k, rng).reshape(n_rows, k // 256, 136)
    data[:, :, 2:8] = rng.integers(0, 256, size=(n_rows, k // 256, 6), dtype=np.uint8)  # scales: all 6-bit values
    data[0, :, 2:8] = 0  # scale -32 everywhere
    data[1, :, 2:8] = 255  # scale 31 everywhere
    data[0:2, :, 8:] = 0x00  # every value -127
    data = data.reshape(-1)
    w = mm.QWeight(int(XS), n_rows, k, data, repack=True)
    x = panel_x(7, k, rng)
    x[4] = np.where(np.arange(k) % 2, 1.0, -1.0)  # +-127 after quantisation
    assert np.array_equal(mm.matmul(x, w), generic_bits(XS, x, data, n_rows, k, backend))


def test_bad_shapes():
    rng = np.random.default_rng(int(XS) + 82)
    data = random_weight(XS, 16, 512, rng)
    assert not mm.QWeight(int(XS), 15, 512, data[:15 * 2 * 136], repack=True).repacked  # fewer rows than a panel
    buf = ffi.from_buffer("uint8_t[]", data)
    assert lib.ub_rp_new(buf, data.size, int(XS), 16, 512 + 256, 0) == ffi.NULL  # bytes disagree with the shape
    assert lib.ub_rp_new(buf, data.size, int(XS), 16, 511, 0) == ffi.NULL        # not whole blocks
    assert lib.ub_rp_new(buf, data.size, int(XS), 16, 256 + 32, 0) == ffi.NULL   # not whole super-blocks
    assert lib.ub_rp_new(buf, 15 * 2 * 136, int(XS), 15, 512, 0) == ffi.NULL    # fewer rows than a panel
    w = mm.QWeight(int(XS), 16, 512, data, repack=True)
    y = np.full((2, 16), 7.0, np.float32)
    x = panel_x(2, 512, rng)
    xb, yb = ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", y)
    R = lib.UB_MM_REPACKED
    assert lib.ub_matmul(xb, 2, 512, w.c_buf, w.nbytes, int(T.IQ4_NL) | R, 16, yb, 1) == lib.UB_E_ARG  # other type
    assert lib.ub_matmul(xb, 2, 256, w.c_buf, w.nbytes, int(XS) | R, 32, yb, 1) == lib.UB_E_ARG  # other shape
    assert (y == 7.0).all()
    with pytest.raises(Exception):
        mm.matmul(np.zeros((2, 256), np.float32), w)  # the wrong K: refused by Python, naming the shapes
