"""The float64 reference forward (ubatch.testing.reference) against llama.cpp's recordings of the tiny llama
models (tests/data/decode, recorded with llama.cpp 0c1e570; see tests/data/decode/README.md), and its
activation formats against ubatch's C quantisers. Fast: the tiny models have 2-4 layers.

What "within float32 rounding" means here: the f32 model has no format rounding at all, so the reference
must match llama.cpp to float32 accumulation error (measured 9.6e-7). The f16 model rounds every matmul
activation to f16, where a last-bit difference of the float32 input flips an f16 rounding and moves the
logits by ~1e-3: there the bound is the reference's own spread when its rounding inputs get float32-sized
noise (forward(noise=...)), and on the first rows (before any flip) the emulation must match to 1e-5
where the exact reference is 1e-3 off."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from ubatch.compute import matmul as mm
from ubatch.testing.reference import RefModel, actquant, forward

from suite_paths import DATA, ROOT  # noqa: E402
DEC = os.path.join(DATA, "decode")
MODELS = {"tiny-llama-f32.gguf": os.path.join(ROOT, "ubatch", "models", "tiny-llama-f32.gguf"),
          "tiny-llama-f16.gguf": os.path.join(DATA, "models", "tiny-llama-f16.gguf")}
_REF = {}


def _model(name: str) -> RefModel:
    if name not in _REF:
        _REF[name] = RefModel(MODELS[name])
    return _REF[name]


def _rows(scen: str):
    """(model name, K/V type, [(seq tokens up to the row, llama.cpp float32 row)]) of a recorded scenario."""
    with open(os.path.join(DEC, scen + ".json")) as f:
        doc = json.load(f)
    z = np.load(os.path.join(DEC, scen + ".npz"))
    sc = doc["scenario"]
    hist, out = {}, []
    for k, st in enumerate(sc["steps"]):
        if st["op"] != "decode":
            continue
        for t, p, s in zip(st["tokens"], st["pos"], st["seq_ids"]):
            for q in s:
                hist.setdefault(q, {})[p] = t
        if f"s{k}_logits" not in z.files:
            continue
        for r, i in enumerate(z[f"s{k}_rows"]):
            seq, pos = st["seq_ids"][i][0], st["pos"][i]
            out.append(([hist[seq][j] for j in range(pos + 1)], z[f"s{k}_logits"][r]))
    return sc["model"], sc["ctx"]["type_k"], out


def _max_err(scen: str, mode: str, kv=None):
    model, type_k, rows = _rows(scen)
    m = _model(model)
    kv = kv or type_k
    errs, cache = [], {}
    for toks, row in rows:
        key = tuple(toks)
        full = next((c for c in cache if c[:len(key)] == key), None)
        if full is None:
            longest = max((t for t, _ in rows if tuple(t[:len(key)]) == key), key=len)
            full = tuple(longest)
            cache[full] = forward(m, full, mode=mode, kv=kv)
        errs.append(float(np.abs(cache[full][len(key) - 1] - row).max()))
    return np.asarray(errs)


@pytest.mark.parametrize("scen", ["single_seq__u256", "single_seq__u1", "ragged8__u3_nonu", "parallel4__u256"])
@pytest.mark.parametrize("mode", ["exact", "emulate"])
def test_f32_model_matches_llama_cpp_to_float32_rounding(scen, mode):
    e = _max_err(scen, mode)
    print(f"{scen} {mode}: max |llama.cpp - ref| {e.max():.2e} over {e.size} rows")
    assert e.max() < 3e-6


def test_f16_kv_emulated():
    """f16 K/V (no flash attention): K, V stored as f16, Q and the probabilities rounded to f16."""
    e16, e32 = _max_err("single_seq__u256_kvf16", "emulate"), _max_err("single_seq__u256_kvf16", "emulate", kv="f32")
    print(f"f16 K/V: emulated {e16.max():.2e}, as if f32 {e32.max():.2e}")
    assert e16.max() < 2e-4 < e32.max()


def test_f16_model_activations_emulated():
    """F16 weights: the activations are rounded to f16. The first rows (no flipped rounding yet) match to
    1e-5 only with the emulation; every row lies within twice the reference's own float32-noise spread."""
    scen = "single_seq__f16model_u256"
    em, ex = _max_err(scen, "emulate"), _max_err(scen, "exact")
    assert em[:3].max() < 1e-5 and ex[:3].min() > 5e-4, (em[:3], ex[:3])
    _, _, rows = _rows(scen)
    toks = rows[-1][0]
    m = _model("tiny-llama-f16.gguf")
    base = forward(m, toks, mode="emulate")
    noise = max(float(np.abs(forward(m, toks, mode="emulate", noise=(s, 2.0 ** -24)) - base).max())
                for s in range(1, 4))
    print(f"f16 model: emulated max {em.max():.2e} (rows 0-2 {em[:3].max():.1e}), exact {ex.max():.2e}, "
          f"reference noise spread {noise:.2e}")
    assert em.max() <= 2 * noise + 1e-5


@pytest.mark.parametrize("wtype", [mm.Q8_0, mm.Q4_K, mm.F16])
def test_activation_formats_match_ubatch_quantisers(wtype):
    """actquant's values (float64 numpy, written from docs/llama-cpp-behaviours.md) equal the dequantised bytes of ubatch's C
    quantiser on float32 rows, including ones with outliers and a zero block."""
    rng = np.random.default_rng(7)
    k = 512
    x = rng.standard_normal((6, k)).astype(np.float32)
    x[1, 3] = 40.0
    x[2, 256:] = 0.0
    x[3, :32] = 0.0
    x[4] *= 1e-3
    kind = actquant.act_kind(wtype)
    got = actquant.quantize(x.astype(np.float64), kind)
    for i in range(x.shape[0]):
        b = mm.quantize_activations(x[i], wtype)
        if kind == "q8_0":
            blk = b.reshape(-1, 36)
            want = blk[:, 4:].view(np.int8).astype(np.float64) * blk[:, :4].copy().view(np.float32).astype(np.float64)
        elif kind == "q8_k":
            blk = b.reshape(-1, 4 + 256 + 32)
            want = blk[:, 4:260].view(np.int8).astype(np.float64) * blk[:, :4].copy().view(np.float32).astype(np.float64)
        else:
            want = b.view(np.float16).astype(np.float64)
        np.testing.assert_allclose(got[i], want.reshape(-1), rtol=2e-7, atol=0)
