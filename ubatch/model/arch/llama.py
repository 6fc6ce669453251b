"""llama (TinyLlama, SmolLM, Llama 2/3 style files): NORM RoPE with every scaling llama.cpp reads (none, linear,
YaRN, Llama-3 `rope_freqs.weight` factors; LongRoPE factors), GQA, SwiGLU, optional biases, tied output
(docs/llama-cpp-behaviours.md §M3.2).

This module also holds the decoder the other dense architectures share (qwen2, qwen3, phi3, granite, olmo2,
minicpm, smollm3): `Layer` with its optional pieces (pre-norms, Q/K/V/O biases, per-head or whole-row Q/K
RMSNorm, post-norms), `decoder_forward` (the reference path: one kernel call per operation) and the
hyperparameter-driven options (rope scaling and factors, NoPE layers, Q scale, residual / embedding / logit
multipliers) that the fused C layer (ubatch.model.fused) applies the same way."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np

from ubatch.compute import kernels
from ubatch.model import fused, moe, ops
from ubatch.model.gguf_file import GGUFError, GGUFFile
from ubatch.model.hparams import ROPE_NORM, HParams, read_hparams
from ubatch.model.weights import TensorSource, Weight

NAME = "llama"
ROPE_TYPE = ROPE_NORM


@dataclass
class Layer:
    attn_norm: Optional[np.ndarray]        # None: no pre-norm (olmo2)
    wq: Weight
    wk: Weight
    wv: Weight
    wo: Weight
    ffn_norm: Optional[np.ndarray]
    w_gate: Weight
    w_up: Weight
    w_down: Weight
    bq: Optional[np.ndarray] = None
    bk: Optional[np.ndarray] = None
    bv: Optional[np.ndarray] = None
    bo: Optional[np.ndarray] = None
    q_norm: Optional[np.ndarray] = None    # [head_dim] per head, or [n_head*head_dim] over the row (olmo2)
    k_norm: Optional[np.ndarray] = None
    post_attn_norm: Optional[np.ndarray] = None
    post_ffw_norm: Optional[np.ndarray] = None
    moe: Optional[object] = None           # ubatch.model.moe.MoEWeights: the FFN is a mixture of experts


@dataclass
class Weights:
    tok_embd: Weight
    output_norm: np.ndarray
    output: Weight               # token_embd when the file has no output.weight (tied)
    layers: List[Layer]
    output_bias: Optional[np.ndarray] = None
    rope_freqs: Optional[np.ndarray] = None   # float32[n_rot/2]: Llama-3 factors, all layers
    rope_long: Optional[np.ndarray] = None    # LongRoPE factors for contexts beyond n_ctx_orig_yarn
    rope_short: Optional[np.ndarray] = None

    @property
    def tied(self) -> bool:
        return self.output is self.tok_embd


def load_hparams(f: GGUFFile) -> HParams:
    hp = read_hparams(f, NAME, ROPE_TYPE, experts=True)
    if moe.has_experts(f, NAME):   # Mixtral: experts of width n_ff, weights renormalised
        hp.moe = moe.read_moe(f, hp, norm_w=True, shared=False, ff_exp=hp.n_ff)
    return hp


def load_rope_factors(src: TensorSource, hp: HParams, *, longrope: Optional[bool] = None) -> dict:
    """The rope factor tensors as llama.cpp's loaders take them (shape {n_rot/2}, optional): rope_freqs, or
    with LongRoPE (longrope=None: when rope.scaling.type is longrope) rope_factors_long / short."""
    if longrope is None:
        longrope = hp.rope_scaling == "longrope"
    half = hp.n_rot // 2
    names = {"rope_long": "rope_factors_long.weight", "rope_short": "rope_factors_short.weight"} if longrope \
        else {"rope_freqs": "rope_freqs.weight"}
    out = {}
    for key, name in names.items():
        v = src.vector(name, half, required=False)
        if v is not None and not (np.all(np.isfinite(v)) and np.all(v != 0)):
            raise GGUFError(f"{src.f.path}: tensor '{name}' must hold finite non-zero factors")
        out[key] = v
    return out


def attn_dims(src: TensorSource, hp: HParams, arch: str) -> Tuple[int, int, int, int]:
    """(n_embd, head_dim, Q row width, K/V row width) of an arch whose Q row must be n_embd wide (GGUFError
    naming arch otherwise): olmo2, exaone4, phi3."""
    e, hd = hp.n_embd, hp.head_dim
    hq, hk = hp.n_head * hd, hp.n_head_kv * hd
    if hq != e:
        raise GGUFError(f"{src.f.path}: {arch} needs head_count * key_length = embedding_length "
                        f"({hp.n_head} * {hd} != {e})")
    return e, hd, hq, hk


def refuse_ffn_bias(src: TensorSource, p: str) -> None:
    for b in ("ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"):
        if src.f.tensors.get(p + b) is not None:
            raise GGUFError(f"{src.f.path}: tensor '{p + b}' (FFN biases) is not supported")


def load_decoder(src: TensorSource, hp: HParams, *, require_qkv_bias: bool, ffn_bias: bool,
                 qk_norm: bool = False) -> Weights:
    """The llama-style decoder's tensors (qwen2: required Q/K/V biases; qk_norm: per-head Q/K norms, qwen3)."""
    e, hq, hk = hp.n_embd, hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim
    tok = src.matrix("token_embd.weight", e, hp.n_vocab)
    out = src.matrix("output.weight", e, hp.n_vocab, required=False)
    factors = load_rope_factors(src, hp)
    layers = []
    for i in range(hp.n_layer):
        p = f"blk.{i}."
        opt = {"required": require_qkv_bias}
        layers.append(Layer(
            attn_norm=src.vector(p + "attn_norm.weight", e),
            wq=src.matrix(p + "attn_q.weight", e, hq), wk=src.matrix(p + "attn_k.weight", e, hk),
            wv=src.matrix(p + "attn_v.weight", e, hk), wo=src.matrix(p + "attn_output.weight", hq, e),
            ffn_norm=src.vector(p + "ffn_norm.weight", e),
            **(dict(w_gate=None, w_up=None, w_down=None, moe=moe.load_moe(src, hp, i)) if hp.moe is not None else
               dict(w_gate=src.matrix(p + "ffn_gate.weight", e, hp.n_ff), w_up=src.matrix(p + "ffn_up.weight", e, hp.n_ff),
                    w_down=src.matrix(p + "ffn_down.weight", hp.n_ff, e))),
            bq=src.vector(p + "attn_q.bias", hq, **opt), bk=src.vector(p + "attn_k.bias", hk, **opt),
            bv=src.vector(p + "attn_v.bias", hk, **opt),
            bo=src.vector(p + "attn_output.bias", e, required=False) if ffn_bias else None,
            q_norm=src.vector(p + "attn_q_norm.weight", hp.head_dim) if qk_norm else None,
            k_norm=src.vector(p + "attn_k_norm.weight", hp.head_dim) if qk_norm else None))
        refuse_ffn_bias(src, p)
    return Weights(tok_embd=tok, output_norm=src.vector("output_norm.weight", e),
                   output=out if out is not None else tok, layers=layers,
                   output_bias=src.vector("output.bias", hp.n_vocab, required=False), **factors)


