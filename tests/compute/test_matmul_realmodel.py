"""The matmul kernels on the real tensors of Qwen2.5-Coder-0.5B Q4_K_M (one of each type it holds: Q5_0,
Q8_0, Q4_K, Q6_K), against the float64 reference with ggml's activation quantisation; bitwise invariance of
a row alone vs in a batch; get_rows of token_embd against gguf's dequantisation."""
import numpy as np
import pytest
from gguf import GGMLQuantizationType

from ubatch.compute import matmul as mm
from matmul_ref import reference

pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def qwen():
    from ubatch.bench.gguf_tensors import read_tensors
    from ubatch.model import fetch
    return read_tensors(fetch.path("qwen2.5-0.5b"))


def _tensor(r, name):
    t = r[name]
    return t, int(t.ne[1]), int(t.ne[0]), t.data


@pytest.mark.parametrize("name", ["blk.0.attn_q.weight", "blk.0.attn_v.weight", "blk.1.attn_v.weight",
                                  "blk.0.ffn_down.weight", "blk.1.ffn_down.weight"])
def test_real_tensor_against_reference(qwen, name):
    t, n_rows, n_cols, data = _tensor(qwen, name)
    w = mm.QWeight(t.ggml_type, n_rows, n_cols, data)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, n_cols)).astype(np.float32)
    x[1, 7] = 30.0  # an outlier channel like real activations
    y = mm.matmul(x, w, n_threads=2)
    y_ref, bound, _ = reference(GGMLQuantizationType(t.ggml_type), data, n_rows, n_cols, x)
    assert (np.abs(y - y_ref) <= 4e-5 * bound).all(), name
    assert np.array_equal(mm.matmul(np.ascontiguousarray(x[3]), w, n_threads=1), y[3])


def test_real_embedding_rows(qwen):
    t, n_rows, n_cols, data = _tensor(qwen, "token_embd.weight")
    w = mm.QWeight(t.ggml_type, n_rows, n_cols, data)
    ids = np.array([0, 151935, 42, 9707], np.int32)
    from gguf.quants import dequantize
    ref = dequantize(data.reshape(n_rows, -1)[ids], GGMLQuantizationType(t.ggml_type))
    np.testing.assert_array_equal(mm.get_rows(w, ids), ref)
