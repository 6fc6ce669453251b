"""The Q8_0 GEMM tiles over prepared activation rows: avx512 (csrc/compute/mm_q8_tile.h: 4 weight rows x every
whole 4-row tile of a call, the rows left over by the decode tile, the columns left over by the dot kernel) and
avx2 (csrc/compute/mm_q8_tile_avx2.c: 2 weight rows x every whole 4-row tile, the rest by the dot kernel):
every element bitwise what the AVX2 dot kernel gives (for the avx2 tile: each row alone, below a tile), over K of one block, an odd number of blocks, several
32-block scale segments, and more than 256 blocks (the weight scales converted per segment instead of once),
at row counts with and without left-over rows, n_rows not a multiple of 4, 1 and 2 threads, permuted rows,
and beside a Q5_0 / Q4_0 weight sharing the quantised activations in one matmul_multi call."""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from ubatch.compute import matmul as mm
from matmul_ref import random_weight

from backends import BACKENDS

NEEDS = pytest.mark.skipif("avx512" not in BACKENDS or "avx2" not in BACKENDS,
                           reason=f"the Q8_0 tile is the avx512 back-end's (this CPU has: {', '.join(BACKENDS)})")


def _x(rng, n, k):
    x = rng.standard_normal((n, k)).astype(np.float32)
    x[1 % n] *= 1e-3
    x[2 % n, :5] = 40.0
    x[3 % n] = 0.0
    return x


NEEDS_AVX2 = pytest.mark.skipif("avx2" not in BACKENDS, reason=f"this CPU has: {', '.join(BACKENDS)}")


@NEEDS_AVX2
@pytest.mark.parametrize("nb", [1, 7, 20, 33, 64, 97, 300])
def test_avx2_q8_tile_is_the_dot_kernel_bitwise(nb):
    rng = np.random.default_rng(100 + nb)
    k, n_rows = 32 * nb, 27   # an odd column count: the last column by the dot kernel
    w = mm.QWeight(int(T.Q8_0), n_rows, k, random_weight(T.Q8_0, n_rows, k, rng))
    x = _x(rng, 33, k)
    try:
        mm.set_backend("avx2")
        # one row alone: fewer rows than a tile, the dot kernel for every element
        want = np.stack([mm.matmul(x[i:i + 1], w, n_threads=1)[0] for i in range(33)])
        for n in range(1, 34):
            for nt in (1, 2):
                got = mm.matmul(x[:n], w, n_threads=nt)
                assert np.array_equal(got.view(np.uint32), want[:n].view(np.uint32)), f"nb={nb}: {n} rows, {nt} threads"
        perm = rng.permutation(33)
        assert np.array_equal(mm.matmul(x[perm], w, n_threads=2).view(np.uint32), want[perm].view(np.uint32))
        # more columns than a thread chunk holds, so chunks and their edges fall inside the matrix
        w2 = mm.QWeight(int(T.Q8_0), 301, k, random_weight(T.Q8_0, 301, k, rng))
        want2 = np.stack([mm.matmul(x[i:i + 1], w2, n_threads=1)[0] for i in range(9)])
        for nt in (1, 2):
            assert np.array_equal(mm.matmul(x[:9], w2, n_threads=nt).view(np.uint32), want2.view(np.uint32))
    finally:
        mm.set_backend("auto")


@NEEDS_AVX2
@pytest.mark.parametrize("other", [T.Q5_0, T.Q4_0], ids=lambda t: t.name)
def test_avx2_q8_tile_beside_a_weight_sharing_its_activations(other):
    rng = np.random.default_rng(200 + int(other))
    k = 32 * 21
    w8 = mm.QWeight(int(T.Q8_0), 40, k, random_weight(T.Q8_0, 40, k, rng))
    wo = mm.QWeight(int(other), 36, k, random_weight(other, 36, k, rng))
    x = _x(rng, 18, k)
    try:
        mm.set_backend("avx2")
        got = mm.matmul_multi(x, [wo, w8, wo], n_threads=2)
        want8 = np.stack([mm.matmul(x[i:i + 1], w8, n_threads=1)[0] for i in range(18)])
        wanto = mm.matmul(x, wo, n_threads=1)
    finally:
        mm.set_backend("auto")
    assert np.array_equal(got[1].view(np.uint32), want8.view(np.uint32))
    assert np.array_equal(got[0].view(np.uint32), wanto.view(np.uint32))
    assert np.array_equal(got[2].view(np.uint32), wanto.view(np.uint32))


@NEEDS
@pytest.mark.parametrize("nb", [1, 7, 20, 33, 64, 97, 300])
def test_q8_tile_is_the_dot_kernel_bitwise(nb):
    rng = np.random.default_rng(nb)
    k, n_rows = 32 * nb, 27
    w = mm.QWeight(int(T.Q8_0), n_rows, k, random_weight(T.Q8_0, n_rows, k, rng))
    x = _x(rng, 33, k)
    try:
        mm.set_backend("avx2")   # each row alone (below the avx2 tile's 4 rows): the dot kernel for every element
        want = np.stack([mm.matmul(x[i:i + 1], w, n_threads=1)[0] for i in range(33)])
        mm.set_backend("avx512")
        for n in (4, 5, 8, 11, 16, 32, 33):
            for nt in (1, 2):
                got = mm.matmul(x[:n], w, n_threads=nt)
                assert np.array_equal(got.view(np.uint32), want[:n].view(np.uint32)), f"nb={nb}: {n} rows, {nt} threads"
        perm = rng.permutation(33)
        assert np.array_equal(mm.matmul(x[perm], w, n_threads=2).view(np.uint32), want[perm].view(np.uint32))
    finally:
        mm.set_backend("auto")


@NEEDS
@pytest.mark.parametrize("other", [T.Q5_0, T.Q4_0], ids=lambda t: t.name)
def test_q8_tile_beside_a_weight_sharing_its_activations(other):
    rng = np.random.default_rng(int(other))
    k = 32 * 21
    w8 = mm.QWeight(int(T.Q8_0), 40, k, random_weight(T.Q8_0, 40, k, rng))
    wo = mm.QWeight(int(other), 36, k, random_weight(other, 36, k, rng))
    x = _x(rng, 18, k)
    try:
        got = mm.matmul_multi(x, [wo, w8, wo], n_threads=2)
        alone = [mm.matmul(x, wo, n_threads=1), mm.matmul(x, w8, n_threads=1)]
        mm.set_backend("avx2")
        want8 = np.stack([mm.matmul(x[i:i + 1], w8, n_threads=1)[0] for i in range(18)])
    finally:
        mm.set_backend("auto")
    assert np.array_equal(got[1].view(np.uint32), want8.view(np.uint32))
    assert np.array_equal(got[1].view(np.uint32), alone[1].view(np.uint32))
    assert np.array_equal(got[0].view(np.uint32), alone[0].view(np.uint32))
    assert np.array_equal(got[2].view(np.uint32), alone[0].view(np.uint32))
