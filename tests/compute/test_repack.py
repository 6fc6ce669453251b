"""The repacked weights (csrc/compute/repack.c, rp_*.c): the panels give back the GGUF bytes exactly and
dequantise as gguf.quants does; the panel kernels agree with the float64 reference, are batch-invariant on
every back-end (1 row vs 33 vs permuted rows vs thread counts), give the same bits on every back-end (the
plain C one included, where no GGUF tail is involved); the mapped source pages are released; bad arguments
are refused without touching anything. (test_matmul.py / test_backends.py run their invariance and
agreement checks on the repacked layout too.)"""
import mmap
import os

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from ubatch._ffi import ffi, lib
from ubatch.compute import matmul as mm
from matmul_ref import deq, random_weight, reference

from backends import BACKENDS

REPACKED = [t for t in (T.IQ4_NL,) if mm.repack_rows(int(t))]
SIMD = [b for b in BACKENDS if b != "generic"]


def _x(n, k, rng):
    x = rng.standard_normal((n, k)).astype(np.float32)
    x[0] = 0.0
    if n > 2:
        x[2, 1], x[2, 4] = 50.0, -60.0
    return x


def test_layouts_listed():
    assert mm.repack_rows(int(T.IQ4_NL)) == 16
    for t in (T.F32, T.Q8_0, T.Q5_K):  # no layout (yet): never repacked (Q4_K, Q6_K, IQ4_XS, Q5_0: own test files)
        assert mm.repack_rows(int(t)) == 0
        w = mm.QWeight(int(t), 32, 256, random_weight(t, 32, 256, np.random.default_rng(1)), repack=True)
        assert not w.repacked


