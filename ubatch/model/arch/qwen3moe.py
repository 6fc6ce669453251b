"""qwen3moe (Qwen3-30B-A3B, Qwen3-235B-A22B): attention with per-head RMSNorm of Q and K before NEOX RoPE
(head_dim = attention.key_length, n_head * head_dim may differ from n_embd), no biases needed, and a
mixture-of-experts FFN: softmax router, top-k experts whose weights are renormalised to sum 1 (llama.cpp's
norm_w = true, Qwen3's norm_topk_prob), SwiGLU experts, no shared expert (ubatch.model.moe,
csrc/compute/moe.c)."""
from __future__ import annotations

from ubatch.model import moe
from ubatch.model.arch import llama, qwen2moe
from ubatch.model.gguf_file import GGUFFile
from ubatch.model.hparams import ROPE_NEOX, HParams, read_hparams
from ubatch.model.weights import TensorSource

NAME = "qwen3moe"
ROPE_TYPE = ROPE_NEOX
NORM_W = True           # build_moe_ffn(..., norm_w = true, ...)


def load_hparams(f: GGUFFile) -> HParams:
    hp = read_hparams(f, NAME, ROPE_TYPE, experts=True)
    hp.moe = moe.read_moe(f, hp, norm_w=NORM_W, shared=False)
    return hp


def load_weights(src: TensorSource, hp: HParams) -> llama.Weights:
    return qwen2moe.load_moe_decoder(src, hp, qk_norm=hp.head_dim)


forward = llama.forward
forward_reference = llama.decoder_forward
embed = llama.embed
logits = llama.logits
