"""llama (TinyLlama, SmolLM, Llama-style files): NORM RoPE, GQA, SwiGLU, optional biases, tied output
(real-models.md §3.2). qwen2 reuses this decoder with required Q/K/V biases and NEOX RoPE."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import numpy as np

from ubatch.compute import fused, kernels
from ubatch.model import moe, ops
from ubatch.model.gguf_file import GGUFFile
from ubatch.model.hparams import ROPE_NORM, HParams, read_hparams
from ubatch.model.weights import TensorSource, Weight

NAME = "llama"
ROPE_TYPE = ROPE_NORM


@dataclass
class Layer:
    attn_norm: np.ndarray
    wq: Weight
    wk: Weight
    wv: Weight
    wo: Weight
    ffn_norm: np.ndarray
    w_gate: Weight
    w_up: Weight
    w_down: Weight
    bq: Optional[np.ndarray] = None
    bk: Optional[np.ndarray] = None
    bv: Optional[np.ndarray] = None
    bo: Optional[np.ndarray] = None
    q_norm: Optional[np.ndarray] = None    # per-head RMSNorm of Q / K after the biases, before RoPE (qwen3moe)
    k_norm: Optional[np.ndarray] = None
    moe: Optional[object] = None           # ubatch.model.moe.MoEWeights: the FFN is a mixture of experts


@dataclass
class Weights:
    tok_embd: Weight
    output_norm: np.ndarray
    output: Weight               # token_embd when the file has no output.weight (tied)
    layers: List[Layer]
    output_bias: Optional[np.ndarray] = None

    @property
    def tied(self) -> bool:
        return self.output is self.tok_embd


def load_hparams(f: GGUFFile) -> HParams:
    return read_hparams(f, NAME, ROPE_TYPE)


def load_decoder(src: TensorSource, hp: HParams, *, require_qkv_bias: bool, ffn_bias: bool) -> Weights:
    e, hq, hk = hp.n_embd, hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim
    tok = src.matrix("token_embd.weight", e, hp.n_vocab)
    out = src.matrix("output.weight", e, hp.n_vocab, required=False)
    if src.f.tensors.get("rope_freqs.weight") is not None:
        from ubatch.model.gguf_file import GGUFError
        raise GGUFError(f"{src.f.path}: tensor 'rope_freqs.weight' (Llama-3 rope factors) is not supported")
    layers = []
    for i in range(hp.n_layer):
        p = f"blk.{i}."
        opt = {"required": require_qkv_bias}
        layers.append(Layer(
            attn_norm=src.vector(p + "attn_norm.weight", e),
            wq=src.matrix(p + "attn_q.weight", e, hq), wk=src.matrix(p + "attn_k.weight", e, hk),
            wv=src.matrix(p + "attn_v.weight", e, hk), wo=src.matrix(p + "attn_output.weight", hq, e),
            ffn_norm=src.vector(p + "ffn_norm.weight", e),
            w_gate=src.matrix(p + "ffn_gate.weight", e, hp.n_ff), w_up=src.matrix(p + "ffn_up.weight", e, hp.n_ff),
            w_down=src.matrix(p + "ffn_down.weight", hp.n_ff, e),
            bq=src.vector(p + "attn_q.bias", hq, **opt), bk=src.vector(p + "attn_k.bias", hk, **opt),
            bv=src.vector(p + "attn_v.bias", hk, **opt),
            bo=src.vector(p + "attn_output.bias", e, required=False) if ffn_bias else None))
        for b in ("ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"):
            if src.f.tensors.get(p + b) is not None:
                from ubatch.model.gguf_file import GGUFError
                raise GGUFError(f"{src.f.path}: tensor '{p + b}' (FFN biases) is not supported")
    return Weights(tok_embd=tok, output_norm=src.vector("output_norm.weight", e),
                   output=out if out is not None else tok, layers=layers,
                   output_bias=src.vector("output.bias", hp.n_vocab, required=False))


def load_weights(src: TensorSource, hp: HParams) -> Weights:
    return load_decoder(src, hp, require_qkv_bias=False, ffn_bias=True)


def _add(y: np.ndarray, b: Optional[np.ndarray]) -> np.ndarray:
    if b is not None:
        y += b
    return y


def decoder_forward(model, step, x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The llama/qwen2 block stack over one ubatch; returns the residual stream of rows `keep`."""
    hp: HParams = model.hparams
    W: Weights = model.weights
    n, nt = x.shape[0], step.n_threads
    hd = hp.head_dim
    for il, L in enumerate(W.layers):
        h = ops.rms_norm(x, L.attn_norm, hp.rms_eps)
        q = _add(ops.matmul(h, L.wq, nt), L.bq).reshape(n, hp.n_head, hd)
        k = _add(ops.matmul(h, L.wk, nt), L.bk).reshape(n, hp.n_head_kv, hd)
        v = _add(ops.matmul(h, L.wv, nt), L.bv).reshape(n, hp.n_head_kv, hd)
        if L.q_norm is not None:
            q = ops.rms_norm(q, L.q_norm, hp.rms_eps)
        if L.k_norm is not None:
            k = ops.rms_norm(k, L.k_norm, hp.rms_eps)
        base, scale = hp.rope_params(il)
        kernels.rope(q, step.pos, n_rot=hp.n_rot, base=base, mode=hp.rope_type, freq_scale=scale)
        kernels.rope(k, step.pos, n_rot=hp.n_rot, base=base, mode=hp.rope_type, freq_scale=scale)
        o = step.attend(il, q, k, v, hp.kq_scale)
        a = _add(ops.matmul(o, L.wo, nt), L.bo)
        if il == hp.n_layer - 1:
            a, x = a[keep], x[keep]
        x = x + a
        h = ops.rms_norm(x, L.ffn_norm, hp.rms_eps)
        if L.moe is not None:
            x = x + moe.ffn(L.moe, hp, h, nt)
            continue
        f = ops.silu_mul(ops.matmul(h, L.w_gate, nt), ops.matmul(h, L.w_up, nt))
        x = x + ops.matmul(f, L.w_down, nt)
    return x


def forward(model, step, x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The layer stack: one C call per layer (ubatch.compute.fused), or the Python reference path."""
    if fused.enabled(model):
        return fused.forward(model, step, x, keep)
    return decoder_forward(model, step, x, keep)


forward_reference = decoder_forward


def embed(model, tokens: np.ndarray) -> np.ndarray:
    return ops.get_rows(model.weights.tok_embd, tokens)


def logits(model, xn: np.ndarray, n_threads: Optional[int]) -> np.ndarray:
    W = model.weights
    y = ops.matmul(xn, W.output, n_threads)
    if W.output_bias is not None:
        y += W.output_bias
    return y
