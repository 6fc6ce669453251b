"""gemma2, qwen2moe, qwen3moe, olmoe, granitemoe and llama with experts (Mixtral) on tiny random-weight GGUFs
(tests/model/tiny_arch.py, written from fixed seeds): agreement with llama.cpp's recorded logits (tests/data/arch, made by tests/model/record_arch.py), batch invariance
bitwise (MoE included: the same prompt with other companions, n_ubatch, thread counts, KV layouts, chunks),
the fused C layer against the Python reference path, the MoE block (csrc/compute/moe.c) against a numpy
reference and row by row, and the load-time errors naming the arch / hparam / tensor.

Agreement rule (the realmodel tests' rule on these models): tol = max(llama.cpp's own spread, the decode
vectors' floor: 1e-4 for the f32 models, 5e-3 for the q8_0 ones) where the spread is the largest per-row
max |Δlogit| between two of llama.cpp's recorded configurations (n_ubatch 512 / 3 / 1, 2 / 1 threads, per-seq
/ unified KV); every row's max |Δlogit| against llama.cpp's first configuration must be ≤ tol; argmax equal
on every row whose llama.cpp top-1/top-2 margin is ≥ M = max(2 tol, the largest motion of that margin
between llama.cpp's configurations) in every configuration."""
from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

import gguf
import ubatch
from ubatch import Batch
from ubatch.model import fused
from ubatch.model import moe as moe_mod
from ubatch.model.gguf_file import GGUFError
from ubatch.model.model import Model

import arch_scenario as S
import tiny_arch
from invariance_driver import others_for, run_target

import suite_paths  # noqa: E402
DATA = os.path.join(suite_paths.DATA, "arch")
FLOOR = {"f32": 1e-4, "q8_0": 5e-3}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_arch")
    return {name: tiny_arch.write(name, d / f"{name}.gguf") for name in tiny_arch.SPECS}


def _recording(name):
    with open(os.path.join(DATA, name + ".json")) as f:
        doc = json.load(f)
    return doc, np.load(os.path.join(DATA, name + ".npz"))


# ---- agreement with llama.cpp -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(tiny_arch.SPECS))
def test_agrees_with_llama_cpp(files, name):
    doc, z = _recording(name)
    assert tiny_arch.sha256(files[name]) == doc["sha256"], "the tiny model is not the one llama.cpp was recorded on"
    assert doc["scenario"]["steps"] == [[list(r) for r in st] for st in S.steps()]
    ref = z["logits"]
    tags = [c["tag"] for c in doc["configs"]]
    tol = max(doc["spread"], FLOOR[tiny_arch.SPECS[name][1]])
    margins, motion = S.margins_motion(z, tags)   # motion: of the first configuration's top-two margin
    M = max(2 * tol, motion)
    clear = (margins >= M).all(axis=0)
    m = Model.from_gguf(files[name])
    for cfg in (S.CONFIGS[0], S.CONFIGS[2]):
        ub = S.replay(m, cfg)
        d = np.abs(ub - ref).max(axis=1)
        assert d.max() <= tol, f"{name} {cfg['tag']}: row {int(d.argmax())} off by {d.max():.3g} > {tol:.3g}"
        assert np.array_equal(ub.argmax(axis=1)[clear], ref.argmax(axis=1)[clear])
    assert clear.mean() > 0.8, f"only {clear.sum()} of {clear.size} rows are clear: the test would not bite"


# ---- batch invariance, bitwise --------------------------------------------------------------------------------
INV = [dict(others=0, n_ubatch=512, kv_unified=False, n_threads=2, chunks=()),
       dict(others=7, n_ubatch=7, kv_unified=True, n_threads=1, chunks=(3, 11)),
       dict(others=5, n_ubatch=1, kv_unified=False, n_threads=2, chunks=()),
       dict(others=3, n_ubatch=512, kv_unified=False, n_threads=1, chunks=(9,), type_kv="f16")]


