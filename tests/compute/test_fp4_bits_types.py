"""NVFP4, Q1_0, Q2_0 (GGML types 40, 41, 42; Q8_0 activations): dequantisation bit-exact against
gguf.quants.dequantize (NVFP4) or the spec-written numpy reference (tests/support/lowbit_ref.py: gguf 0.19 has no
Q1_0 dequantize and no Q2_0), the dot kernels bitwise against a numpy float32 emulation of the documented order
(csrc/compute/mm_fp4_bits.c) and close to a float64 reference, identical on every back-end, and batch-invariant
(alone vs batched vs permuted rows vs thread counts)."""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from ubatch._ffi import lib
from ubatch.compute import matmul as mm
import lowbit_ref as R
from matmul_ref import quant_act

TYPES = [R.NVFP4, R.Q1_0, R.Q2_0]
IDS = [R.NAMES[t] for t in TYPES]
F = np.float32


def random_blocks(t, n_blocks, rng):
    """uint8[n_blocks, bytes]: random codes, f16 scales with zero / subnormal / negative ones (NVFP4: every
    e4m3 byte value among the sub-block scales), blocks of all 0x00 / 0xFF codes."""
    blck, nb = R.SIZES[t]
    b = rng.integers(0, 256, size=(n_blocks, nb), dtype=np.uint8)
    b[1::7, 4 if t == R.NVFP4 else 2:] = 0xFF
    b[3::11, 4 if t == R.NVFP4 else 2:] = 0x00
    if t == R.NVFP4:
        b[:, 0:4] = rng.integers(0, 256, size=(n_blocks, 4), dtype=np.uint8)
        b[:64, 0:4] = np.arange(256, dtype=np.uint8).reshape(64, 4)[: min(64, n_blocks)]
    else:
        d = (rng.uniform(1e-3, 2e-2, n_blocks) * rng.choice([1, 1, 1, -1], n_blocks)).astype(np.float16)
        d[::13] = 0
        d[2::19] = np.float16(3e-6)
        b[:, 0:2] = d.view(np.uint8).reshape(n_blocks, 2)
    return b


@pytest.mark.parametrize("t", TYPES, ids=IDS)
def test_dequantisation_bit_exact(t):
    rng = np.random.default_rng(4000 + t)
    blck, nb = R.SIZES[t]
    n_rows, k = 64, 4 * blck
    b = random_blocks(t, n_rows * 4, rng)
    w = mm.QWeight(t, n_rows, k, b.reshape(-1))
    got = mm.get_rows(w, np.arange(n_rows, dtype=np.int32))
    want = R.dequant(t, b).reshape(n_rows, k)
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))


def test_nvfp4_reference_is_gguf():
    from gguf.quants import dequantize
    b = random_blocks(R.NVFP4, 300, np.random.default_rng(3))
    np.testing.assert_array_equal(R.dequant(R.NVFP4, b), dequantize(b, T.NVFP4).reshape(300, 64))


