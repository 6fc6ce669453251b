"""The fused forward (one C call per layer: ubatch.model.fused, csrc/compute/layer.c) against the Python
reference path, bitwise, on the tiny model (every KV layout / type / thread count / n_ubatch of the
invariance matrix that differs) and on the real models; its pieces: the GeGLU table kernel against
ubatch.model.ops.gelu_mul, ub_matmul_multi against separate matmuls, and the C side's error messages."""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

import ubatch
from ubatch import Batch
from ubatch._ffi import ffi, lib
from ubatch.model import fused
from ubatch.compute import matmul as mm
from ubatch.model import ops as mops
from invariance_driver import others_for, run_target
from matmul_ref import random_weight



@pytest.fixture
def reference_path():
    """Run the body with the fused path off, then restore the default."""
    fused.set_enabled(False)
    yield
    fused.set_enabled(None)


def _both(fn):
    """fn() with the fused path, then with the Python reference path."""
    try:
        fused.set_enabled(True)
        a = fn()
        fused.set_enabled(False)
        b = fn()
    finally:
        fused.set_enabled(None)
    return a, b


# ---- GeGLU through the f16 table --------------------------------------------------------------------------
def test_gelu_table_mul_bitwise_numpy():
    rng = np.random.default_rng(3)
    g = (rng.standard_normal(20000) * 6).astype(np.float32)
    special = [-10.0, 10.0, -9.999999, 9.999999, -10.000001, 10.000001, 0.0, -0.0, 1e-8, -1e-8, 6e-5, 65504.0,
               70000.0, -70000.0, np.inf, -np.inf, 3.4e38, -3.4e38, 1e-45, 2.9802322e-08]
    g[:len(special)] = special
    g[len(special):len(special) + 2000] = rng.uniform(-11, 11, 2000).astype(np.float32)
    u = rng.standard_normal(g.size).astype(np.float32)
    u[5] = np.inf
    table = mops.gelu_table()
    with np.errstate(over="ignore"):
        ref = mops.gelu_mul(g, u)
    y = np.empty_like(g)
    lib.ub_gelu_table_mul(ffi.from_buffer("float[]", table), ffi.from_buffer("float[]", g),
                          ffi.from_buffer("float[]", u), ffi.from_buffer("float[]", y), g.size)
    assert np.array_equal(y, ref, equal_nan=True)
    assert np.array_equal(y.view(np.uint32)[~np.isnan(ref)], ref.view(np.uint32)[~np.isnan(ref)])
    gn = np.array([np.nan, -np.nan, 1.0], np.float32)   # NaN in, NaN out (the payload is not specified)
    yn = np.empty(3, np.float32)
    lib.ub_gelu_table_mul(ffi.from_buffer("float[]", table), ffi.from_buffer("float[]", gn),
                          ffi.from_buffer("float[]", np.ones(3, np.float32)), ffi.from_buffer("float[]", yn), 3)
    assert np.isnan(yn[:2]).all() and yn[2] == mops.gelu_mul(gn[2:], np.ones(1, np.float32))[0]


# ---- several matmuls of one input -------------------------------------------------------------------------
@pytest.mark.parametrize("types", [(T.Q5_0, T.Q5_0, T.Q8_0), (T.Q5_0, T.Q5_0), (T.Q4_K, T.Q6_K, T.Q8_0, T.F16),
                                   (T.Q4_0, T.Q4_1, T.Q5_1, T.BF16), (T.F32,)], ids=lambda ts: "-".join(t.name for t in ts))
def test_matmul_multi_bitwise_separate(types, backend):
    rng = np.random.default_rng(sum(int(t) for t in types))
    k = 512
    ws = [mm.QWeight(int(t), r, k, random_weight(t, r, k, rng)) for t, r in zip(types, (301, 37, 64, 5))]
    for n in (1, 3, 7):
        x = rng.standard_normal((n, k)).astype(np.float32)
        x[0, 7] = 30.0
        for nt in (1, 2):
            got = mm.matmul_multi(x, ws, n_threads=nt)
            for w, y in zip(ws, got):
                assert np.array_equal(y, mm.matmul(x, w, n_threads=1)), (w, n, nt)


def test_matmul_multi_bad_input():
    rng = np.random.default_rng(0)
    a = mm.QWeight(int(T.Q8_0), 4, 64, random_weight(T.Q8_0, 4, 64, rng))
    b = mm.QWeight(int(T.Q8_0), 4, 96, random_weight(T.Q8_0, 4, 96, rng))
    x = np.zeros((2, 64), np.float32)
    with pytest.raises(ValueError, match=r"ws\[1\] has n_cols=96"):
        mm.matmul_multi(x, [a, b])
    with pytest.raises(ValueError, match="1 to 4 weights"):
        mm.matmul_multi(x, [a] * 5)
    with pytest.raises(ValueError, match=r"ws\[0\] must be a QWeight"):
        mm.matmul_multi(x, ["w"])
    with pytest.raises(ValueError, match=r"shape \[n, 64\]"):
        mm.matmul_multi(np.zeros((2, 65), np.float32), [a])
    assert [y.shape for y in mm.matmul_multi(np.zeros((0, 64), np.float32), [a, a])] == [(0, 4), (0, 4)]


# ---- the fused forward against the reference path ---------------------------------------------------------
@pytest.fixture(scope="module")
def tiny():
    return ubatch.models.tiny_llama()


TINY_CONFIGS = [dict(n_ubatch=512, kv_unified=False, n_threads=2),
                dict(n_ubatch=7, kv_unified=True, n_threads=1, chunks=(5,)),
                dict(n_ubatch=1, kv_unified=False, n_threads=2, type_kv="f16"),
                dict(n_ubatch=3, kv_unified=True, n_threads=2, type_kv="f16", chunks=(2, 9))]


