"""Row-wise ops (rms_norm, gated activations) and the visible-cell attention: float64 references,
bitwise invariance to batching, threads and KV layout, bad input."""
import numpy as np
import pytest

from ubatch.compute import ops
from ubatch.memory.placement import Placement
from ubatch.testing.reference import attention_masked



def test_rms_norm_reference_and_invariance():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((9, 77)).astype(np.float32) * 3
    g = rng.standard_normal(77).astype(np.float32)
    y = ops.rms_norm(x, g, 1e-6)
    x64 = x.astype(np.float64)
    ref = x64 / np.sqrt((x64 ** 2).mean(axis=1, keepdims=True) + 1e-6) * g
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    for i in (0, 4, 8):
        assert np.array_equal(ops.rms_norm(x[i], g, 1e-6), y[i])
    assert np.array_equal(ops.rms_norm(x[2:5], g, 1e-6), y[2:5])
    z = x.copy()
    ops.rms_norm(z, g, 1e-6, out=z)
    assert np.array_equal(z, y)
    np.testing.assert_allclose(ops.rms_norm(x, None, 1e-5), x64 / np.sqrt((x64 ** 2).mean(1, keepdims=True) + 1e-5),
                               rtol=1e-5)


def test_gated_activations():
    rng = np.random.default_rng(1)
    g = (rng.standard_normal(1001) * 4).astype(np.float32)
    u = rng.standard_normal(1001).astype(np.float32)
    g64, u64 = g.astype(np.float64), u.astype(np.float64)
    np.testing.assert_allclose(ops.silu_mul(g, u), g64 / (1 + np.exp(-g64)) * u64, rtol=1e-5, atol=1e-6)
    g[:4] = [-12.0, 11.0, -10.0, 10.0]  # ggml's cut-offs
    g64 = g.astype(np.float64)
    h = g.astype(np.float16).astype(np.float32)  # ggml-cpu evaluates gelu in f32 on the f16 gate, result as f16
    c, a3, half, one = np.float32(np.sqrt(2 / np.pi)), np.float32(0.044715), np.float32(0.5), np.float32(1)
    gelu = (half * h * (one + np.tanh(c * h * (one + a3 * h * h)))).astype(np.float16).astype(np.float64)
    gelu = np.where(g64 <= -10, 0.0, np.where(g64 >= 10, g64, gelu))
    got = ops.gelu_mul(g, u)
    np.testing.assert_allclose(got, gelu * u64, rtol=2e-3, atol=1e-6)  # libm vs numpy tanhf: 1 f16 ulp at most
    assert (got[:4] == (gelu * u64)[:4].astype(np.float32)).all()
    exact = np.abs(got - (gelu * u64)) <= 1e-6 * np.abs(gelu * u64) + 1e-12
    assert exact[g64 > -3].mean() > 0.99  # below, 1 + tanh cancels and libm / numpy tanhf ulps show
    assert np.array_equal(ops.silu_mul(g[7:9], u[7:9]), ops.silu_mul(g, u)[7:9])
    with pytest.raises(ValueError, match="g shape"):
        ops.silu_mul(g, u[:3])


def _silu_inputs():
    """Gates across exp's whole range: normal, subnormal and overflowing exp(-g), the |n| > 192 cut-offs,
    signed zeros, infinities and NaNs; odd length (the scalar tail)."""
    rng = np.random.default_rng(2)
    parts = [rng.standard_normal(20000) * s for s in (1, 8, 30, 90, 120, 1e4)]
    grid = np.linspace(-140, 140, 140001)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 87.3, -87.3, 88.72, -88.72, 103.9,
               -103.9, 133.0, -133.0, 3.4e38, -3.4e38]
    g = np.concatenate(parts + [grid, special]).astype(np.float32)
    return g, rng.standard_normal(g.size).astype(np.float32)


