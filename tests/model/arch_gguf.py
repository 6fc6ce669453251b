"""Tiny random-weight GGUF models of every dense architecture variant ubatch reads (docs/models.md), written
with the `gguf` package from fixed seeds: the files llama.cpp's logits were recorded on (tests/model/record_arch_dense.py,
recordings in tests/data/arch_dense/) and that the agreement tests rebuild byte for byte (the recording stores each
file's sha256).

Every model: 64-dim embeddings, 4 heads of 16 (2 KV heads), FFN 96, 2 layers (smollm3: 4, so that layer 3 is a
NoPE layer), Q8_0 matrices (token embeddings included), F32 norms and rope factors, and the small GPT-2 style
BPE vocabulary of tests/support/gguf_util.py (260 tokens) that llama.cpp needs to load a model.

    VARIANTS                          name -> spec (arch + what the variant exercises)
    write(path, name) -> path         the GGUF of one variant
    sha256(path) -> str
"""
from __future__ import annotations

import hashlib
import math
import os
import sys
from typing import Any, Dict

import numpy as np

import gguf

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support"))  # gguf_util
from gguf_util import CHATML, vocab_tokens  # noqa: E402

VT = gguf.GGUFValueType
Q = gguf.GGMLQuantizationType
E, NH, NKV, HD, FF = 64, 4, 2, 16, 96
HQ, HK = NH * HD, NKV * HD

# name -> (arch, n_layer, extra metadata (key suffix -> (value, type)), options)
VARIANTS: Dict[str, Dict[str, Any]] = {
    "llama-none": dict(arch="llama", seed="llama", kv={"rope.scaling.type": ("none", VT.STRING),
                                         "rope.scaling.factor": (4.0, VT.FLOAT32)}),
    "llama-linear": dict(arch="llama", seed="llama", kv={"rope.scaling.type": ("linear", VT.STRING),
                                           "rope.scaling.factor": (4.0, VT.FLOAT32)}),
    "llama-yarn": dict(arch="llama", seed="llama", kv={"rope.scaling.type": ("yarn", VT.STRING),
                                         "rope.scaling.factor": (4.0, VT.FLOAT32),
                                         "rope.scaling.original_context_length": (32, VT.UINT32)}),
    "llama-rope-freqs": dict(arch="llama", seed="llama", rope_freqs=True, kv={"rope.freq_base": (500000.0, VT.FLOAT32)}),
    "llama-longrope": dict(arch="llama", seed="llama", longrope=True,
                           kv={"rope.scaling.type": ("longrope", VT.STRING),
                               "rope.scaling.attn_factor": (1.05, VT.FLOAT32),
                               "rope.scaling.original_context_length": (256, VT.UINT32)}),
    "qwen3": dict(arch="qwen3", qk_norm=True, kv={"rope.freq_base": (1000000.0, VT.FLOAT32)}),
    "phi3": dict(arch="phi3", n_rot=12, longrope=True, fused=True,
                 kv={"rope.scaling.attn_factor": (1.1902380714238083, VT.FLOAT32),
                     "rope.scaling.original_context_length": (256, VT.UINT32),
                     "context_length": (4096, VT.UINT32)}),
    "granite": dict(arch="granite", kv={"embedding_scale": (12.0, VT.FLOAT32),
                                        "residual_scale": (0.22, VT.FLOAT32),
                                        "logit_scale": (8.0, VT.FLOAT32),
                                        "attention.scale": (0.1, VT.FLOAT32)}, tied=True),
    "granite-norope": dict(arch="granite", seed="granite", tied=True,
                           kv={"logit_scale": (8.0, VT.FLOAT32), "rope.scaling.finetuned": (False, VT.BOOL)}),
    "olmo2": dict(arch="olmo2", olmo2=True),
    "minicpm": dict(arch="minicpm", tied=True),
    "exaone4": dict(arch="exaone4", exaone=True, rope_freqs=True, tied=True,
                    kv={"rope.freq_base": (1000000.0, VT.FLOAT32)}),
    "smollm3": dict(arch="smollm3", n_layer=4, tied=True),
}


def _rng_for(name: str) -> np.random.Generator:
    return np.random.default_rng(int(hashlib.sha256(name.encode()).hexdigest()[:8], 16))


def _kv(w: gguf.GGUFWriter, key: str, val, vt, sub=None) -> None:
    if vt == VT.ARRAY:
        w.add_key_value(key, val, vt, sub_type=sub)
    else:
        w.add_key_value(key, val, vt)


def _llama3_factors(n: int, base: float) -> np.ndarray:
    """Llama-3.1 style factors for n pairs (factor 8, low/high frequency factors 1 / 4, original context 64):
    1 for short wavelengths, 8 for long, smooth in between."""
    out = np.empty(n, dtype=np.float32)
    for i in range(n):
        wavelen = 2 * math.pi * base ** (2 * i / (2 * n))
        if wavelen < 64 / 4:
            out[i] = 1.0
        elif wavelen > 64 / 1:
            out[i] = 8.0
        else:
            smooth = (64 / wavelen - 1) / (4 - 1)
            out[i] = 1.0 / ((1 - smooth) / 8 + smooth)
    return out