def load_weights(src: TensorSource, hp: HParams) -> Weights:
    return load_decoder(src, hp, require_qkv_bias=False, ffn_bias=True)


def _add(y: np.ndarray, b: Optional[np.ndarray]) -> np.ndarray:
    if b is not None:
        y += b
    return y


def n_ctx_seq(step) -> int:
    """The context's cells per sequence (llama.cpp's n_ctx_seq): the main K/V store's size."""
    return int(step.runner.stores[0].kv_size)


def rope_ext(model, il: int, n_ctx: int) -> Optional[kernels.RopeExt]:
    """Layer il's YaRN / attention factor / frequency factors as llama.cpp's graph passes them to
    ggml_rope_ext (None: plain RoPE). LongRoPE's long factors apply when n_ctx (the context's n_ctx_seq)
    exceeds rope.scaling.original_context_length, the short ones otherwise (llama_model::get_rope_factors).
    Sliding-window layers (gemma3) keep plain RoPE."""
    hp: HParams = model.hparams
    if hp.n_swa > 0 and hp.is_swa(il):
        return None
    W = model.weights
    ff = getattr(W, "rope_freqs", None)
    if ff is None:
        ff = getattr(W, "rope_long", None) if n_ctx > hp.n_ctx_orig_yarn else getattr(W, "rope_short", None)
    if ff is None and hp.rope_ext_factor == 0.0 and hp.rope_attn_factor == 1.0:
        return None
    return kernels.RopeExt(ext_factor=hp.rope_ext_factor, attn_factor=hp.rope_attn_factor,
                           n_ctx_orig=hp.n_ctx_orig_yarn, beta_fast=hp.yarn_beta_fast,
                           beta_slow=hp.yarn_beta_slow, freq_factors=ff)


