"""phi3 (Phi-3 / Phi-3.5 mini and medium, Phi-4-mini): NEOX RoPE on the first rope.dimension_count dims of a
head (partial rotary), LongRoPE (rope_factors_long / rope_factors_short, {n_rot/2}: the long ones when the
context's n_ctx_seq exceeds rope.scaling.original_context_length) with rope.scaling.attn_factor on cos/sin,
Q scaled by 1/sqrt(head_dim) after RoPE with softmax scale 1, a fused attn_qkv (or separate Q/K/V) and a
fused ffn_up holding the SwiGLU gate (first n_ff rows) and up (last n_ff rows) (llama.cpp
src/models/phi3.cpp). A sliding window key is ignored, as llama.cpp does (it disables Phi's SWA)."""
from __future__ import annotations

import numpy as np

from ubatch.model.arch import llama
from ubatch.model.gguf_file import GGUFError, GGUFFile
from ubatch.model.hparams import ROPE_NEOX, HParams, read_hparams
from ubatch.model.weights import TensorSource

NAME = "phi3"
ROPE_TYPE = ROPE_NEOX
FUSED = True


def load_hparams(f: GGUFFile) -> HParams:
    hp = read_hparams(f, NAME, ROPE_TYPE, partial_rope=True)
    hp.q_scale = float(np.float32(1.0) / np.sqrt(np.float32(hp.head_dim)))
    hp.kq_scale = 1.0
    return hp


def load_weights(src: TensorSource, hp: HParams) -> llama.Weights:
    e, _, hq, hk = llama.attn_dims(src, hp, NAME)
    tok = src.matrix("token_embd.weight", e, hp.n_vocab)
    out = src.matrix("output.weight", e, hp.n_vocab, required=False)
    factors = llama.load_rope_factors(src, hp, longrope=True)
    layers = []
    for i in range(hp.n_layer):
        p = f"blk.{i}."
        qkv = src.matrix(p + "attn_qkv.weight", e, hq + 2 * hk, required=False)
        if qkv is not None:
            wq, wk, wv = (qkv.rows(0, hq, p + "attn_q"), qkv.rows(hq, hq + hk, p + "attn_k"),
                          qkv.rows(hq + hk, hq + 2 * hk, p + "attn_v"))
        else:
            wq, wk, wv = (src.matrix(p + "attn_q.weight", e, hq), src.matrix(p + "attn_k.weight", e, hk),
                          src.matrix(p + "attn_v.weight", e, hk))
        for b in ("attn_qkv.bias", "attn_q.bias", "attn_k.bias", "attn_v.bias"):
            if src.f.tensors.get(p + b) is not None:
                raise GGUFError(f"{src.f.path}: tensor '{p + b}' (phi3 attention biases) is not supported")
        up = src.matrix(p + "ffn_up.weight", e, 2 * hp.n_ff)
        layers.append(llama.Layer(
            attn_norm=src.vector(p + "attn_norm.weight", e), wq=wq, wk=wk, wv=wv,
            wo=src.matrix(p + "attn_output.weight", e, e), ffn_norm=src.vector(p + "ffn_norm.weight", e),
            w_gate=up.rows(0, hp.n_ff, p + "ffn_gate"), w_up=up.rows(hp.n_ff, 2 * hp.n_ff, p + "ffn_up"),
            w_down=src.matrix(p + "ffn_down.weight", hp.n_ff, e)))
        llama.refuse_ffn_bias(src, p)
    return llama.Weights(tok_embd=tok, output_norm=src.vector("output_norm.weight", e),
                         output=out if out is not None else tok, layers=layers, **factors)


forward = llama.forward
forward_reference = llama.decoder_forward
embed = llama.embed
logits = llama.logits
