"""The avx512 decode tile (mm_vnni.h vn_gemv_*: 4 weight rows x 1 activation row, used for B = 1 and for a
call's rows left over after its 4-row GEMM tiles) on the 32-element block types: every element bitwise what
the AVX2 dot kernel gives (the same float operations per element), at row counts that run it alone (1),
beside GEMM tiles (5, 6, 7) and never (4, 8), over K of several scale-table segments (32 blocks each) with a
vectorised part, a scalar tail and an odd last block, n_rows not a multiple of 4 (dot kernels at the edge),
1 and 2 threads."""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from ubatch.compute import matmul as mm
from matmul_ref import random_weight

from backends import BACKENDS

TYPES = [T.Q4_0, T.Q5_0, T.Q8_0, T.IQ4_NL, T.MXFP4]


@pytest.mark.skipif("avx512" not in BACKENDS or "avx2" not in BACKENDS,
                    reason=f"the decode tile is the avx512 back-end's (this CPU has: {', '.join(BACKENDS)})")
@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("nb", [75, 64, 9])
def test_decode_tile_is_the_dot_kernel_bitwise(t, nb):
    rng = np.random.default_rng(int(t) * 100 + nb)
    k, n_rows = 32 * nb, 23
    w = mm.QWeight(int(t), n_rows, k, random_weight(t, n_rows, k, rng))
    x = rng.standard_normal((8, k)).astype(np.float32)
    x[2] *= 1e-3
    x[4, :5] = 40.0
    try:
        mm.set_backend("avx2")   # the dot kernel (and its Q8_0 tile: the same bits, test_q8_tile.py)
        want = mm.matmul(x, w, n_threads=1)
        mm.set_backend("avx512")
        for n in (1, 2, 3, 4, 5, 6, 7, 8):
            for nt in (1, 2):
                got = mm.matmul(x[:n], w, n_threads=nt)
                assert np.array_equal(got, want[:n]), f"{t.name} nb={nb}: {n} rows, {nt} threads"
        for i in range(8):   # each row alone: the decode tile only
            assert np.array_equal(mm.matmul(x[i:i + 1], w, n_threads=2), want[i:i + 1]), f"{t.name} row {i}"
    finally:
        mm.set_backend("auto")