def _norm_heads(y: np.ndarray, w: Optional[np.ndarray], n: int, eps: float) -> np.ndarray:
    """RMSNorm of Q or K y [n, heads*hd] per head (w [hd]) or over the whole row (w [heads*hd])."""
    if w is None:
        return y
    return ops.rms_norm(y.reshape(n, -1, w.shape[0]), w, eps).reshape(n, -1)


def decoder_forward(model, step, x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The shared dense block stack over one ubatch (the reference path); returns the residual stream of
    rows `keep`. Every optional piece of Layer and every multiplier of HParams is applied where llama.cpp's
    graphs apply it."""
    hp: HParams = model.hparams
    W: Weights = model.weights
    n, nt, eps = x.shape[0], step.n_threads, hp.rms_eps
    hd = hp.head_dim
    qs, rs = np.float32(hp.q_scale), np.float32(hp.residual_scale)
    nctx = n_ctx_seq(step)
    for il, L in enumerate(W.layers):
        h = ops.rms_norm(x, L.attn_norm, eps) if L.attn_norm is not None else x
        q = _norm_heads(_add(ops.matmul(h, L.wq, nt), L.bq), L.q_norm, n, eps)
        k = _norm_heads(_add(ops.matmul(h, L.wk, nt), L.bk), L.k_norm, n, eps)
        v = _add(ops.matmul(h, L.wv, nt), L.bv).reshape(n, hp.n_head_kv, hd)
        q = np.ascontiguousarray(q.reshape(n, hp.n_head, hd), dtype=np.float32)
        k = np.ascontiguousarray(k.reshape(n, hp.n_head_kv, hd), dtype=np.float32)
        if hp.uses_rope(il):
            base, scale = hp.rope_params(il)
            ext = rope_ext(model, il, nctx)
            kernels.rope(q, step.pos, n_rot=hp.n_rot, base=base, mode=hp.rope_type, freq_scale=scale, ext=ext)
            kernels.rope(k, step.pos, n_rot=hp.n_rot, base=base, mode=hp.rope_type, freq_scale=scale, ext=ext)
        if qs != 1.0:
            q *= qs
        o = step.attend(il, q, k, np.ascontiguousarray(v), hp.kq_scale)
        a = _add(ops.matmul(o, L.wo, nt), L.bo)
        if il == hp.n_layer - 1:
            a, x = a[keep], x[keep]
        if L.post_attn_norm is not None:
            a = ops.rms_norm(a, L.post_attn_norm, eps)
        if rs:
            a = a * rs
        x = x + a
        h = ops.rms_norm(x, L.ffn_norm, eps) if L.ffn_norm is not None else x
        if L.moe is not None:
            d = moe.ffn(L.moe, hp, h, nt)
        else:
            f = ops.silu_mul(ops.matmul(h, L.w_gate, nt), ops.matmul(h, L.w_up, nt))
            d = ops.matmul(f, L.w_down, nt)
        if L.post_ffw_norm is not None:
            d = ops.rms_norm(d, L.post_ffw_norm, eps)
        if rs:
            d = d * rs
        x = x + d
    return x


def forward(model, step, x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The layer stack: one C call per layer (ubatch.model.fused), or the Python reference path."""
    if fused.enabled(model):
        return fused.forward(model, step, x, keep)
    return decoder_forward(model, step, x, keep)


forward_reference = decoder_forward


def embed(model, tokens: np.ndarray) -> np.ndarray:
    """Token embeddings (x embedding_scale when the architecture has one: granite, minicpm)."""
    x = ops.get_rows(model.weights.tok_embd, tokens)
    if model.hparams.embd_scale != 1.0:
        x *= np.float32(model.hparams.embd_scale)
    return x


def logits(model, xn: np.ndarray, n_threads: Optional[int]) -> np.ndarray:
    """lm head (+ output.bias; / logit_scale: granite, minicpm)."""
    W = model.weights
    y = ops.matmul(xn, W.output, n_threads, reuse=True)
    if W.output_bias is not None:
        y += W.output_bias
    if model.hparams.logit_scale:
        y *= np.float32(1.0) / np.float32(model.hparams.logit_scale)
    return y
