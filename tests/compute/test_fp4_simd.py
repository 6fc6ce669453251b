"""The SIMD kernels of NVFP4, Q1_0, Q2_0 (csrc/compute/mm_fp4_simd.h: the dot kernels, rows in groups of 4 lanes,
and the 4-column decode tiles for rows left alone) give bitwise the plain-C kernels' results (the generic
back-end, mm_fp4_bits.c) on every back-end the CPU has: 1..33 rows (every dot / group / decode-tile mix), rows
alone vs batched vs permuted, 1 and 2 threads, n_rows not a multiple of 4 (dot kernels at the edge), K of 1, 3
and many blocks, extreme codes and activations, non-finite inputs (NaN at the same places); K that is not a
multiple of the block raises."""
import numpy as np
import pytest

from ubatch.compute import matmul as mm
import lowbit_ref as R
from test_fp4_bits_types import random_blocks

TYPES = [R.NVFP4, R.Q1_0, R.Q2_0]
IDS = [R.NAMES[t] for t in TYPES]
F = np.float32


def _weight(t, n_rows, n_blocks, rng):
    blck, nb = R.SIZES[t]
    b = random_blocks(t, n_rows * n_blocks, rng)
    return mm.QWeight(t, n_rows, n_blocks * blck, b.reshape(-1))


def _generic(x, w):
    mm.set_backend("generic")
    try:
        return mm.matmul(x, w, n_threads=1)
    finally:
        mm.set_backend("auto")


def _same(got, want, msg):
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), msg


@pytest.mark.parametrize("t", TYPES, ids=IDS)
@pytest.mark.parametrize("n_blocks", [1, 3, 14])
def test_simd_is_plain_c_bitwise_1_to_33_rows(t, n_blocks, backend):
    rng = np.random.default_rng(9100 + 10 * t + n_blocks)
    blck, _ = R.SIZES[t]
    w = _weight(t, 23, n_blocks, rng)
    x = rng.standard_normal((33, n_blocks * blck)).astype(F)
    x[5] = 0
    x[7] *= 1e-4
    x[9, :3] = 50.0
    want = _generic(x, w)
    mm.set_backend(backend)
    try:
        for n in range(1, 34):
            for nt in (1, 2):
                _same(mm.matmul(x[:n], w, n_threads=nt), want[:n], f"{backend} {R.NAMES[t]} nb={n_blocks}: {n} rows, {nt} threads")
        for i in range(0, 33, 4):   # rows alone (the decode tile, dot kernels at the column edge)
            _same(mm.matmul(x[i:i + 1], w, n_threads=1), want[i:i + 1], f"{backend} row {i} alone")
        perm = rng.permutation(33)
        _same(mm.matmul(x[perm], w, n_threads=2), want[perm], f"{backend} permuted")
    finally:
        mm.set_backend("auto")


@pytest.mark.parametrize("t", TYPES, ids=IDS)
def test_simd_extreme_codes_and_activations(t, backend):
    """All codes at their largest magnitude (NVFP4 +-12 with the largest e4m3 scales, Q2_0 code 3, Q1_0 all set /
    all clear) against activations of +-127 in every lane: the int32 sums at their extremes."""
    blck, nbytes = R.SIZES[t]
    n_rows, n_blocks = 9, 5
    b = np.zeros((n_rows, n_blocks, nbytes), np.uint8)
    if t == R.NVFP4:
        b[..., 0:4] = [0x7E, 0xFF, 0x01, 0x7F]
        b[::2, :, 4:] = 0x77       # +6 (kv 12) in both nibbles
        b[1::2, :, 4:] = 0xFF      # -6
    else:
        b[..., 0:2] = np.frombuffer(np.float16(0.5).tobytes(), np.uint8)
        b[::2, :, 2:] = 0xFF
        b[1::2, :, 2:] = 0x00 if t == R.Q1_0 else 0xFF
    w = mm.QWeight(t, n_rows, n_blocks * blck, b.reshape(-1))
    x = np.ones((7, n_blocks * blck), F)
    x[1] = -1
    x[2, ::2] = -1
    x[3] = 3e4
    x[4] = -1e-30
    want = _generic(x, w)
    mm.set_backend(backend)
    try:
        for n in (1, 2, 5, 7):
            _same(mm.matmul(x[:n], w, n_threads=1), want[:n], f"{backend} {n} rows")
    finally:
        mm.set_backend("auto")


@pytest.mark.parametrize("t", TYPES, ids=IDS)
def test_simd_non_finite_inputs(t, backend):
    rng = np.random.default_rng(77 + t)
    blck, _ = R.SIZES[t]
    w = _weight(t, 10, 4, rng)
    x = rng.standard_normal((6, 4 * blck)).astype(F)
    x[1, 3] = np.inf
    x[2, blck + 1] = np.nan
    x[3, 0] = -np.inf
    want = _generic(x, w)
    mm.set_backend(backend)
    try:
        for n in (1, 6):
            got = mm.matmul(x[:n], w, n_threads=1)
            assert np.array_equal(np.isnan(got), np.isnan(want[:n]))
            fin = ~np.isnan(want[:n])
            _same(got[fin], want[:n][fin], f"{backend} {n} rows")
    finally:
        mm.set_backend("auto")


@pytest.mark.parametrize("t", TYPES, ids=IDS)
def test_bad_shapes_raise(t):
    blck, nbytes = R.SIZES[t]
    with pytest.raises(ValueError, match="multiple"):
        mm.QWeight(t, 4, blck + 32, np.zeros(4 * 2 * nbytes, np.uint8))
    with pytest.raises(ValueError, match="bytes"):
        mm.QWeight(t, 4, blck, np.zeros(4 * nbytes - 1, np.uint8))
    w = mm.QWeight(t, 4, 2 * blck, np.zeros(8 * nbytes, np.uint8))
    with pytest.raises(ValueError, match="shape"):
        mm.matmul(np.zeros((3, blck), F), w)