@pytest.mark.parametrize("t", REPACKED, ids=lambda t: t.name)
@pytest.mark.parametrize("n_rows,k", [(16, 32), (17, 96), (48, 224), (61, 896)])
def test_round_trip_and_dequantisation(t, n_rows, k):
    rng = np.random.default_rng(n_rows * 7 + k)
    data = random_weight(t, n_rows, k, rng)
    w = mm.QWeight(int(t), n_rows, k, data, repack=True)
    assert w.repacked and w.dropped_bytes == 0  # anonymous memory is never dropped
    assert np.array_equal(w.unpacked_bytes(), data)
    ids = np.array([n_rows - 1, 0, 15, n_rows // 2, n_rows - 1], np.int32)
    np.testing.assert_array_equal(mm.get_rows(w, ids), deq(t, data, n_rows, k)[ids].astype(np.float32))


@pytest.mark.parametrize("t", REPACKED, ids=lambda t: t.name)
def test_against_reference_and_gguf_layout(t, backend):
    rng = np.random.default_rng(int(t) + 40)
    n_rows, k = 53, 224
    data = random_weight(t, n_rows, k, rng)
    x = _x(11, k, rng)
    y = mm.matmul(x, mm.QWeight(int(t), n_rows, k, data, repack=True), n_threads=2)
    y0 = mm.matmul(x, mm.QWeight(int(t), n_rows, k, data, repack=False), n_threads=2)
    y_ref, bound, _ = reference(t, data, n_rows, k, x)
    tol = 2e-6 * (k // 32) * bound + 1e-30
    assert (np.abs(y - y_ref) <= tol).all()
    assert (np.abs(y - y0) <= 2 * tol).all()  # the same integers; only the float summation order differs


@pytest.mark.parametrize("t", REPACKED, ids=lambda t: t.name)
def test_tail_columns_are_the_dot_kernels(t, backend):
    """Rows beyond the last whole panel stay in GGUF layout: bitwise the non-repacked weight's results."""
    rng = np.random.default_rng(int(t) + 41)
    n_rows, k = 16 * 3 + 7, 96
    data = random_weight(t, n_rows, k, rng)
    x = _x(9, k, rng)
    y = mm.matmul(x, mm.QWeight(int(t), n_rows, k, data, repack=True))
    y0 = mm.matmul(x, mm.QWeight(int(t), n_rows, k, data, repack=False))
    assert np.array_equal(y[:, 48:], y0[:, 48:])


@pytest.mark.parametrize("t", REPACKED, ids=lambda t: t.name)
def test_batch_invariant_bitwise(t, backend):
    rng = np.random.default_rng(int(t) + 42)
    n_rows, k = 16 * 40 + 5, 896  # enough work for 2 threads at 33 rows; 5 tail rows
    w = mm.QWeight(int(t), n_rows, k, random_weight(t, n_rows, k, rng), repack=True)
    x = _x(33, k, rng)
    full = mm.matmul(x, w, n_threads=2)
    assert np.array_equal(full, mm.matmul(x, w, n_threads=1))
    for i in (0, 2, 6, 13, 32):
        assert np.array_equal(mm.matmul(x[i:i + 1], w, n_threads=2)[0], full[i])
        assert np.array_equal(mm.matmul(np.ascontiguousarray(x[i]), w, n_threads=1), full[i])
    for lo, hi in ((1, 5), (3, 10), (7, 19)):  # row tiles of every size 1..6 at every offset
        assert np.array_equal(mm.matmul(x[lo:hi], w, n_threads=2), full[lo:hi])
    perm = rng.permutation(33)
    assert np.array_equal(mm.matmul(np.ascontiguousarray(x[perm]), w, n_threads=2), full[perm])
    # matmul_multi with a GGUF-layout weight of another type beside it: the same bits
    other = mm.QWeight(int(T.Q8_0), 24, k, random_weight(T.Q8_0, 24, k, rng))
    got = mm.matmul_multi(x, [other, w], n_threads=2)
    assert np.array_equal(got[1], full) and np.array_equal(got[0], mm.matmul(x, other))


@pytest.mark.skipif(len(BACKENDS) < 2, reason=f"one kernel back-end on this CPU ({', '.join(BACKENDS)})")
@pytest.mark.parametrize("t", REPACKED, ids=lambda t: t.name)
def test_every_backend_gives_the_same_bits(t):
    """The panel kernels of every back-end (plain C included) perform the same float operations per element
    (exact int32 block sums, one fma per block): on whole panels all back-ends agree bitwise."""
    rng = np.random.default_rng(int(t) + 43)
    n_rows, k = 64, 7 * 32
    w = mm.QWeight(int(t), n_rows, k, random_weight(t, n_rows, k, rng), repack=True)
    x = _x(14, k, rng)
    x[3] *= 1e-3
    try:
        outs = {}
        for b in BACKENDS:
            mm.set_backend(b)
            outs[b] = [mm.matmul(x[:1], w, n_threads=1), mm.matmul(x, w, n_threads=2)]
        for b in BACKENDS[1:]:
            for got, want in zip(outs[b], outs[BACKENDS[0]]):
                assert np.array_equal(got, want), f"{b} differs from {BACKENDS[0]}"
    finally:
        mm.set_backend("auto")


@pytest.mark.parametrize("t", [t for t in (T.IQ4_NL, T.Q4_K, T.Q6_K, T.IQ4_XS, T.Q5_0) if mm.repack_rows(int(t))],
                         ids=lambda t: t.name)
def test_non_finite_activations_give_nan_rows_only(t, backend):
    """Every panel layout (IQ4_NL's, the k-quants', IQ4_XS's, Q5_0's): a NaN / inf activation row poisons its own output row only."""
    rng = np.random.default_rng(int(t) + 44)
    w = mm.QWeight(int(t), 16, 512, random_weight(t, 16, 512, rng), repack=True)
    x = _x(8, 512, rng)
    clean = mm.matmul(x, w)
    x[1, 3], x[6, -1] = np.nan, np.inf
    y = mm.matmul(x, w)
    assert np.isnan(y[1]).all() and not np.isfinite(y[6]).any()
    assert np.array_equal(y[[0, 2, 3, 4, 5, 7]], clean[[0, 2, 3, 4, 5, 7]])


def test_switches(monkeypatch):
    data = random_weight(T.IQ4_NL, 32, 64, np.random.default_rng(2))
    assert mm.QWeight(int(T.IQ4_NL), 32, 64, data).repacked  # default on
    monkeypatch.setenv("UBATCH_REPACK", "0")
    assert not mm.repack_enabled() and not mm.QWeight(int(T.IQ4_NL), 32, 64, data).repacked
    mm.set_repack(True)
    try:
        assert mm.QWeight(int(T.IQ4_NL), 32, 64, data).repacked
        mm.set_repack(False)
        monkeypatch.delenv("UBATCH_REPACK")
        assert not mm.QWeight(int(T.IQ4_NL), 32, 64, data).repacked
    finally:
        mm.set_repack(None)
    # fewer rows than a panel: nothing to repack
    assert not mm.QWeight(int(T.IQ4_NL), 15, 64, data[:15 * 36]).repacked


def _rss_of_map(path):
    """Resident kB of this process's mappings of file `path` (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if len(head) >= 5 and "-" in head[0] and not line.startswith(("Rss", "Size")) and ":" not in head[0]:
                inside = line.rstrip().endswith(str(path))
            elif inside and line.startswith("Rss:"):
                total += int(head[1])
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="no /proc/self/smaps on this OS")
def test_mapped_pages_are_released(tmp_path):
    """A weight read from a read-only file map: after repacking, its pages leave the resident set (RSS of the
    mapping ~0), the results are those of the same weight repacked from anonymous memory, and the map
    still reads the file's bytes (pages come back from the file)."""
    rng = np.random.default_rng(9)
    n_rows, k = 16 * 64 + 3, 896
    data = random_weight(T.IQ4_NL, n_rows, k, rng)
    path = tmp_path / "w.bin"
    pad = 100  # not page-aligned: only the whole pages inside are released
    with open(path, "wb") as f:
        f.write(b"\0" * pad + data.tobytes() + b"\0" * 100)
    m = np.memmap(path, dtype=np.uint8, mode="r")
    view = m[pad:pad + data.size]
    assert int(view.astype(np.int64).sum()) == int(data.astype(np.int64).sum())  # every page resident
    before = _rss_of_map(path)
    assert before * 1024 >= data.size - mmap.PAGESIZE
    w = mm.QWeight(int(T.IQ4_NL), n_rows, k, view)
    assert w.repacked and w.dropped_bytes >= data.size - 2 * mmap.PAGESIZE
    after = _rss_of_map(path)
    assert after * 1024 <= 2 * mmap.PAGESIZE, (before, after)
    x = _x(5, k, rng)
    want = mm.matmul(x, mm.QWeight(int(T.IQ4_NL), n_rows, k, data))
    assert np.array_equal(mm.matmul(x, w), want)
    assert _rss_of_map(path) * 1024 <= 2 * mmap.PAGESIZE  # the kernels read the panels, not the map
    assert np.array_equal(np.asarray(view), data)
    # copy-on-write maps are never dropped (their pages could hold changes)
    wc = mm.QWeight(int(T.IQ4_NL), n_rows, k, np.memmap(path, dtype=np.uint8, mode="c")[pad:pad + data.size])
    assert wc.repacked and wc.dropped_bytes == 0
    del m, view, w


def test_bad_arguments_are_refused():
    rng = np.random.default_rng(3)
    n_rows, k = 32, 64
    data = random_weight(T.IQ4_NL, n_rows, k, rng)
    buf = ffi.from_buffer("uint8_t[]", data)
    t = int(T.IQ4_NL)
    assert lib.ub_rp_new(buf, data.size - 1, t, n_rows, k, 0) == ffi.NULL     # bytes disagree
    assert lib.ub_rp_new(buf, data.size, t, n_rows, k + 32, 0) == ffi.NULL    # cols disagree
    assert lib.ub_rp_new(buf, data.size, t, n_rows, 63, 0) == ffi.NULL        # not whole blocks
    assert lib.ub_rp_new(buf, 15 * 36, t, 15, k, 0) == ffi.NULL              # fewer rows than a panel
    assert lib.ub_rp_new(buf, data.size, int(T.Q8_0), 32, 32 * 36 // 34, 0) == ffi.NULL  # no layout
    assert lib.ub_rp_new(ffi.NULL, data.size, t, n_rows, k, 0) == ffi.NULL
    assert lib.ub_rp_new(buf, data.size, t, -16, k, 0) == ffi.NULL
    lib.ub_rp_free(ffi.NULL)
    w = mm.QWeight(t, n_rows, k, data, repack=True)
    x = _x(2, k, rng)
    y = np.full((2, n_rows), 7.0, np.float32)
    xb, yb = ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", y)
    R = lib.UB_MM_REPACKED
    # the repacked object's fields must agree with the call's; a failed call leaves y as it was
    assert lib.ub_matmul(xb, 2, k, w.c_buf, w.nbytes, t | R, n_rows - 1, yb, 1) == lib.UB_E_ARG
    assert lib.ub_matmul(xb, 2, k, w.c_buf, w.nbytes, int(T.MXFP4) | R, n_rows, yb, 1) == lib.UB_E_ARG
    assert lib.ub_matmul(xb, 2, k, w.c_buf, w.nbytes - 36, t | R, n_rows - 1, yb, 1) == lib.UB_E_ARG
    assert lib.ub_matmul(xb, 2, k, ffi.NULL, w.nbytes, t | R, n_rows, yb, 1) == lib.UB_E_ARG
    other = mm.QWeight(t, n_rows, k, data, repack=False)  # GGUF bytes flagged as repacked: no magic
    assert lib.ub_matmul(xb, 2, k, other.c_buf, w.nbytes, t | R, n_rows, yb, 1) == lib.UB_E_ARG
    ids = ffi.new("int32_t[]", [0, n_rows])
    out = ffi.new("float[]", 2 * k)
    assert lib.ub_get_rows(w.c_buf, w.nbytes, t | R, n_rows, k, ids, 2, out) == lib.UB_E_ARG  # id out of range
    assert (y == 7.0).all()
    assert lib.ub_rp_unpack(w._rp, ffi.from_buffer("uint8_t[]", np.empty(data.size, np.uint8)), data.size - 1) == lib.UB_E_ARG
    assert lib.ub_matmul(xb, 2, k, w.c_buf, w.nbytes, w.c_type, n_rows, yb, 1) == lib.UB_OK