def write(path, name: str, override: Dict[str, Any] = None, tensors: Dict[str, np.ndarray] = None,
          extra: Dict[str, np.ndarray] = None) -> str:
    """The GGUF of variant `name` at path (deterministic: the same bytes every time). override: full key ->
    (value, type) replacing / adding a metadata key, or None removing it; tensors: F32 tensors replacing the
    variant's of the same name; extra: F32 tensors added (for the error tests)."""
    spec = VARIANTS[name]
    arch, nl = spec["arch"], spec.get("n_layer", 2)
    n_rot = spec.get("n_rot", HD)
    rng = _rng_for(spec.get("seed", name))
    toks = vocab_tokens()
    w = gguf.GGUFWriter(str(path), arch)
    base_kv = {"context_length": (128, VT.UINT32), "embedding_length": (E, VT.UINT32),
               "block_count": (nl, VT.UINT32), "feed_forward_length": (FF, VT.UINT32),
               "attention.head_count": (NH, VT.UINT32), "attention.head_count_kv": (NKV, VT.UINT32),
               "attention.layer_norm_rms_epsilon": (1e-6, VT.FLOAT32), "rope.freq_base": (10000.0, VT.FLOAT32),
               "rope.dimension_count": (n_rot, VT.UINT32)}
    base_kv.update(spec.get("kv", {}))
    if arch == "phi3":
        base_kv["attention.key_length"] = (HD, VT.UINT32)
        base_kv["attention.value_length"] = (HD, VT.UINT32)
    meta = {f"{arch}.{k}": v for k, v in base_kv.items()}
    meta.update(override or {})
    for k, v in meta.items():
        if v is not None:
            _kv(w, k, v[0], v[1])
    for k, v, vt, *sub in (("tokenizer.ggml.model", "gpt2", VT.STRING), ("tokenizer.ggml.pre", "qwen2", VT.STRING),
                           ("tokenizer.ggml.tokens", toks, VT.ARRAY, VT.STRING),
                           ("tokenizer.ggml.token_type", [1] * (len(toks) - 2) + [3, 3], VT.ARRAY, VT.INT32),
                           ("tokenizer.ggml.merges", ["a b", "Ġ a"], VT.ARRAY, VT.STRING),
                           ("tokenizer.ggml.eos_token_id", len(toks) - 1, VT.UINT32),
                           ("tokenizer.ggml.bos_token_id", len(toks) - 2, VT.UINT32),
                           ("tokenizer.chat_template", CHATML, VT.STRING)):
        _kv(w, k, v, vt, *sub)

    def mat(tname: str, rows: int, cols: int, scale: float = 0.3) -> None:
        a = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)
        q = gguf.quants.quantize(a, Q.Q8_0)
        w.add_tensor(tname, q, raw_shape=q.shape, raw_dtype=Q.Q8_0)

    def vec(tname: str, n: int, around: float = 1.0, spread: float = 0.2) -> None:
        w.add_tensor(tname, (around + spread * rng.standard_normal(n)).astype(np.float32))

    def f32(tname: str, a: np.ndarray) -> None:
        w.add_tensor(tname, (tensors or {}).get(tname, a))

    nv = len(toks)
    mat("token_embd.weight", nv, E, 1.0)
    vec("output_norm.weight", E)
    if not spec.get("tied"):
        mat("output.weight", nv, E)
    if spec.get("rope_freqs"):
        f32("rope_freqs.weight", _llama3_factors(n_rot // 2, float(base_kv["rope.freq_base"][0])))
    if spec.get("longrope"):
        f32("rope_factors_long.weight", (1.0 + 3.0 * rng.random(n_rot // 2)).astype(np.float32))
        f32("rope_factors_short.weight", (1.0 + 0.5 * rng.random(n_rot // 2)).astype(np.float32))
    for i in range(nl):
        p = f"blk.{i}."
        if not (spec.get("olmo2") or spec.get("exaone")):
            vec(p + "attn_norm.weight", E)
        if spec.get("fused"):
            mat(p + "attn_qkv.weight", HQ + 2 * HK, E)
        else:
            mat(p + "attn_q.weight", HQ, E)
            mat(p + "attn_k.weight", HK, E)
            mat(p + "attn_v.weight", HK, E)
        mat(p + "attn_output.weight", E, HQ)
        if spec.get("qk_norm") or spec.get("exaone"):
            vec(p + "attn_q_norm.weight", HD)
            vec(p + "attn_k_norm.weight", HD)
        if spec.get("olmo2"):
            vec(p + "attn_q_norm.weight", HQ)
            vec(p + "attn_k_norm.weight", HK)
        if spec.get("olmo2") or spec.get("exaone"):
            vec(p + "post_attention_norm.weight", E)
            vec(p + "post_ffw_norm.weight", E)
        else:
            vec(p + "ffn_norm.weight", E)
        if spec.get("fused"):
            mat(p + "ffn_up.weight", 2 * FF, E)
        else:
            mat(p + "ffn_gate.weight", FF, E)
            mat(p + "ffn_up.weight", FF, E)
        mat(p + "ffn_down.weight", E, FF)
    for tname, a in (extra or {}).items():
        w.add_tensor(tname, np.ascontiguousarray(a, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def sha256(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


__all__ = ["VARIANTS", "write", "sha256", "E", "NH", "NKV", "HD", "FF"]