def test_silu_mul_simd_bitwise_the_scalar_loop(backend):
    """The vector loops (silu_simd.c) give the plain-C loop's bits, whatever the length and offset."""
    from ubatch.compute import matmul as mm
    g, u = _silu_inputs()
    got = [ops.silu_mul(g, u), ops.silu_mul(g[3:-4], u[3:-4]), ops.silu_mul(g[:13], u[:13])]
    mm.set_backend("generic")
    try:
        ref = [ops.silu_mul(g, u), ops.silu_mul(g[3:-4], u[3:-4]), ops.silu_mul(g[:13], u[:13])]
    finally:
        mm.set_backend(backend)
    for a, b in zip(got, ref):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), backend
    assert np.array_equal(got[0][3:-4].view(np.uint32), got[1].view(np.uint32))


def _ref_lists(mask, pos):
    ns, per, n_kv = mask.shape
    off, cells = [0], []
    for k in range(ns):
        for r in range(per):
            vis = [j for j in range(n_kv) if mask[k, r, j] == 0]
            cells += sorted(vis, key=lambda j: (pos[k, j], j))
            off.append(len(cells))
    return np.array(off, np.int32), np.array(cells, np.int32)


def test_visible_cells_sorted_by_position():
    rng = np.random.default_rng(2)
    mask = np.where(rng.random((3, 5, 40)) < 0.4, 0, -np.inf).astype(np.float32)
    pos = rng.integers(-5, 30, size=(3, 40)).astype(np.int32)  # repeated (and negative) positions: ties by cell index
    off, cells = ops.visible_cells(mask, pos)
    roff, rcells = _ref_lists(mask, pos)
    assert np.array_equal(off, roff) and np.array_equal(cells, rcells)
    bad = mask.copy()
    bad[1, 2, 3] = -1.0
    with pytest.raises(ValueError, match="mask values must be 0"):
        ops.visible_cells(bad, pos)
    with pytest.raises(ValueError, match="pos shape"):
        ops.visible_cells(mask, pos[:, :5].copy())