@pytest.mark.parametrize("name", ["gemma2-q8_0", "qwen2moe-q8_0", "qwen3moe-f32", "qwen3moe-q8_0", "mixtral-q8_0",
                                  "olmoe-q8_0", "granitemoe-q8_0"])
def test_batch_invariance_bitwise(files, name):
    m = Model.from_gguf(files[name])
    target = others_for(m.n_vocab, [17], seed=5)[0]
    runs = {}
    for i, c in enumerate(INV):
        kvt = c.get("type_kv", "f32")
        others = others_for(m.n_vocab, [3 + 4 * j for j in range(c["others"])], seed=10 + i)
        got = run_target(m, target, others=others, n_ubatch=c["n_ubatch"], kv_unified=c["kv_unified"],
                         n_threads=c["n_threads"], chunks=c["chunks"], n_greedy=3, type_kv=kvt, n_ctx=512)
        runs.setdefault(kvt, []).append(got)
    for kvt, rs in runs.items():
        for r in rs[1:]:
            for a, b in zip(rs[0], r):
                assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), f"{name} {kvt}"


@pytest.mark.parametrize("name", ["gemma2-f32", "qwen2moe-q8_0", "qwen3moe-q8_0", "mixtral-q8_0", "olmoe-f32",
                                  "granitemoe-q8_0"])
def test_fused_equals_reference_path(files, name):
    m = Model.from_gguf(files[name])
    target = others_for(m.n_vocab, [13], seed=2)[0]
    others = others_for(m.n_vocab, [4, 9, 6], seed=3)
    out = []
    for on in (True, False):
        fused.set_enabled(on)
        try:
            out.append(run_target(m, target, others=others, n_ubatch=5, n_greedy=2, n_ctx=256))
        finally:
            fused.set_enabled(None)
    for a, b in zip(*out):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


# ---- the MoE block ----------------------------------------------------------------------------------------------
def _moe_layer(files, name):
    m = Model.from_gguf(files[name])
    return m, m.weights.layers[1].moe


