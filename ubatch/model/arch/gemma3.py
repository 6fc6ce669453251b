"""gemma3 (Gemma 3 270M ... 27B text): embeddings x sqrtf(n_embd), four norms per layer (stored with their +1:
used as is), per-head q/k RMSNorm before NEOX RoPE, Q pre-scaled by 1/sqrt(key_length) with softmax scale
1, per-layer RoPE base (SWA layers: rope.freq_base_swa, scale 1), GeGLU through ggml's f16 GELU table,
interleaved sliding-window attention, optional final soft-cap (docs/llama-cpp-behaviours.md §M1.2, §M3.4)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional

import numpy as np

from ubatch.compute import kernels
from ubatch.model import fused
from ubatch.model import ops
from ubatch.model.arch.llama import n_ctx_seq, rope_ext
from ubatch.model.gguf_file import GGUFError, GGUFFile
from ubatch.model.hparams import ROPE_NEOX, HParams, _float, _int, read_hparams
from ubatch.model.weights import TensorSource, Weight

NAME = "gemma3"
ROPE_TYPE = ROPE_NEOX
DEFAULT_SWA_PATTERN = 6


@dataclass
class Layer:
    attn_norm: np.ndarray
    wq: Weight
    wk: Weight
    wv: Weight
    wo: Weight
    q_norm: Optional[np.ndarray]        # None: no q/k norms (gemma2)
    k_norm: Optional[np.ndarray]
    post_attn_norm: np.ndarray
    ffn_norm: np.ndarray
    w_gate: Weight
    w_up: Weight
    w_down: Weight
    post_ffw_norm: np.ndarray


@dataclass
class Weights:
    tok_embd: Weight
    output_norm: np.ndarray
    output: Weight
    layers: List[Layer]

    @property
    def tied(self) -> bool:
        return self.output is self.tok_embd


def swa_pattern(f: GGUFFile, n_layer: int, arch: str = NAME, default: int = DEFAULT_SWA_PATTERN) -> tuple:
    """is_swa per layer: an array key gives it directly; else n_pattern (default 6): il % n < n - 1."""
    key = f"{arch}.attention.sliding_window_pattern"
    v = f.metadata.get(key)
    if isinstance(v, (np.ndarray, list)):
        if len(v) != n_layer:
            raise GGUFError(f"{f.path}: {key} has {len(v)} entries, block_count is {n_layer}")
        return tuple(bool(b) for b in v)
    n = default if v is None else _int(f, key, v, 0)
    return tuple((n == 0) or (il % n < n - 1) for il in range(n_layer))


def load_hparams(f: GGUFFile) -> HParams:
    hp = read_hparams(f, NAME, ROPE_TYPE)
    n_swa = _int(f, "gemma3.attention.sliding_window", f.metadata.get("gemma3.attention.sliding_window", 0), 0)
    if n_swa > 0:
        hp.n_swa = n_swa
        hp.swa_layers = swa_pattern(f, hp.n_layer)
        hp.rope_freq_base_swa = _float(f, "gemma3.rope.freq_base_swa", f.metadata.get("gemma3.rope.freq_base_swa",
                                                                                        10000.0))
    head = hp.head_dim if hp.n_layer != 62 else hp.n_embd // hp.n_head   # the 27B: 1/sqrt(n_embd/n_head)
    hp.q_scale = 1.0 / math.sqrt(head)
    hp.kq_scale = 1.0
    hp.embd_scale = float(np.sqrt(np.float32(hp.n_embd), dtype=np.float32))
    hp.final_logit_softcap = _float(f, "gemma3.final_logit_softcapping",
                                    f.metadata.get("gemma3.final_logit_softcapping", 0.0), positive=False)
    return hp


def load_weights(src: TensorSource, hp: HParams) -> Weights:
    e, hq, hk, hd = hp.n_embd, hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim, hp.head_dim
    tok = src.matrix("token_embd.weight", e, hp.n_vocab)
    out = src.matrix("output.weight", e, hp.n_vocab, required=False)
    layers = []
    for i in range(hp.n_layer):
        p = f"blk.{i}."
        layers.append(Layer(
            attn_norm=src.vector(p + "attn_norm.weight", e),
            wq=src.matrix(p + "attn_q.weight", e, hq), wk=src.matrix(p + "attn_k.weight", e, hk),
            wv=src.matrix(p + "attn_v.weight", e, hk), wo=src.matrix(p + "attn_output.weight", hq, e),
            q_norm=src.vector(p + "attn_q_norm.weight", hd), k_norm=src.vector(p + "attn_k_norm.weight", hd),
            post_attn_norm=src.vector(p + "post_attention_norm.weight", e),
            ffn_norm=src.vector(p + "ffn_norm.weight", e),
            w_gate=src.matrix(p + "ffn_gate.weight", e, hp.n_ff), w_up=src.matrix(p + "ffn_up.weight", e, hp.n_ff),
            w_down=src.matrix(p + "ffn_down.weight", hp.n_ff, e),
            post_ffw_norm=src.vector(p + "post_ffw_norm.weight", e)))
    return Weights(tok_embd=tok, output_norm=src.vector("output_norm.weight", e),
                   output=out if out is not None else tok, layers=layers)


def embed(model, tokens: np.ndarray) -> np.ndarray:
    x = ops.get_rows(model.weights.tok_embd, tokens)
    x *= np.float32(model.hparams.embd_scale)
    return x


def forward(model, step, x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The layer stack: one C call per layer (ubatch.model.fused), or the Python reference path."""
    if fused.enabled(model):
        return fused.forward(model, step, x, keep)
    return forward_reference(model, step, x, keep)


