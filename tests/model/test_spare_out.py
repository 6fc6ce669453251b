"""ops.matmul(..., reuse=True), the lm head's spare output buffers (ubatch/model/ops.py _spare_out): a result
anyone still references (the array, a view of it) is never written again; one released is reused; the values
are those of a fresh matmul."""
import numpy as np
from gguf import GGMLQuantizationType as T

from ubatch.model import ops
from ubatch.model.gguf_file import TensorInfo
from ubatch.model.weights import Weight
from matmul_ref import random_weight


def _weight(rng, n_rows=48, k=64):
    data = random_weight(T.Q8_0, n_rows, k, rng)
    return Weight(TensorInfo("output.weight", (k, n_rows), int(T.Q8_0), 0, data.size, data))


def test_held_results_are_never_overwritten_and_released_ones_are_reused():
    rng = np.random.default_rng(11)
    w = _weight(rng)
    xs = [rng.standard_normal((n, 64)).astype(np.float32) for n in (4, 4, 3, 4, 1, 4)]
    want = [ops.matmul(x, w) for x in xs]
    a = ops.matmul(xs[0], w, reuse=True)
    b = ops.matmul(xs[1], w, reuse=True)      # a is held: another buffer
    view = b[1:3]
    c = ops.matmul(xs[2], w, reuse=True)      # a and b (through its view) held: a third
    assert not np.shares_memory(a, b) and not np.shares_memory(c, b) and not np.shares_memory(a, c)
    for got, i in ((a, 0), (b, 1), (c, 2)):
        assert np.array_equal(got, want[i])
    assert np.array_equal(view, want[1][1:3])
    del a
    addr_b = b.__array_interface__["data"][0]
    del b, view                                # b's buffer free again (a's was dropped from the two spares)
    d = ops.matmul(xs[3], w, reuse=True)
    assert d.__array_interface__["data"][0] == addr_b  # the released spare, not c's (held)
    assert not np.shares_memory(d, c) and np.array_equal(d, want[3]) and np.array_equal(c, want[2])
    e = ops.matmul(xs[4], w, reuse=True)      # fewer rows: the first rows of a free spare
    assert e.shape == (1, 48) and np.array_equal(e, want[4])
    assert not np.shares_memory(e, d) and not np.shares_memory(e, c)
    assert np.array_equal(ops.matmul(xs[5], w), want[5]) and np.array_equal(d, want[3])


def test_big_results_are_fresh_arrays(monkeypatch):
    rng = np.random.default_rng(12)
    w = _weight(rng)
    monkeypatch.setattr(ops, "_SPARE_MAX", 4 * 48)
    x = rng.standard_normal((5, 64)).astype(np.float32)
    a = ops.matmul(x, w, reuse=True)
    del a
    assert getattr(w, "_spare_outs", None) is None  # nothing kept
    assert np.array_equal(ops.matmul(x, w, reuse=True), ops.matmul(x, w))