def _np_moe(m, mw, h):
    """float64 numpy MoE of an f32 model: softmax router, top-k, norm, SwiGLU experts, shared expert."""
    hp, mp = m.hparams, m.hparams.moe
    W = lambda w: np.asarray(w.data).view(np.float32).reshape(w.n_rows, w.n_cols).astype(np.float64)  # noqa: E731
    x = h.astype(np.float64)
    lg = x @ W(mw.gate_inp).T
    p = np.exp(lg - lg.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    sel = np.argsort(-p, axis=1, kind="stable")[:, :mp.n_expert_used]
    w = np.take_along_axis(p, sel, axis=1)
    if mp.norm_w:
        w = w / w.sum(axis=1, keepdims=True)
    F, E = mp.n_ff_exp, hp.n_embd
    G, U, D = W(mw.gate_exps), W(mw.up_exps), W(mw.down_exps)
    out = np.zeros_like(x)
    silu = lambda a: a / (1 + np.exp(-a))  # noqa: E731
    for i in range(x.shape[0]):
        for s, e in enumerate(sel[i]):
            a = silu(x[i] @ G[e * F:(e + 1) * F].T) * (x[i] @ U[e * F:(e + 1) * F].T)
            out[i] += w[i, s] * (a @ D[e * E:(e + 1) * E].T)
    if mp.n_ff_shexp:
        gate = 1 / (1 + np.exp(-(x @ W(mw.gate_inp_shexp).T))) if mp.shexp_gated else 1.0
        a = silu(x @ W(mw.gate_shexp).T) * (x @ W(mw.up_shexp).T)
        out += gate * (a @ W(mw.down_shexp).T)
    return out, sel, w


@pytest.mark.parametrize("name", ["qwen2moe-f32", "qwen3moe-f32", "mixtral-f32", "olmoe-f32", "granitemoe-f32"])
def test_moe_block_against_numpy(files, name):
    m, mw = _moe_layer(files, name)
    h = np.random.default_rng(4).standard_normal((40, m.n_embd)).astype(np.float32)
    y, sel, w = moe_mod.ffn(mw, m.hparams, h, 2, routing=True)
    ry, rsel, rw = _np_moe(m, mw, h)
    assert np.array_equal(sel, rsel)
    assert np.abs(w - rw).max() < 1e-6
    assert np.abs(y - ry).max() < 1e-4 * max(1.0, np.abs(ry).max())
    assert len(np.unique(sel)) == m.hparams.moe.n_expert    # every expert is used by some row
    if m.hparams.moe.norm_w:
        assert np.allclose(w.sum(axis=1), 1.0, atol=1e-6)


@pytest.mark.parametrize("name", ["qwen2moe-q8_0", "qwen3moe-q8_0"])
def test_moe_rows_independent_of_grouping(files, name):
    """Each row alone, and among 1..63 other rows in every order, with 1 and 2 threads: bitwise the same."""
    m, mw = _moe_layer(files, name)
    rng = np.random.default_rng(9)
    h = rng.standard_normal((64, m.n_embd)).astype(np.float32)
    alone = np.stack([moe_mod.ffn(mw, m.hparams, h[i:i + 1], 1)[0] for i in range(h.shape[0])])
    for nt in (1, 2):
        for perm in (np.arange(64), rng.permutation(64), rng.permutation(64)[:23]):
            y = moe_mod.ffn(mw, m.hparams, h[perm], nt)
            assert np.array_equal(y.view(np.uint32), alone[perm].view(np.uint32))
    # the same row batched with rows that all chose its experts (copies of itself, slightly moved)
    sel = moe_mod.ffn(mw, m.hparams, h[:1], 1, routing=True)[1]
    twins = h[:1] + 1e-3 * rng.standard_normal((30, m.n_embd)).astype(np.float32)
    both = np.concatenate([twins, h[:1]])
    y, s2, _ = moe_mod.ffn(mw, m.hparams, both, 2, routing=True)
    assert (s2 == sel).all(axis=1).sum() > 20
    assert np.array_equal(y[-1].view(np.uint32), alone[0].view(np.uint32))


def test_moe_ffn_bad_input(files):
    m, mw = _moe_layer(files, "qwen3moe-f32")
    with pytest.raises(ValueError, match=r"h must be float32\[n, 64\]"):
        moe_mod.ffn(mw, m.hparams, np.zeros((2, m.n_embd + 1), np.float32))
    with pytest.raises(ValueError, match="n_threads"):
        moe_mod.ffn(mw, m.hparams, np.zeros((2, m.n_embd), np.float32), 0)
    bad = dataclasses.replace(m.hparams, moe=dataclasses.replace(m.hparams.moe, n_expert_used=99))
    with pytest.raises(ValueError, match="n_used 99"):
        moe_mod.ffn(mw, bad, np.zeros((2, m.n_embd), np.float32))
    assert moe_mod.ffn(mw, m.hparams, np.zeros((0, m.n_embd), np.float32)).shape == (0, m.n_embd)


# ---- what is refused ----------------------------------------------------------------------------------------------
def _rewrite(src: str, dst, *, drop=(), set_kv=None, drop_tensors=()):
    """A copy of GGUF src with keys dropped / set and tensors left out (metadata types kept)."""
    r = gguf.GGUFReader(src)
    arch = str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8")
    w = gguf.GGUFWriter(str(dst), arch)
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture" or k in drop or (set_kv and k in set_kv):
            continue
        vt = f.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            w.add_key_value(k, f.contents(), vt, sub_type=f.types[-1])
        else:
            w.add_key_value(k, f.contents(), vt)
    for k, (v, vt) in (set_kv or {}).items():
        w.add_key_value(k, v, vt)
    for t in r.tensors:
        if t.name in drop_tensors:
            continue
        if t.tensor_type == gguf.GGMLQuantizationType.F32:
            w.add_tensor(t.name, np.asarray(t.data).reshape(list(reversed([int(x) for x in t.shape]))))
        else:   # the reader's data is in byte shape, as add_tensor takes it
            w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(dst)


U32 = gguf.GGUFValueType.UINT32


@pytest.mark.parametrize("change,match", [
    (dict(drop=("qwen3moe.expert_count",)), r"n_expert must be > 0 for QWEN3MOE \(qwen3moe.expert_count\)"),
    (dict(set_kv={"qwen3moe.expert_used_count": (9, U32)}), "expert_used_count = 9 exceeds qwen3moe.expert_count = 8"),
    (dict(set_kv={"qwen3moe.expert_group_count": (2, U32)}), "expert_group_count = 2: expert group selection"),
    (dict(drop_tensors=("blk.1.ffn_up_exps.weight",)), "missing tensor 'blk.1.ffn_up_exps.weight'"),
    (dict(drop_tensors=("blk.0.attn_q_norm.weight",)), "missing tensor 'blk.0.attn_q_norm.weight'"),
    (dict(set_kv={"qwen3moe.expert_feed_forward_length": (16, U32)}),
     r"tensor 'blk.0.ffn_gate_exps.weight' has wrong shape; expected \{64, 16, 8\}"),
])
def test_qwen3moe_refusals(files, tmp_path, change, match):
    p = _rewrite(files["qwen3moe-f32"], tmp_path / "bad.gguf", **change)
    with pytest.raises(GGUFError, match=match):
        Model.from_gguf(p)


def test_expert_count_on_a_dense_arch_is_refused(tmp_path):
    import gguf_util
    kv = gguf_util.standard_kv("qwen2")
    kv["qwen2.expert_count"] = (4, U32)
    p = gguf_util.write(tmp_path / "qwen2_moe.gguf", kv, arch="qwen2", n_vocab=len(gguf_util.vocab_tokens()))
    with pytest.raises(GGUFError, match="arch 'qwen2' has no mixture-of-experts layers"):
        Model.from_gguf(p)
    # llama reads experts (Mixtral): a file with experts but no dense FFN tensors is checked as one
    kv = gguf_util.standard_kv("llama")
    kv["llama.expert_count"] = (4, U32)
    p = gguf_util.write(tmp_path / "llama_moe.gguf", kv, n_vocab=len(gguf_util.vocab_tokens()))
    with pytest.raises(GGUFError, match=r"n_expert_used must be > 0 for LLAMA \(llama.expert_used_count\)"):
        Model.from_gguf(p)
    kv["llama.expert_used_count"] = (2, U32)
    p = gguf_util.write(tmp_path / "llama_moe2.gguf", kv, n_vocab=len(gguf_util.vocab_tokens()))
    with pytest.raises(GGUFError, match="missing tensor 'blk.0.ffn_gate_inp.weight'"):
        Model.from_gguf(p)


def test_hparams_read(files):
    g = Model.from_gguf(files["gemma2-f32"]).hparams
    assert (g.n_swa, g.swa_layers, g.attn_logit_softcap, g.final_logit_softcap) == (6, (True, False, True, False),
                                                                                      3.0, 12.0)
    assert g.rope_params(0) == g.rope_params(1) and g.kq_scale == 1.0 and g.q_scale == 0.25
    q2 = Model.from_gguf(files["qwen2moe-f32"]).hparams.moe
    assert (q2.n_expert, q2.n_expert_used, q2.n_ff_exp, q2.n_ff_shexp, q2.norm_w) == (8, 2, 32, 64, False)
    q3 = Model.from_gguf(files["qwen3moe-f32"])
    assert (q3.hparams.moe.n_expert_used, q3.hparams.moe.norm_w, q3.head_dim, q3.hparams.moe.n_ff_shexp) == \
        (3, True, 24, 0)
    mx = Model.from_gguf(files["mixtral-f32"])
    assert (mx.arch, mx.hparams.moe.n_expert, mx.hparams.moe.n_expert_used, mx.hparams.moe.n_ff_exp,
            mx.hparams.moe.norm_w, mx.weights.layers[0].w_gate) == ("llama", 4, 2, 64, True, None)
    ol = Model.from_gguf(files["olmoe-f32"])
    assert (ol.hparams.moe.n_expert_used, ol.hparams.moe.norm_w, ol.weights.layers[0].q_norm.shape) == (2, False, (64,))
    gm = Model.from_gguf(files["granitemoe-f32"]).hparams
    assert (gm.moe.n_ff_shexp, gm.moe.shexp_gated, gm.moe.norm_w, gm.residual_scale, gm.logit_scale) == \
        (32, False, True, np.float32(0.6), np.float32(3.0))
    from ubatch.model.registry import SUPPORTED_ARCHS
    assert {"gemma2", "qwen2moe", "qwen3moe", "olmoe", "granitemoe"} <= set(SUPPORTED_ARCHS)


F32 = gguf.GGUFValueType.FLOAT32
STR = gguf.GGUFValueType.STRING
HOSTILE = [
    ("gemma2-f32", "gemma2.attention.sliding_window", [(0, U32), (2**31, U32), ("x", STR)]),
    ("gemma2-f32", "gemma2.attn_logit_softcapping", [(0.0, F32), (-1.0, F32), (float("nan"), F32), (1e-30, F32)]),
    ("gemma2-f32", "gemma2.final_logit_softcapping", [(0.0, F32), (float("inf"), F32)]),
    ("gemma2-f32", "gemma2.attention.sliding_window_pattern", [(0, U32), (1, U32), (7, U32)]),
    ("qwen2moe-q8_0", "qwen2moe.expert_count", [(0, U32), (1, U32), (2000, U32), (2**32 - 1, U32), (3.0, F32)]),
    ("qwen2moe-q8_0", "qwen2moe.expert_used_count", [(0, U32), (8, U32), (1, U32), (2**32 - 1, U32)]),
    ("qwen2moe-q8_0", "qwen2moe.expert_feed_forward_length", [(0, U32), (64, U32), (2**31, U32)]),
    ("qwen2moe-q8_0", "qwen2moe.expert_shared_feed_forward_length", [(0, U32), (32, U32), (2**31, U32)]),
    ("qwen3moe-q8_0", "qwen3moe.expert_gating_func", [(2, U32)]),
    ("qwen3moe-q8_0", "qwen3moe.swiglu_clamp_exp", [(7.0, F32), ("x", STR), (0.0, F32)]),
    ("qwen3moe-q8_0", "qwen3moe.expert_group_count", [(2, U32), ("x", STR), (1, U32)]),
    ("granitemoe-q8_0", "granitemoe.expert_shared_feed_forward_length", [(0, U32), (64, U32)]),
    ("granitemoe-q8_0", "granitemoe.logit_scale", [(0.0, F32), (float("nan"), F32)]),
    ("mixtral-q8_0", "llama.expert_count", [(0, U32), (3, U32), ("x", STR)]),
]


@pytest.mark.parametrize("name,key,values", HOSTILE, ids=[h[1] for h in HOSTILE])
def test_hostile_hparams_never_crash(files, tmp_path, name, key, values):
    """Each bad value either loads a model that decodes (llama.cpp would too) or raises GGUFError naming the
    key or the tensor it contradicts; never a crash or another exception."""
    for i, (v, vt) in enumerate(values):
        p = _rewrite(files[name], tmp_path / f"h{i}.gguf", set_kv={key: (v, vt)})
        try:
            m = Model.from_gguf(p)
        except GGUFError as e:
            assert key in str(e) or "tensor 'blk." in str(e), str(e)
            continue
        ctx = ubatch.Context(m, n_ctx=64, n_ubatch=8, n_threads=1)
        assert ctx.decode(Batch.from_arrays(tokens=list(range(1, 12)), pos=list(range(11)),
                                            seq_ids=[[0]] * 11, output=[0] * 10 + [1])) == 0
        assert np.isfinite(ctx.get_logits_ith(10)).all()
