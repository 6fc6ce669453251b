"""qwen3 (Qwen3 0.6B ... 32B dense): the llama decoder with NEOX RoPE, per-head Q/K RMSNorm before RoPE
(attn_q_norm / attn_k_norm, shape {head_dim}), optional Q/K/V biases, no FFN biases, tied or separate
output (llama.cpp src/models/qwen3.cpp)."""
from __future__ import annotations

from ubatch.model.arch import llama
from ubatch.model.gguf_file import GGUFFile
from ubatch.model.hparams import ROPE_NEOX, HParams, read_hparams
from ubatch.model.weights import TensorSource

NAME = "qwen3"
ROPE_TYPE = ROPE_NEOX
FUSED = True


def load_hparams(f: GGUFFile) -> HParams:
    return read_hparams(f, NAME, ROPE_TYPE)


def load_weights(src: TensorSource, hp: HParams) -> llama.Weights:
    return llama.load_decoder(src, hp, require_qkv_bias=False, ffn_bias=False, qk_norm=True)


forward = llama.forward
forward_reference = llama.decoder_forward
embed = llama.embed
logits = llama.logits
