"""Tiny random-weight GGUF models of the gemma2, qwen2moe, qwen3moe, llama-with-experts (Mixtral), olmoe and granitemoe architectures, written with the `gguf`
package from fixed seeds (tests never download a model for these archs).

    write(name, path) -> path     one model of SPECS (name = "<arch>-<type>", e.g. "qwen3moe-q8_0")
    sha256(path) -> str           the file's digest (the recordings name the file they were made on)

Every model carries the small byte-level BPE vocabulary of tests/support/gguf_util.py (260 tokens, what llama.cpp needs
to load it) and the hyperparameter keys llama.cpp reads for its arch. Sizes are chosen so that each feature is
exercised: gemma2 alternates sliding (window 6) and global layers and has soft-caps (attention 3, final 12)
small enough that tanh bends the values; the MoE models have 8 experts (top-2 for qwen2moe with its shared
expert, top-3 for qwen3moe with the routing weights normalised), qwen3moe has key_length 24 (n_head * 24 !=
n_embd) and q/k norms; "mixtral" is GGUF arch llama with 4 experts of width n_ff, top-2; "olmoe" has whole-row q/k norms and 8 experts
of width n_ff, top-2, not renormalised; "granitemoe" has granite's four multipliers and an ungated shared expert. Weight types: "f32" (every tensor f32: the graph compared without format rounding)
and "q8_0" (matrices Q8_0 as llama-quantize leaves them, router / norms / shared-expert gate f32)."""
from __future__ import annotations

import hashlib
import os
import sys
from typing import Dict, List, Tuple

import numpy as np

import gguf

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support"))  # gguf_util
import gguf_util  # noqa: E402

VT = gguf.GGUFValueType
Q = gguf.GGMLQuantizationType
E, NH, NKV = 64, 4, 2

ARCHS = ("gemma2", "qwen2moe", "qwen3moe", "mixtral", "olmoe", "granitemoe")   # mixtral: GGUF arch "llama" with experts
TYPES = ("f32", "q8_0")
SPECS = {f"{a}-{t}": (a, t) for a in ARCHS for t in TYPES}
SEEDS = {"gemma2": 2002, "qwen2moe": 2202, "qwen3moe": 3303, "mixtral": 8807, "olmoe": 7707, "granitemoe": 6606}
GGUF_ARCH = {"mixtral": "llama"}

GEMMA2 = dict(n_embd=E, n_head=NH, n_head_kv=NKV, n_layer=4, n_ff=128, head_dim=16, n_swa=6, attn_softcap=3.0, final_softcap=12.0)
QWEN2MOE = dict(n_embd=E, n_head=NH, n_head_kv=NKV, n_layer=3, n_ff=96, head_dim=16, n_expert=8, n_used=2, n_ff_exp=32, n_ff_shexp=64)
QWEN3MOE = dict(n_embd=E, n_head=NH, n_head_kv=NKV, n_layer=3, n_ff=96, head_dim=24, n_expert=8, n_used=3, n_ff_exp=32)
OLMOE = dict(n_embd=E, n_head=NH, n_head_kv=NH, n_layer=3, n_ff=64, head_dim=16, n_expert=8, n_used=2, n_ff_exp=64)
GRANITEMOE = dict(n_embd=E, n_head=NH, n_head_kv=NKV, n_layer=3, n_ff=64, head_dim=16, n_expert=8, n_used=2,
                  n_ff_exp=64, n_ff_shexp=32, logit_scale=3.0, residual_scale=0.6, embedding_scale=4.0,
                  attention_scale=0.2)
MIXTRAL = dict(n_embd=E, n_head=NH, n_head_kv=NKV, n_layer=3, n_ff=64, head_dim=16, n_expert=4, n_used=2, n_ff_exp=64)


def _tokenizer_kv() -> Dict[str, tuple]:
    kv = gguf_util.standard_kv("x")
    return {k: v for k, v in kv.items() if k.startswith("tokenizer.")}