@pytest.mark.parametrize("t", TYPES, ids=IDS)
def test_activation_kind_is_q8_0(t):
    k = 1024
    assert lib.ub_mm_act_bytes(t, k) == (k // 32) * (4 + 32)


def _codes(t, blk):
    """(integer values q[blck], sub-block factors) of one block: value = factor * q."""
    if t == R.NVFP4:
        from gguf.quants import NVFP4
        sc = NVFP4.ue4m3_to_fp32(blk[0:4]).astype(F)                      # e4m3 / 2 (the kv values are doubled)
        qs = blk[4:].reshape(4, 8)
        codes = np.concatenate([qs & 15, qs >> 4], axis=1).reshape(64)
        return np.array(NVFP4.kvalues, np.int64)[codes], sc
    unit = np.concatenate([np.frombuffer(np.float16(1).tobytes(), np.uint8), blk[2:]])
    return R.dequant(t, unit[None])[0].astype(np.int64), blk[0:2].copy().view(np.float16).astype(F)


def emulate(t, b, x):
    """The kernel's float32 operations in its documented order, from exact integer sums: float32[n_x, n_rows]."""
    blck, nb = R.SIZES[t]
    b = b.reshape(b.shape[0], -1, nb)
    out = np.zeros((x.shape[0], b.shape[0]), F)
    for r in range(x.shape[0]):
        a = quant_act("q8_0", x[r])
        qa, da = a["q"].astype(np.int64), a["d"].astype(F)
        for c in range(b.shape[0]):
            acc = F(0)
            for ib in range(b.shape[1]):
                q, sc = _codes(t, b[c, ib])
                if t == R.NVFP4:      # acc += (d_x[k] * sc[s]) * isum_s per sub-block of 16
                    for s in range(4):
                        k, h = 2 * ib + s // 2, s % 2
                        isum = int((q[16 * s:16 * s + 16] * qa[k][16 * h:16 * h + 16]).sum())
                        acc = F(acc + F(F(da[k] * sc[s]) * F(isum)))
                else:                 # t = sum_k d_x[k] * isum_k; acc += d_w * t
                    nsub, tt = blck // 32, F(0)
                    for k in range(nsub):
                        isum = int((q[32 * k:32 * k + 32] * qa[nsub * ib + k]).sum())
                        tt = F(tt + F(da[nsub * ib + k] * F(isum)))
                    acc = F(acc + F(sc[0] * tt))
            out[r, c] = acc
    return out


def _case(t, seed, n_rows=12, k=512, n_x=7):
    rng = np.random.default_rng(seed)
    blck, nb = R.SIZES[t]
    b = random_blocks(t, n_rows * k // blck, rng).reshape(n_rows, -1)
    if t == R.NVFP4:                                            # keep the products in the normal range
        b.reshape(-1, nb)[:, 0:4] = rng.integers(0x20, 0x60, size=(b.size // nb, 4), dtype=np.uint8)
    x = rng.standard_normal((n_x, k)).astype(F)
    x[2] = 0                                                     # an all-zero row (scale 0)
    x[3, :40] *= 1e3                                             # one large block
    return b, x, mm.QWeight(t, n_rows, k, b.reshape(-1))


@pytest.mark.parametrize("t", TYPES, ids=IDS)
def test_dot_matches_emulation_and_float64(t, backend):
    b, x, w = _case(t, 50 + t)
    y = mm.matmul(x, w)
    np.testing.assert_array_equal(y.view(np.uint32), emulate(t, b, x).view(np.uint32))
    blck, nb = R.SIZES[t]
    wd = R.dequant(t, b.reshape(-1, nb)).reshape(b.shape[0], -1).astype(np.float64)
    xd = np.stack([quant_act("q8_0", r)["xdeq"] for r in x])
    ref = xd @ wd.T
    scale = np.abs(xd) @ np.abs(wd).T
    assert np.all(np.abs(y - ref) <= 1e-5 * scale + 1e-30)


@pytest.mark.parametrize("t", TYPES, ids=IDS)
def test_every_backend_and_batch_invariance_bitwise(t):
    from ubatch.compute import backends as be
    b, x, w = _case(t, 70 + t, n_rows=37, k=1024, n_x=13)
    ref = None
    for name in be.backends():
        assert mm.set_backend(name) == name
        try:
            full = mm.matmul(x, w, n_threads=1)
            ref = full if ref is None else ref
            np.testing.assert_array_equal(full.view(np.uint32), ref.view(np.uint32), err_msg=name)
            for i in range(x.shape[0]):                                      # each row alone
                np.testing.assert_array_equal(mm.matmul(x[i:i + 1], w).view(np.uint32), ref[i:i + 1].view(np.uint32))
            perm = np.random.default_rng(1).permutation(x.shape[0])
            np.testing.assert_array_equal(mm.matmul(x[perm], w, n_threads=2).view(np.uint32), ref[perm].view(np.uint32))
            np.testing.assert_array_equal(mm.matmul(x[:5], w, n_threads=2).view(np.uint32), ref[:5].view(np.uint32))
        finally:
            mm.set_backend("auto")
