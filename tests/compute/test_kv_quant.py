"""The K/V cache row codecs (csrc/compute/kv_quant.c): bitwise equal to the gguf package's numpy reference
quantisers (ggml's quantize_row_*_ref rounding) and dequantisers; bad input raises naming the culprit."""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import quants

from ubatch.compute import kv_quant as kq

TYPES = [("q8_0", Q.Q8_0), ("q4_0", Q.Q4_0), ("q4_1", Q.Q4_1), ("q5_0", Q.Q5_0), ("q5_1", Q.Q5_1), ("bf16", Q.BF16)]


def _rows():
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((24, 96)) * rng.uniform(1e-3, 30, (24, 1))).astype(np.float32)
    x[1] = 0.0                       # a zero block (scale 0)
    x[2, :32] = -2.5                 # constant blocks
    x[3, 32:64] = 7.0
    x[4, 5] = 1e4                    # one outlier
    return x


@pytest.mark.parametrize("name, gt", TYPES)
def test_codec_matches_gguf_reference(name, gt):
    x = _rows()
    ours = kq.quantize_rows(name, x)
    ref = np.asarray(quants.quantize(x, gt)).view(np.uint8).reshape(ours.shape)
    assert np.array_equal(ours, ref)
    assert np.array_equal(kq.dequantize_rows(name, ours, 96), quants.dequantize(ref, gt))


def test_store_rows_scatter_and_errors():
    x = _rows()[:3]
    dst = np.zeros((10, kq.row_bytes("q8_0", 96)), np.uint8)
    kq.store_rows("q8_0", x, dst, np.array([7, 0, 4]))
    assert np.array_equal(dst[[7, 0, 4]], kq.quantize_rows("q8_0", x))
    assert not dst[[1, 2, 3, 5, 6, 8, 9]].any()
    with pytest.raises(ValueError, match="idx"):
        kq.store_rows("q8_0", x, dst, np.array([0, 1, 10]))
    with pytest.raises(ValueError, match="type_k"):
        kq.row_bytes("q4_0", 48, "type_k")          # 48 is not a multiple of 32
    with pytest.raises(ValueError, match="q9_0"):
        kq.type_id("q9_0", "type_v")


def test_iq4_nl_matches_ggml():
    """iq4_nl rows against ggml's own quantiser (tests/data/kv_quant/iq4_nl_codec.npz, recorded from
    llama-cpp-python 0.3.36's libggml-base by tests/compute/record_iq4_nl_codec.py): every block's bytes
    equal, except the codes of a block below ggml's 1e-15 floor (d = 0 there; ggml leaves its codes as they
    were in a scratch buffer), and the dequantised rows equal everywhere (and to the gguf package's)."""
    import os
    d = np.load(os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "kv_quant", "iq4_nl_codec.npz"))
    x, ref = d["x"], d["q"]
    ours = kq.quantize_rows("iq4_nl", x)
    ob, rb = ours.reshape(-1, 18), ref.reshape(-1, 18)
    live = np.abs(x.reshape(-1, 32)).max(axis=1) >= 1e-15
    assert live.sum() >= 110 and (~live).sum() >= 3
    assert np.array_equal(ob[live], rb[live])
    assert np.array_equal(ob[:, :2], rb[:, :2]) and not ob[~live, :2].any()
    deq = kq.dequantize_rows("iq4_nl", ours, 96)
    assert np.array_equal(deq, kq.dequantize_rows("iq4_nl", ref, 96))
    assert np.array_equal(deq, quants.dequantize(ref, Q.IQ4_NL))
    err = np.abs(deq - x).max(axis=1) / np.maximum(np.abs(x).max(axis=1), 1e-30)
    assert err[live.reshape(-1, 3).all(axis=1)].max() < 0.15    # the widest gap of the table (23 of 127), refitted


def test_iq4_nl_dequant_same_on_every_backend(backend):
    """The AVX2 iq4_nl row dequantiser (the SIMD back-ends) gives the plain-C floats bitwise, and the
    attention over an iq4_nl K / V is each back-end's own fixed function of them."""
    from ubatch.compute import matmul as mm
    x = _rows()
    q = kq.quantize_rows("iq4_nl", x)
    got = kq.dequantize_rows("iq4_nl", q, 96)
    mm.set_backend("generic")
    try:
        ref = kq.dequantize_rows("iq4_nl", q, 96)
    finally:
        mm.set_backend(backend)
    assert np.array_equal(got, ref)
    assert np.array_equal(ref, quants.dequantize(q, Q.IQ4_NL))
