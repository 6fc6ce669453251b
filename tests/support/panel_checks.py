"""Shared pieces of the repacked-panel tests (tests/compute/test_repack_*.py): the activations they use, the
plain-C GGUF-layout result a panel kernel must reproduce, and the row-invariance checks every layout passes."""
import numpy as np
from gguf import GGMLQuantizationType as T

from ubatch.compute import matmul as mm
from matmul_ref import random_weight


def panel_x(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """[n, k] float32 activations: row 0 zero, row 2 with two outliers, row 3 tiny (when n > 3)."""
    x = rng.standard_normal((n, k)).astype(np.float32)
    x[0] = 0.0
    if n > 3:
        x[2, 1], x[2, 4] = 50.0, -60.0
        x[3] *= 1e-3
    return x


def generic_bits(t: T, x: np.ndarray, data: np.ndarray, n_rows: int, k: int, backend: str) -> np.ndarray:
    """The GGUF layout of `t` on the plain C back-end: the bits the panels must give (then back to `backend`)."""
    try:
        mm.set_backend("generic")
        return mm.matmul(x, mm.QWeight(int(t), n_rows, k, data, repack=False), n_threads=1)
    finally:
        mm.set_backend(backend)


def assert_rows_invariant(x: np.ndarray, wr: "mm.QWeight", full: np.ndarray, rng: np.random.Generator,
                          other_first: bool) -> None:
    """x: [33, k]; full = matmul(x, wr) with 2 threads. Every row's result is the same with 1 thread, in any slice,
    alone, in permuted order, and beside a GGUF-layout Q8_0 weight in one matmul_multi call (before or after it)."""
    k = x.shape[1]
    assert np.array_equal(mm.matmul(x, wr, n_threads=1), full)
    for lo, hi in ((0, 1), (5, 6), (1, 5), (3, 9), (7, 20), (20, 33)):
        assert np.array_equal(mm.matmul(x[lo:hi], wr, n_threads=2), full[lo:hi]), (lo, hi)
    assert np.array_equal(mm.matmul(np.ascontiguousarray(x[13]), wr), full[13])
    perm = rng.permutation(33)
    assert np.array_equal(mm.matmul(np.ascontiguousarray(x[perm]), wr, n_threads=2), full[perm])
    other = mm.QWeight(int(T.Q8_0), 24, k, random_weight(T.Q8_0, 24, k, rng))
    ws = [other, wr] if other_first else [wr, other]
    got = mm.matmul_multi(x, ws, n_threads=2)  # beside a GGUF-layout weight of another activation kind
    i = 1 if other_first else 0
    assert np.array_equal(got[i], full) and np.array_equal(got[1 - i], mm.matmul(x, other))