def forward_reference(model, step, x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The reference path, one kernel call per operation (the fused C layer is checked bitwise against it)."""
    hp: HParams = model.hparams
    n, nt, hd, eps = x.shape[0], step.n_threads, hp.head_dim, hp.rms_eps
    qs = np.float32(hp.q_scale)
    for il, L in enumerate(model.weights.layers):
        h = ops.rms_norm(x, L.attn_norm, eps)
        q = ops.matmul(h, L.wq, nt).reshape(n, hp.n_head, hd)
        k = ops.matmul(h, L.wk, nt).reshape(n, hp.n_head_kv, hd)
        if L.q_norm is not None:
            q, k = ops.rms_norm(q, L.q_norm, eps), ops.rms_norm(k, L.k_norm, eps)
        v = np.ascontiguousarray(ops.matmul(h, L.wv, nt).reshape(n, hp.n_head_kv, hd))
        q, k = np.ascontiguousarray(q, np.float32), np.ascontiguousarray(k, np.float32)
        base, scale = hp.rope_params(il)
        ext = rope_ext(model, il, n_ctx_seq(step))
        kernels.rope(q, step.pos, n_rot=hp.n_rot, base=base, mode=hp.rope_type, freq_scale=scale, ext=ext)
        kernels.rope(k, step.pos, n_rot=hp.n_rot, base=base, mode=hp.rope_type, freq_scale=scale, ext=ext)
        q *= qs
        o = step.attend(il, q, k, v, hp.kq_scale, softcap=hp.attn_logit_softcap)
        a = ops.matmul(o, L.wo, nt)
        if il == hp.n_layer - 1:
            a, x = a[keep], x[keep]
        x = x + ops.rms_norm(a, L.post_attn_norm, eps)
        h = ops.rms_norm(x, L.ffn_norm, eps)
        f = ops.gelu_mul(ops.matmul(h, L.w_gate, nt), ops.matmul(h, L.w_up, nt))
        x = x + ops.rms_norm(ops.matmul(f, L.w_down, nt), L.post_ffw_norm, eps)
    return x


def logits(model, xn: np.ndarray, n_threads: Optional[int]) -> np.ndarray:
    y = ops.matmul(xn, model.weights.output, n_threads, reuse=True)
    c = model.hparams.final_logit_softcap
    if c:
        y = (np.float32(c) * np.tanh(y / np.float32(c))).astype(np.float32)
    return y
