"""qwen2 (Qwen2 / Qwen2.5): the llama decoder with required Q/K/V biases (added before RoPE), NEOX RoPE,
no attention-output bias, optional output.bias (docs/llama-cpp-behaviours.md §M3.3)."""
from __future__ import annotations

from ubatch.model.arch import llama
from ubatch.model.gguf_file import GGUFFile
from ubatch.model.hparams import ROPE_NEOX, HParams, read_hparams
from ubatch.model.weights import TensorSource

NAME = "qwen2"
ROPE_TYPE = ROPE_NEOX


def load_hparams(f: GGUFFile) -> HParams:
    return read_hparams(f, NAME, ROPE_TYPE)


def load_weights(src: TensorSource, hp: HParams) -> llama.Weights:
    return llama.load_decoder(src, hp, require_qkv_bias=True, ffn_bias=False)


forward = llama.forward
forward_reference = llama.decoder_forward
embed = llama.embed
logits = llama.logits