def _base_kv(arch: str, c: dict) -> Dict[str, tuple]:
    E, NH, NKV, n_layer, n_ff, head_dim = (c[k] for k in ("n_embd", "n_head", "n_head_kv", "n_layer", "n_ff",
                                                          "head_dim"))
    kv = {f"{arch}.context_length": (256, VT.UINT32), f"{arch}.embedding_length": (E, VT.UINT32),
          f"{arch}.block_count": (n_layer, VT.UINT32), f"{arch}.feed_forward_length": (n_ff, VT.UINT32),
          f"{arch}.attention.head_count": (NH, VT.UINT32), f"{arch}.attention.head_count_kv": (NKV, VT.UINT32),
          f"{arch}.attention.layer_norm_rms_epsilon": (1e-6, VT.FLOAT32),
          f"{arch}.rope.freq_base": (10000.0, VT.FLOAT32), f"{arch}.attention.key_length": (head_dim, VT.UINT32),
          f"{arch}.attention.value_length": (head_dim, VT.UINT32)}
    kv.update(_tokenizer_kv())
    return kv


def _tensors(arch: str, n_vocab: int, over: dict) -> Tuple[Dict[str, tuple], List[Tuple[str, tuple, str]]]:
    """(metadata, [(tensor name, numpy shape [outer..inner], role)]); role: "mat" (matrix, quantisable),
    "exp" (stacked expert matrices, quantisable), "f32" (kept f32: norms, biases, router, shared gate)."""
    c = dict({"gemma2": GEMMA2, "qwen2moe": QWEN2MOE, "qwen3moe": QWEN3MOE, "mixtral": MIXTRAL, "olmoe": OLMOE, "granitemoe": GRANITEMOE}[arch], **over)
    E, NH, NKV = c["n_embd"], c["n_head"], c["n_head_kv"]
    t: List[Tuple[str, tuple, str]] = [("token_embd.weight", (n_vocab, E), "mat"), ("output_norm.weight", (E,), "norm")]
    if arch == "gemma2":
        kv = _base_kv(arch, c)
        kv.update({f"{arch}.attention.sliding_window": (c["n_swa"], VT.UINT32),
                   f"{arch}.attn_logit_softcapping": (c["attn_softcap"], VT.FLOAT32),
                   f"{arch}.final_logit_softcapping": (c["final_softcap"], VT.FLOAT32)})
        hd, F = c["head_dim"], c["n_ff"]
        for i in range(c["n_layer"]):
            p = f"blk.{i}."
            t += [(p + "attn_norm.weight", (E,), "norm"), (p + "attn_q.weight", (NH * hd, E), "mat"),
                  (p + "attn_k.weight", (NKV * hd, E), "mat"), (p + "attn_v.weight", (NKV * hd, E), "mat"),
                  (p + "attn_output.weight", (E, NH * hd), "mat"), (p + "post_attention_norm.weight", (E,), "norm"),
                  (p + "ffn_norm.weight", (E,), "norm"), (p + "ffn_gate.weight", (F, E), "mat"),
                  (p + "ffn_up.weight", (F, E), "mat"), (p + "ffn_down.weight", (E, F), "mat"),
                  (p + "post_ffw_norm.weight", (E,), "norm")]
        return kv, t      # gemma2 has no output.weight: the output is token_embd
    ga = GGUF_ARCH.get(arch, arch)
    kv = _base_kv(ga, c)
    kv.update({f"{ga}.expert_count": (c["n_expert"], VT.UINT32), f"{ga}.expert_used_count": (c["n_used"], VT.UINT32)})
    if arch not in ("mixtral", "olmoe", "granitemoe"):   # else experts of width n_ff (no expert_feed_forward_length)
        kv[f"{ga}.expert_feed_forward_length"] = (c["n_ff_exp"], VT.UINT32)
    if arch == "granitemoe":
        kv.update({f"{ga}.expert_shared_feed_forward_length": (c["n_ff_shexp"], VT.UINT32),
                   f"{ga}.logit_scale": (c["logit_scale"], VT.FLOAT32),
                   f"{ga}.residual_scale": (c["residual_scale"], VT.FLOAT32),
                   f"{ga}.embedding_scale": (c["embedding_scale"], VT.FLOAT32),
                   f"{ga}.attention.scale": (c["attention_scale"], VT.FLOAT32)})
    if arch == "qwen2moe":
        kv[f"{arch}.expert_shared_feed_forward_length"] = (c["n_ff_shexp"], VT.UINT32)
    t.append(("output.weight", (n_vocab, E), "mat"))
    hd, X, Fe = c["head_dim"], c["n_expert"], c["n_ff_exp"]
    for i in range(c["n_layer"]):
        p = f"blk.{i}."
        t += [(p + "attn_norm.weight", (E,), "norm"), (p + "attn_q.weight", (NH * hd, E), "mat"),
              (p + "attn_k.weight", (NKV * hd, E), "mat"), (p + "attn_v.weight", (NKV * hd, E), "mat")]
        if arch == "qwen2moe":
            t += [(p + "attn_q.bias", (NH * hd,), "f32"), (p + "attn_k.bias", (NKV * hd,), "f32"),
                  (p + "attn_v.bias", (NKV * hd,), "f32")]
        elif arch == "qwen3moe":
            t += [(p + "attn_q_norm.weight", (hd,), "norm"), (p + "attn_k_norm.weight", (hd,), "norm")]
        elif arch == "olmoe":      # whole-row norms {n_embd}
            t += [(p + "attn_q_norm.weight", (E,), "norm"), (p + "attn_k_norm.weight", (E,), "norm")]
        t += [(p + "attn_output.weight", (E, NH * hd), "mat"), (p + "ffn_norm.weight", (E,), "norm"),
              (p + "ffn_gate_inp.weight", (X, E), "f32"),
              (p + "ffn_gate_exps.weight", (X, Fe, E), "exp"), (p + "ffn_up_exps.weight", (X, Fe, E), "exp"),
              (p + "ffn_down_exps.weight", (X, E, Fe), "exp")]
        if arch in ("qwen2moe", "granitemoe"):   # granitemoe's shared expert has no gate
            S = c["n_ff_shexp"]
            t += [(p + "ffn_gate_inp_shexp.weight", (E,), "f32")] if arch == "qwen2moe" else []
            t += [(p + "ffn_gate_shexp.weight", (S, E), "mat"), (p + "ffn_up_shexp.weight", (S, E), "mat"),
                  (p + "ffn_down_shexp.weight", (E, S), "mat")]
    return kv, t