def _attn_ref(q, k, v, rs, off, cells, scale, softcap):
    n_q, n_head, _ = q.shape
    gqa = n_head // k.shape[2]
    out = np.zeros((n_q, n_head, v.shape[3]))
    for i in range(n_q):
        c = cells[off[i]:off[i + 1]]
        if not len(c):
            continue
        for h in range(n_head):
            qh = q[i, h].astype(np.float64)
            kk = k[rs[i], c, h // gqa].astype(np.float64)
            if k.dtype == np.float16:
                qh = qh.astype(np.float16).astype(np.float64)
            s = kk @ qh
            if softcap:
                s = softcap * np.tanh(s / softcap)
            s = s * scale
            p = np.exp(s - s.max())
            p /= p.sum()
            out[i, h] = p @ v[rs[i], c, h // gqa].astype(np.float64)
    return out


def _setup(rng, dtype, n_stream=2, kv_size=24, n_head=6, n_head_kv=2, hd=16, n_q=7):
    q = rng.standard_normal((n_q, n_head, hd)).astype(np.float32)
    k = rng.standard_normal((n_stream, kv_size, n_head_kv, hd)).astype(dtype)
    v = rng.standard_normal((n_stream, kv_size, n_head_kv, hd)).astype(dtype)
    rs = rng.integers(0, n_stream, n_q).astype(np.int32)
    lens = rng.integers(0, kv_size, n_q)
    lens[1] = 0  # a row that sees nothing
    off = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    cells = np.concatenate([rng.permutation(kv_size)[:n] for n in lens]).astype(np.int32)
    return q, k, v, rs, off, cells


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("softcap", [0.0, 5.0])
def test_attention_visible_reference(dtype, softcap, backend):
    rng = np.random.default_rng(3)
    q, k, v, rs, off, cells = _setup(rng, dtype)
    out = ops.attention_visible(q, k, v, rs, off, cells, scale=0.3, softcap=softcap, n_threads=2)
    ref = _attn_ref(q, k, v, rs, off, cells, 0.3, softcap)
    np.testing.assert_allclose(out, ref, rtol=0, atol=2e-3 if dtype == np.float16 else 2e-5)
    assert not out[1].any()


def test_attention_visible_invariance(backend):
    rng = np.random.default_rng(4)
    q, k, v, rs, off, cells = _setup(rng, np.float32, n_q=9, hd=64)
    full = ops.attention_visible(q, k, v, rs, off, cells, n_threads=2)
    assert np.array_equal(full, ops.attention_visible(q, k, v, rs, off, cells, n_threads=1))
    for i in (0, 4, 8):  # a row alone
        c = cells[off[i]:off[i + 1]]
        one = ops.attention_visible(q[i:i + 1].copy(), k, v, rs[i:i + 1].copy(), np.array([0, len(c)], np.int32),
                                    c.copy(), n_threads=1)
        assert np.array_equal(one[0], full[i])
    # the same cells moved elsewhere in the cache (another layout, same list order): bitwise equal
    perm = rng.permutation(k.shape[1]).astype(np.int32)
    k2, v2 = np.empty_like(k), np.empty_like(v)
    k2[:, perm], v2[:, perm] = k, v
    assert np.array_equal(ops.attention_visible(q, k2, v2, rs, off, perm[cells], n_threads=2), full)


def test_visible_from_placement_matches_cell_order_attention():
    """A causal placement: the invariant attention agrees with the cell-order float64 reference to rounding."""
    rng = np.random.default_rng(5)
    ns, per, n_kv, n_stream, kv_size, n_head, n_head_kv, hd = 2, 3, 8, 2, 8, 4, 2, 8
    cell_pos = np.tile(rng.permutation(kv_size).astype(np.int32), (n_stream, 1))  # cells not in position order
    qpos = np.array([[5, 6, 7], [2, 3, 4]])
    mask = np.where(cell_pos[[0, 1]][:, None, :] <= qpos[:, :, None], 0, -np.inf).astype(np.float32)
    place = Placement(streams=np.array([1, 0], np.int32), cells=np.zeros((ns, per), np.int32), n_kv=n_kv, mask=mask)
    row_stream, off, cells = ops.visible_cells_for(place, cell_pos)
    assert row_stream.tolist() == [1, 1, 1, 0, 0, 0]
    for i in range(ns * per):
        assert np.all(np.diff(cell_pos[row_stream[i], cells[off[i]:off[i + 1]]]) > 0)
    q = rng.standard_normal((ns, per, n_head, hd)).astype(np.float32)
    k = rng.standard_normal((n_stream, kv_size, n_head_kv, hd)).astype(np.float32)
    v = rng.standard_normal((n_stream, kv_size, n_head_kv, hd)).astype(np.float32)
    ref = attention_masked(q, k, v, place.streams, mask, 1.0 / np.sqrt(hd))
    new = ops.attention_visible(q.reshape(ns * per, n_head, hd), k, v, row_stream, off, cells)
    np.testing.assert_allclose(new.reshape(ref.shape), ref, rtol=1e-5, atol=1e-6)


def test_attention_visible_bad_input():
    rng = np.random.default_rng(6)
    q, k, v, rs, off, cells = _setup(rng, np.float32)
    with pytest.raises(ValueError, match="q must have dtype float32"):
        ops.attention_visible(q.astype(np.float64), k, v, rs, off, cells)
    with pytest.raises(ValueError, match="n_head=6 is not a multiple of n_head_kv=4"):
        ops.attention_visible(q, np.zeros((2, 24, 4, 16), np.float32), np.zeros((2, 24, 4, 16), np.float32),
                              rs, off, cells)
    bad = cells.copy()
    bad[0] = 24
    with pytest.raises(ValueError, match="cells values out of range"):
        ops.attention_visible(q, k, v, rs, off, bad)
    with pytest.raises(ValueError, match="row_stream values out of range"):
        ops.attention_visible(q, k, v, rs + 5, off, cells)
    with pytest.raises(ValueError, match="off must be"):
        ops.attention_visible(q, k, v, rs, off[::-1].copy(), cells)
    with pytest.raises(ValueError, match="k must be a float32 or float16"):
        ops.attention_visible(q, k.astype(np.float64), v, rs, off, cells)
    with pytest.raises(ValueError, match="x must have dtype float32"):
        ops.rms_norm(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="weight has 2 elements"):
        ops.rms_norm(np.zeros((2, 3), np.float32), np.zeros(2, np.float32))


@pytest.mark.parametrize("kv_dtype", [np.float32, np.float16])
def test_attention_visible_head_split_bitwise(backend, kv_dtype):
    """Few rows (decode): the query heads of a kv head are shared out among the threads; every head's result
    is bitwise what one thread gives (and what the row gives inside a larger batch)."""
    rng = np.random.default_rng(11)
    n_head, n_head_kv, hd, kv_size = 6, 1, 32, 40
    k = rng.standard_normal((1, kv_size, n_head_kv, hd)).astype(kv_dtype)
    v = rng.standard_normal((1, kv_size, n_head_kv, hd)).astype(kv_dtype)
    q = rng.standard_normal((5, n_head, hd)).astype(np.float32)
    rs = np.zeros(5, np.int32)
    lens = [40, 3, 17, 0, 25]
    off = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    cells = np.concatenate([rng.permutation(kv_size)[:n] for n in lens]).astype(np.int32)
    full = ops.attention_visible(q, k, v, rs, off, cells, scale=0.2, n_threads=1)
    for nt in (2, 3, 4, 7):
        assert np.array_equal(ops.attention_visible(q, k, v, rs, off, cells, scale=0.2, n_threads=nt), full)
        for i in (0, 2):
            one = ops.attention_visible(q[i:i + 1].copy(), k, v, rs[:1], np.array([0, lens[i]], np.int32),
                                        cells[off[i]:off[i + 1]].copy(), scale=0.2, n_threads=nt)
            assert np.array_equal(one[0], full[i])


def _gelu_tab(table, g, u):
    from ubatch._ffi import ffi, lib
    y = np.empty_like(g)
    fb = lambda a: ffi.from_buffer("float[]", a)  # noqa: E731
    lib.ub_gelu_table_mul(fb(table), fb(g), fb(u), fb(y), g.size)
    return y


def test_gelu_table_simd_lanes_bitwise_plain_c(backend):
    """The SIMD back-ends' table GeGLU (act_simd.c: vcvtps2ph + gather) reads the plain C loop's entry (ub_f2h)
    for every gate: f16 rounding ties, half subnormals, the +-10 cut-offs, NaN / inf; a random table so a
    wrong index shows; every lane position and the scalar tail."""
    from ubatch.compute import matmul as mm
    rng = np.random.default_rng(11)
    table = rng.standard_normal(65536).astype(np.float32)
    halves = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    with np.errstate(invalid="ignore"):                               # the NaN halves
        ties = (halves[:-1].astype(np.float64) + halves[1:]) / 2      # exactly between two halves
    ties = ties[np.isfinite(ties) & (np.abs(ties) < 12)].astype(np.float32)
    g = np.concatenate([rng.uniform(-11, 11, 6000), rng.standard_normal(2000) * 1e-5, ties[::7],
                        np.nextafter(ties[::11], np.float32(np.inf)), [10.0, -10.0, np.nextafter(np.float32(10), 0),
                        np.nextafter(np.float32(-10), 0), 0.0, -0.0, np.inf, -np.inf, np.nan, 6e-8, -3e-8, 2.98e-8]])
    g = g.astype(np.float32)
    u = rng.standard_normal(g.size).astype(np.float32)
    got = _gelu_tab(table, g, u)
    mm.set_backend("generic")
    try:
        ref = _gelu_tab(table, g, u)
        parts = [_gelu_tab(table, g[s:s + 21].copy(), u[s:s + 21].copy()) for s in range(40)]
    finally:
        mm.set_backend(backend)
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32)), \
        f"{backend}: {int((got.view(np.uint32) != ref.view(np.uint32)).sum())} elements differ from plain C"
    for s in range(40):
        assert np.array_equal(_gelu_tab(table, g[s:s + 21].copy(), u[s:s + 21].copy()).view(np.uint32),
                              parts[s].view(np.uint32))
    h = g[np.abs(g) < 10].astype(np.float16)   # numpy's f16 rounding: the entry each gate must read
    want = table[h.view(np.uint16).astype(np.int64)] * u[np.abs(g) < 10]
    assert np.array_equal(ref[np.abs(g) < 10], want)
