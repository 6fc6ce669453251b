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