def write(name: str, path: "str | os.PathLike", **over) -> str:
    """Writes model `name` (a key of SPECS) to path; the same bytes on every call (fixed seed). over: sizes
    replacing those of the arch's table (n_embd, n_layer, n_expert, ...: bench/bench_moe.py's larger model);
    wtype="q4_0" etc. replaces the matrices' type."""
    arch, wtype = SPECS[name]
    wtype = over.pop("wtype", wtype)
    n_vocab = len(gguf_util.vocab_tokens())
    kv, tensors = _tensors(arch, n_vocab, over)
    rng = np.random.default_rng(SEEDS[arch])
    w = gguf.GGUFWriter(str(path), GGUF_ARCH.get(arch, arch))
    w.add_string("general.name", f"tiny-{name}")
    for key, (val, vt, *sub) in kv.items():
        if vt == VT.ARRAY:
            w.add_key_value(key, val, vt, sub_type=sub[0])
        else:
            w.add_key_value(key, val, vt)
    for tname, shp, role in tensors:
        if role == "norm":
            a = (1.0 + 0.2 * rng.standard_normal(shp)).astype(np.float32)
        elif role == "f32" and len(shp) == 1:
            a = (0.5 * rng.standard_normal(shp)).astype(np.float32)     # biases, shared-expert gate
        else:
            gain = 1.0 if tname == "token_embd.weight" else 1.5
            a = (gain / np.sqrt(shp[-1]) * rng.standard_normal(shp)).astype(np.float32)
        if wtype != "f32" and role in ("mat", "exp"):
            qt = Q[wtype.upper()]
            q = gguf.quants.quantize(a, qt)
            w.add_tensor(tname, q, raw_shape=q.shape, raw_dtype=qt)
        else:
            w.add_tensor(tname, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def sha256(path: "str | os.PathLike") -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


__all__ = ["SPECS", "ARCHS", "TYPES", "write", "sha256", "GEMMA2", "QWEN2MOE", "QWEN3MOE"]
