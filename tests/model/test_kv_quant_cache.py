"""Quantised / bf16 K/V caches (type_k / type_v = q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, bf16; f16 with a quantised
K etc.): batch-invariant bitwise (batch composition, n_ubatch, kv_unified, thread count, chunked prompt),
K-shift and rollback over quantised rows, llama.cpp's refusals (a quantised V without flash attention, a head
dim its block does not divide), close to f32 on a tiny gemma2 with head_dim 32 (SWA + soft-cap)."""
import os

import numpy as np
import pytest

import ubatch
from invariance_driver import others_for, run_target
from ubatch import Batch
import tiny_arch

TARGET = [1, 17, 33, 50, 8, 99, 120, 3, 64, 77, 5, 200, 18, 42, 11, 90, 150, 7, 23]


@pytest.fixture(scope="module")
def m32(tmp_path_factory):
    p = tmp_path_factory.mktemp("qkv") / "gemma2-hd32.gguf"
    tiny_arch.write("gemma2-f32", p, head_dim=32)
    return ubatch.Model.from_gguf(str(p))


def _run(m, tk, tv, **kw):
    return run_target(m, TARGET, type_k=tk, type_v=tv, **kw)


@pytest.mark.parametrize("tk, tv", [("q8_0", "q8_0"), ("bf16", "bf16"), ("q4_0", "q4_1"), ("q5_0", "f16"),
                                    ("f16", "q5_1"), ("q4_1", "q8_0"), ("iq4_nl", "iq4_nl"), ("iq4_nl", "f16"),
                                    ("q8_0", "iq4_nl")])
def test_quantised_kv_bitwise_invariant(m32, tk, tv):
    ref = _run(m32, tk, tv)
    got = _run(m32, tk, tv, others=others_for(m32.n_vocab, [4, 9, 2]), n_ubatch=7, kv_unified=True, n_threads=1,
               chunks=(8,))
    for a, b in zip(ref, got):
        assert np.array_equal(a, b)
    f32 = _run(m32, "f32", "f32")[0]            # the prompt's last logits (greedy steps may part ways)
    err = float(np.abs(ref[0] - f32).max()) / float(f32.max() - f32.min())
    fine = tk in ("q8_0", "bf16", "f16") and tv in ("q8_0", "bf16", "f16")   # 4-bit K and V together: ~0.1
    assert 0 < err < (0.02 if fine else 0.15), err


def test_quantised_kv_shift_and_memory_ops(m32):
    """seq_rm + seq_add (a K-shift of quantised rows) leaves the shifted sequence's logits as llama.cpp's
    dequantise / rotate / requantise does: close to a fresh decode at the shifted positions, and invariant."""
    outs = []
    for n_threads in (1, 2):
        ctx = ubatch.Context(m32, n_ctx=256, type_k="q8_0", type_v="q8_0", n_threads=n_threads)
        toks = TARGET[:12]
        assert ctx.decode(Batch.from_arrays(tokens=toks, pos=list(range(12)), seq_ids=[[0]] * 12,
                                            output=[0] * 12)) == 0
        ctx.memory.seq_rm(0, 2, 5)
        ctx.memory.seq_add(0, 5, -1, -3)
        assert ctx.decode(Batch.from_arrays(tokens=[9], pos=[9], seq_ids=[[0]], output=[1])) == 0
        outs.append(ctx.get_logits_ith(0).copy())
    assert np.array_equal(outs[0], outs[1])
    assert np.isfinite(outs[0]).all()


def test_refusals_name_the_parameter(m32):
    with pytest.raises(ValueError, match="type_v"):
        ubatch.Context(m32, n_ctx=64, type_k="f16", type_v="q8_0", flash_attn=0)
    with pytest.raises(ValueError, match="type_k"):
        ubatch.Context(m32, n_ctx=64, type_k="q7_0")
    with pytest.raises(ValueError, match="type_v"):
        ubatch.Context(m32, n_ctx=64, type_k="f16", type_v="iq4_nl", flash_attn=0)
    with pytest.raises(ValueError, match="type_k"):
        ubatch.Context(ubatch.models.tiny_llama(), n_ctx=64, type_k="q8_0")   # head_dim 16


# ---- agreement with llama.cpp (tests/data/kv_quant, made by tests/model/record_kv_quant.py) -----------------
def _replay(m, cfg, tk, tv):
    import arch_scenario as S
    ctx = ubatch.Context(m, n_ctx=S.N_CTX, n_batch=512, n_ubatch=cfg["n_ubatch"], n_seq_max=S.N_SEQ,
                         kv_unified=cfg["kv_unified"], n_threads=cfg["n_threads"], type_k=tk, type_v=tv)
    out = []
    for st in S.steps():
        b = Batch.from_arrays(tokens=[t for t, _, _ in st], pos=[p for _, p, _ in st],
                              seq_ids=[[s] for *_, s in st], output=[1] * len(st))
        assert ctx.decode(b) == 0
        out += [ctx.get_logits_ith(i).copy() for i in range(len(st))]
    return np.stack(out)


def test_agrees_with_llama_cpp_quantised_kv(m32):
    """Rule: every row's max |Δlogit| against llama.cpp (same type_k / type_v; flash attention where llama.cpp
    needs it) <= tol = max(llama.cpp's own spread over its configurations, 1e-2: the q8_0 models' 5e-3 floor
    doubled for the 4-bit K types); argmax equal on every row."""
    import json
    import arch_scenario as S
    data = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "kv_quant")
    with open(os.path.join(data, "kv_quant.json")) as f:
        doc = json.load(f)
    assert tiny_arch.sha256(m32.path) == doc["sha256"], "not the model llama.cpp was recorded on"
    assert doc["scenario"]["steps"] == [[list(r) for r in st] for st in S.steps()]
    for c in doc["combos"]:
        ref = np.load(os.path.join(data, c["tag"] + ".npz"))["logits"]
        tol = max(c["spread"], 1e-2)
        for cfg in (S.CONFIGS[0], S.CONFIGS[2]):
            ub = _replay(m32, cfg, c["type_k"], c["type_v"])
            d = np.abs(ub - ref).max(axis=1)
            assert d.max() <= tol, f"{c['tag']} {cfg['tag']}: row {int(d.argmax())} off by {d.max():.3g} > {tol:.3g}"
            assert np.array_equal(ub.argmax(axis=1), ref.argmax(axis=1)), c["tag"]


def test_dropin_state_carries_quantised_bytes(m32):
    """Llama(type_k=GGML_TYPE_Q8_0, type_v=GGML_TYPE_Q4_0, flash_attn=True): save_state / load_state into a
    fresh Llama carries the quantised K/V bytes (the next logits equal bitwise)."""
    from ubatch import llama_cpp as L
    kw = dict(n_ctx=128, type_k=L.GGML_TYPE_Q8_0, type_v=L.GGML_TYPE_Q4_0, flash_attn=True, verbose=False,
              logits_all=True)
    a = L.Llama(m32.path, **kw)
    a.eval([1, 5, 9, 33, 70])
    st = a.save_state()
    a.eval([11])
    b = L.Llama(m32.path, **kw)
    b.load_state(st)
    b.eval([11])
    assert np.array_equal(np.asarray(a.scores[a.n_tokens - 1]), np.asarray(b.scores[b.n_tokens - 1]))
    with pytest.raises(ValueError):          # a quantised V without flash attention: llama.cpp fails the context
        L.Llama(m32.path, **{**kw, "flash_attn": False})