@pytest.mark.parametrize("cfg", TINY_CONFIGS, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_fused_tiny_bitwise_reference(tiny, cfg, backend):
    target = others_for(tiny.n_vocab, [13], seed=4)[0]
    others = others_for(tiny.n_vocab, [3, 5, 2, 7])
    a, b = _both(lambda: run_target(tiny, target, others=others, n_greedy=3, **cfg))
    for x, y in zip(a, b):
        assert np.array_equal(x, y)


def test_fused_tiny_embeddings_and_pooling_bitwise(tiny):
    """All rows kept (pooled embeddings) and a batch whose output rows are not the first ones."""
    def run(pooling):
        ctx = ubatch.Context(tiny, n_ctx=64, n_batch=32, n_ubatch=32, n_seq_max=2, embeddings=True, pooling=pooling)
        toks = [5, 9, 11, 3, 7, 8, 2]
        ctx.decode(Batch.from_arrays(tokens=toks, pos=[0, 1, 2, 3, 0, 1, 2], seq_ids=[0, 0, 0, 0, 1, 1, 1],
                                     output=[0, 1, 0, 1, 0, 0, 1]))
        if pooling == "none":
            return [ctx.get_embeddings_ith(i).copy() for i in (1, 3, 6)] + [ctx.get_logits_ith(3).copy()]
        return [ctx.get_embeddings_seq(s).copy() for s in (0, 1)]
    for pooling in ("none", "mean", "last"):
        a, b = _both(lambda: run(pooling))
        for x, y in zip(a, b):
            assert np.array_equal(x, y), pooling


def test_fused_is_the_default_and_can_be_turned_off(tiny, monkeypatch):
    assert fused.enabled(tiny)
    monkeypatch.setenv("UBATCH_FUSED", "0")
    assert not fused.enabled(tiny)
    fused.set_enabled(True)
    try:
        assert fused.enabled(tiny)
    finally:
        fused.set_enabled(None)


def test_fused_layer_errors_name_the_culprit(tiny):
    L = fused.layers(tiny)[0]
    bad = ffi.new("ub_layer *", L[0])
    bad.wq.n_rows = L.wq.n_rows + 1
    x = np.zeros((1, tiny.n_embd), np.float32)
    pos = np.zeros((1, 1), np.int32)
    kv = ffi.new("ub_layer_kv *")
    with pytest.raises(ValueError, match="kv: missing buffer"):
        fused.layer_forward(L, kv, x, pos, None, 1)
    k = np.zeros((1, 4, tiny.n_head_kv, tiny.head_dim), np.float32)
    v = np.zeros_like(k)
    dst = np.array([9], np.int64)
    rs, off, cells = np.zeros(1, np.int32), np.array([0, 1], np.int32), np.array([0], np.int32)
    keepalive = [ffi.from_buffer("uint8_t[]", k), ffi.from_buffer("uint8_t[]", v), ffi.from_buffer("int64_t[]", dst),
                 ffi.from_buffer("int32_t[]", rs), ffi.from_buffer("int32_t[]", off), ffi.from_buffer("int32_t[]", cells)]
    kv.k, kv.v, kv.dst, kv.row_stream, kv.off, kv.cells = keepalive
    kv.k_type = kv.v_type = lib.UB_T_F32
    kv.n_stream, kv.kv_size = 1, 4
    with pytest.raises(ValueError, match=r"wq must map"):
        fused.layer_forward(bad, kv, x, pos, None, 1)
    with pytest.raises(ValueError, match=r"kv dst\[0\] = 9 out of range \[0, 4\)"):
        fused.layer_forward(L, kv, x, pos, None, 1)
    dst[0] = 2
    with pytest.raises(ValueError, match=r"n_keep = 2 out of \[0, 1\]"):
        fused.layer_forward(L, kv, x, pos, np.array([0, 0], np.int32), 1)
    with pytest.raises(ValueError, match=r"keep must be strictly ascending rows of \[0, 1\); keep\[0\] = -1"):
        fused.layer_forward(L, kv, x, pos, np.array([-1], np.int32), 1)
    cells[0] = 7
    with pytest.raises(ValueError, match="attention: invalid visible-cell lists"):
        fused.layer_forward(L, kv, x, pos, None, 1)
    cells[0] = 2
    x[:] = np.random.default_rng(1).standard_normal(x.shape)
    fused.layer_forward(L, kv, x, pos, None, 1)     # a valid call
    assert np.isfinite(x).all() and np.abs(k[0, 2]).sum() > 0
    with pytest.raises(ValueError, match="x rows have"):
        fused.layer_forward(L, kv, np.zeros((1, 3), np.float32), pos, None, 1)
    with pytest.raises(ValueError, match="pos must be"):
        fused.layer_forward(L, kv, x, np.zeros((1, 2), np.int32), None, 1)


@pytest.mark.realmodel
@pytest.mark.parametrize("name", ["qwen2.5-0.5b", "gemma3-270m"])
def test_fused_real_models_bitwise_reference(name):
    from ubatch.model import fetch
    from ubatch.model.model import Model
    m = Model.from_gguf(fetch.path(name))
    target = others_for(m.n_vocab, [19], seed=6)[0]
    others = others_for(m.n_vocab, [4, 9, 2])
    for cfg in (dict(n_ubatch=512, kv_unified=False, n_threads=2),
                dict(n_ubatch=5, kv_unified=True, n_threads=1, type_kv="f16", chunks=(7,))):
        a, b = _both(lambda: run_target(m, target, others=others, n_greedy=2, n_ctx=256, **cfg))
        for x, y in zip(a, b):
            assert np.array_equal(x, y)
