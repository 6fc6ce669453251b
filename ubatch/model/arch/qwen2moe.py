"""qwen2moe (Qwen1.5-MoE, Qwen2-57B-A14B): the qwen2 attention (optional Q/K/V biases before NEOX RoPE, no
output bias) with a mixture-of-experts FFN: softmax router, top-k experts (expert_used_count) whose weights
are NOT renormalised, SwiGLU experts, plus a shared expert scaled by sigmoid(x . ffn_gate_inp_shexp) added
to every row (llama.cpp's qwen2moe graph; ubatch.model.moe, csrc/compute/moe.c)."""
from __future__ import annotations

from typing import List, Optional

from ubatch.model import moe
from ubatch.model.arch import llama
from ubatch.model.gguf_file import GGUFFile
from ubatch.model.hparams import ROPE_NEOX, HParams, read_hparams
from ubatch.model.weights import TensorSource

NAME = "qwen2moe"
ROPE_TYPE = ROPE_NEOX
NORM_W = False          # build_moe_ffn(..., norm_w = false, ...)
SHARED = True


def load_hparams(f: GGUFFile) -> HParams:
    hp = read_hparams(f, NAME, ROPE_TYPE, experts=True)
    hp.moe = moe.read_moe(f, hp, norm_w=NORM_W, shared=SHARED)
    return hp


def load_moe_decoder(src: TensorSource, hp: HParams, *, qk_norm: Optional[int] = None,
                     tied: bool = True) -> llama.Weights:
    """The llama-style attention (optional biases; qk_norm: the width of the required Q/K norms, head_dim per
    head or n_embd per row, None: none) with each layer's FFN a mixture of experts; tied: output.weight
    optional (token_embd when absent), else required. Shared by qwen3moe and olmoe."""
    e, hq, hk = hp.n_embd, hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim
    tok = src.matrix("token_embd.weight", e, hp.n_vocab)
    out = src.matrix("output.weight", e, hp.n_vocab, required=not tied)
    layers: List[llama.Layer] = []
    for i in range(hp.n_layer):
        p = f"blk.{i}."
        layers.append(llama.Layer(
            attn_norm=src.vector(p + "attn_norm.weight", e),
            wq=src.matrix(p + "attn_q.weight", e, hq), wk=src.matrix(p + "attn_k.weight", e, hk),
            wv=src.matrix(p + "attn_v.weight", e, hk), wo=src.matrix(p + "attn_output.weight", hq, e),
            ffn_norm=src.vector(p + "ffn_norm.weight", e), w_gate=None, w_up=None, w_down=None,
            bq=src.vector(p + "attn_q.bias", hq, required=False), bk=src.vector(p + "attn_k.bias", hk, required=False),
            bv=src.vector(p + "attn_v.bias", hk, required=False),
            q_norm=src.vector(p + "attn_q_norm.weight", qk_norm) if qk_norm else None,
            k_norm=src.vector(p + "attn_k_norm.weight", qk_norm) if qk_norm else None,
            moe=moe.load_moe(src, hp, i)))
    return llama.Weights(tok_embd=tok, output_norm=src.vector("output_norm.weight", e),
                         output=out if out is not None else tok, layers=layers)


def load_weights(src: TensorSource, hp: HParams) -> llama.Weights:
    return load_moe_decoder(src, hp)


forward = llama.forward
forward_reference = llama.decoder_forward
embed = llama.embed
logits = llama.logits
