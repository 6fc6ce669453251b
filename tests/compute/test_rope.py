"""RoPE (NORM / NEOX / M-RoPE), the K-shift and the half conversions against numpy."""
import numpy as np
import pytest

from ubatch.compute import kernels
from ubatch._ffi import ffi, lib


def rope_ref(x, pos, n_rot, base, mode, freq_scale=1.0, sections=None):
    x = x.astype(np.float64).copy()
    n_rows = x.shape[0]
    half = n_rot // 2
    i = np.arange(half)
    inv = base ** (-2.0 * i / n_rot)
    for r in range(n_rows):
        if mode == kernels.ROPE_MROPE:
            sect = np.cumsum(sections)
            sector = i % sect[-1]
            which = np.searchsorted(sect, sector, side="right")
            p = pos[np.minimum(which, 3), r]
        else:
            p = np.full(half, pos[0, r])
        th = freq_scale * p * inv
        c, s = np.cos(th), np.sin(th)
        a, b = (i, i + half) if mode != kernels.ROPE_NORM else (2 * i, 2 * i + 1)
        xr = x[r]
        x0, x1 = xr[:, a].copy(), xr[:, b].copy()
        xr[:, a] = x0 * c - x1 * s
        xr[:, b] = x0 * s + x1 * c
    return x


@pytest.mark.parametrize("mode", [kernels.ROPE_NORM, kernels.ROPE_NEOX])
@pytest.mark.parametrize("hd, n_rot", [(16, 16), (64, 64), (128, 64), (20, 12)])
def test_rope_matches_numpy(mode, hd, n_rot):
    rng = np.random.default_rng(hd + n_rot + mode)
    x = rng.standard_normal((9, 3, hd)).astype(np.float32)
    pos = rng.integers(0, 3000, (1, 9)).astype(np.int32)
    ref = rope_ref(x, pos, n_rot, 10000.0, mode)
    kernels.rope(x, pos, n_rot=n_rot, base=10000.0, mode=mode)
    # float32 angles at positions up to 3000 carry ~3000 * 6e-8 rad of rounding, as in ggml
    assert np.abs(x - ref).max() < 2e-3
    assert np.array_equal(x[:, :, n_rot:], ref[:, :, n_rot:].astype(np.float32))  # unrotated tail untouched


def test_rope_small_positions_precise_and_freq_scale():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 2, 32)).astype(np.float32)
    pos = np.arange(5, dtype=np.int32)[None]
    ref = rope_ref(x, pos, 32, 500000.0, kernels.ROPE_NORM, freq_scale=0.25)
    kernels.rope(x, pos, n_rot=32, base=500000.0, freq_scale=0.25)
    assert np.abs(x - ref).max() < 1e-5


def test_mrope_sections():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 2, 32)).astype(np.float32)
    pos = rng.integers(0, 50, (4, 4)).astype(np.int32)
    sections = [4, 6, 6, 0]
    ref = rope_ref(x, pos, 32, 10000.0, kernels.ROPE_MROPE, sections=sections)
    kernels.rope(x, pos, n_rot=32, base=10000.0, mode=kernels.ROPE_MROPE, sections=sections)
    assert np.abs(x - ref).max() < 1e-4


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_rope_shift_composes(dtype):
    """Rotating K stored at position p by delta equals K computed at p + delta (what the K-shift is for)."""
    rng = np.random.default_rng(5)
    raw = rng.standard_normal((2, 11, 2, 16)).astype(np.float32)
    pos = rng.integers(0, 100, (2, 11)).astype(np.int32)
    delta = rng.integers(-40, 40, (2, 11)).astype(np.int32)
    delta[0, :3] = 0
    k = raw.reshape(22, 2, 16).copy()
    kernels.rope(k, pos.reshape(1, 22), n_rot=16, base=10000.0)
    k = k.reshape(raw.shape).astype(dtype)
    before = k.copy()
    kernels.rope_shift(k, delta, n_rot=16, base=10000.0)
    want = raw.reshape(22, 2, 16).copy()
    kernels.rope(want, (pos + delta).reshape(1, 22), n_rot=16, base=10000.0)
    tol = 1e-4 if dtype == np.float32 else 1e-2
    assert np.abs(k.astype(np.float32) - want.reshape(raw.shape)).max() < tol
    assert np.array_equal(k[0, :3], before[0, :3])  # delta 0: untouched
    if dtype == np.float16:  # the C float->half rounding equals numpy's (nearest even)
        cur = before.astype(np.float32).reshape(22, 2, 16)
        kernels.rope(cur, delta.reshape(1, 22), n_rot=16, base=10000.0)
        assert np.array_equal(k, cur.reshape(raw.shape).astype(np.float16))


def test_half_conversions_match_numpy():
    bits = np.arange(65536, dtype=np.uint16)
    f = np.empty(65536, np.float32)
    lib.ub_f16_to_f32(ffi.cast("uint16_t *", bits.ctypes.data), ffi.cast("float *", f.ctypes.data), 65536)
    want = bits.view(np.float16).astype(np.float32)
    assert np.array_equal(np.isnan(f), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(f[ok].view(np.uint32), want[ok].view(np.uint32))
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(20000).astype(np.float32) * 10 ** rng.uniform(-9, 5, 20000),
                        np.array([65519.99, 65520.0, 1e6, -1e6, np.inf, -np.inf, 0.0, -0.0, 2 ** -25, 2 ** -24,
                                  3 * 2 ** -26, 6.1e-5], np.float32)]).astype(np.float32)
    h = np.empty(x.size, np.uint16)
    lib.ub_f32_to_f16(ffi.cast("float *", x.ctypes.data), ffi.cast("uint16_t *", h.ctypes.data), x.size)
    with np.errstate(over="ignore"):
        want_h = x.astype(np.float16).view(np.uint16)
    assert np.array_equal(h, want_h)


def test_rope_bad_arguments():
    x = np.zeros((2, 1, 16), np.float32)
    with pytest.raises(ValueError, match="pos has 3 rows"):
        kernels.rope(x, np.zeros((1, 3), np.int32), n_rot=16, base=1e4)
    with pytest.raises(ValueError, match="n_rot=17"):
        kernels.rope(x, np.zeros((1, 2), np.int32), n_rot=17, base=1e4)
    with pytest.raises(ValueError, match="rope mode 5"):
        kernels.rope(x, np.zeros((1, 2), np.int32), n_rot=16, base=1e4, mode=5)
    with pytest.raises(ValueError, match="4 position sections"):
        kernels.rope(x, np.zeros((1, 2), np.int32), n_rot=16, base=1e4, mode=kernels.ROPE_MROPE)
    with pytest.raises(ValueError, match="delta shape"):
        kernels.rope_shift(np.zeros((1, 4, 1, 16), np.float32), np.zeros((1, 3), np.int32), n_rot=16, base=1e4)
