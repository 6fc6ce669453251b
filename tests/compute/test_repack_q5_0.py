"""The repacked Q5_0 panels (csrc/compute/rp_q5_0.c, rp_q5_avx2.c, rp_q5_avx512.c): every back-end's panel
kernel performs the plain C Q5_0 dot kernel's operations (exact int32 block sums, then
acc + (d_w * d_x) * isum), so on panel columns every back-end gives the generic back-end's GGUF-layout bits, at
any row count, tile position and thread count; the tail rows after the last whole panel are that back-end's dot
kernels; the panels give back the GGUF bytes and dequantise as gguf.quants does; bad shapes are refused.
(test_repack.py's non-finite test and test_backends.py run on this layout too.)"""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from ubatch._ffi import ffi, lib
from ubatch.compute import matmul as mm
from panel_checks import assert_rows_invariant, generic_bits, panel_x
from matmul_ref import deq, random_weight, reference

Q5 = T.Q5_0


def test_layout_rows():
    assert mm.repack_rows(int(Q5)) == 16


@pytest.mark.parametrize("n_rows,k", [(16, 32), (17, 96), (45, 768), (61, 896)])
def test_round_trip_and_dequantisation(n_rows, k):
    rng = np.random.default_rng(n_rows * 5 + k)
    data = random_weight(Q5, n_rows, k, rng)
    w = mm.QWeight(int(Q5), n_rows, k, data, repack=True)
    assert w.repacked and w.dropped_bytes == 0
    assert np.array_equal(w.unpacked_bytes(), data)
    # memory: the panels cost the file's 22 bytes per 32 weights (5 bits a weight), the tail rows their GGUF bytes
    assert lib.ub_rp_bytes(w._rp) == data.size
    ids = np.array([n_rows - 1, 0, 15, n_rows // 2, n_rows - 1], np.int32)
    np.testing.assert_array_equal(mm.get_rows(w, ids), deq(Q5, data, n_rows, k)[ids].astype(np.float32))


def test_panels_give_the_generic_dot_kernels_bits(backend):
    """Every back-end, panel columns: the plain C dot kernel's bits on the GGUF layout, for 1..33 rows (row tiles
    of every size 1..6 at every offset), 1 or 2 threads, permuted rows, beside another weight; tail columns
    (5 rows after the last whole panel): this back-end's own dot kernels; and near the float64 reference."""
    rng = np.random.default_rng(int(Q5) + 80)
    n_rows, k = 16 * 12 + 5, 32 * 29
    n_prow = n_rows - 5
    data = random_weight(Q5, n_rows, k, rng)
    wr = mm.QWeight(int(Q5), n_rows, k, data, repack=True)
    wg = mm.QWeight(int(Q5), n_rows, k, data, repack=False)
    assert wr.repacked and not wg.repacked
    x = panel_x(33, k, rng)
    full = mm.matmul(x, wr, n_threads=2)
    want = generic_bits(Q5, x, data, n_rows, k, backend)
    assert np.array_equal(full[:, :n_prow], want[:, :n_prow])
    assert np.array_equal(full[:, n_prow:], mm.matmul(x, wg, n_threads=2)[:, n_prow:])
    assert_rows_invariant(x, wr, full, rng, other_first=True)
    y_ref, bound, _ = reference(Q5, data, n_rows, k, x)
    assert (np.abs(full - y_ref) <= 2e-6 * (k // 32) * bound + 1e-30).all()


def test_long_rows_cross_the_correction_runs(backend):
    """137 blocks a row: the 4..6-row tiles take their -16 * sum(x) starts in runs of 64 blocks, 8 per reduction
    tree and one by one after (rp_q5_avx512.c q5_body_cs); 13 rows = tiles of 6, 6 and 1: the generic bits."""
    rng = np.random.default_rng(int(Q5) + 83)
    n_rows, k = 32, 32 * 137
    data = random_weight(Q5, n_rows, k, rng)
    w = mm.QWeight(int(Q5), n_rows, k, data, repack=True)
    x = panel_x(13, k, rng)
    assert np.array_equal(mm.matmul(x, w), generic_bits(Q5, x, data, n_rows, k, backend))


def test_extreme_values(backend):
    """Every 5-bit code, codes -16 / +15 everywhere, activations at +-127, large and tiny scales: the int32 sums
    stay exact (panel = generic), odd block counts (a last block without a pair)."""
    rng = np.random.default_rng(int(Q5) + 81)
    n_rows, k = 32, 32 * 7
    data = random_weight(Q5, n_rows, k, rng).reshape(n_rows, k // 32, 22)
    data[:, :, 2:] = rng.integers(0, 256, size=(n_rows, k // 32, 20), dtype=np.uint8)  # every code
    data[0, :, 2:] = 0x00  # code 0: value -16 everywhere
    data[1, :, 2:] = 0xFF  # code 31: value +15 everywhere
    data[2, :, 0:2] = np.frombuffer(np.float16(60000.0).tobytes(), np.uint8)
    data[3, :, 0:2] = np.frombuffer(np.float16(1e-7).tobytes(), np.uint8)
    data = data.reshape(-1)
    w = mm.QWeight(int(Q5), n_rows, k, data, repack=True)
    assert w.repacked and np.array_equal(w.unpacked_bytes(), data)
    x = panel_x(7, k, rng)
    x[4] = np.where(np.arange(k) % 2, 1.0, -1.0)  # +-127 after quantisation
    x[5] = -1.0  # -127 everywhere
    assert np.array_equal(mm.matmul(x, w), generic_bits(Q5, x, data, n_rows, k, backend))


def test_bad_shapes():
    rng = np.random.default_rng(int(Q5) + 82)
    data = random_weight(Q5, 16, 512, rng)
    rb = 16 * 22
    assert not mm.QWeight(int(Q5), 15, 512, data[:15 * rb], repack=True).repacked  # fewer rows than a panel
    buf = ffi.from_buffer("uint8_t[]", data)
    assert lib.ub_rp_new(buf, data.size, int(Q5), 16, 512 + 32, 0) == ffi.NULL  # bytes disagree with the shape
    assert lib.ub_rp_new(buf, data.size, int(Q5), 16, 511, 0) == ffi.NULL       # not whole blocks
    assert lib.ub_rp_new(buf, 15 * rb, int(Q5), 15, 512, 0) == ffi.NULL         # fewer rows than a panel
    assert lib.ub_rp_new(buf, data.size, int(T.Q5_1), 16, 512, 0) == ffi.NULL   # a type without a layout
    w = mm.QWeight(int(Q5), 16, 512, data, repack=True)
    y = np.full((2, 16), 7.0, np.float32)
    x = panel_x(2, 512, rng)
    xb, yb = ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", y)
    R = lib.UB_MM_REPACKED
    assert lib.ub_matmul(xb, 2, 512, w.c_buf, w.nbytes, int(T.Q4_0) | R, 16, yb, 1) == lib.UB_E_ARG  # other type
    assert lib.ub_matmul(xb, 2, 256, w.c_buf, w.nbytes, int(Q5) | R, 32, yb, 1) == lib.UB_E_ARG  # other shape
    assert (y == 7.0).all()
    with pytest.raises(Exception):
        mm.matmul(np.zeros((2, 256), np.float32), w)  # the wrong K: refused by Python, naming the shapes
