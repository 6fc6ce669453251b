"""smollm3 (SmolLM3 3B): the llama decoder (NORM RoPE, GQA, SwiGLU, optional Q/K/V biases, tied output) where
every 4th layer (il + 1) % 4 == 0 is a NoPE layer: no RoPE on its Q and K (llama.cpp src/models/smollm3.cpp,
n_no_rope_layer_step = 4). As in llama.cpp, a K-shift still re-rotates those layers' cached keys."""
from __future__ import annotations

from ubatch.model.arch import llama
from ubatch.model.gguf_file import GGUFFile
from ubatch.model.hparams import ROPE_NORM, HParams, read_hparams
from ubatch.model.weights import TensorSource

NAME = "smollm3"
ROPE_TYPE = ROPE_NORM
FUSED = True
NO_ROPE_LAYER_STEP = 4


def load_hparams(f: GGUFFile) -> HParams:
    hp = read_hparams(f, NAME, ROPE_TYPE)
    hp.no_rope_layer_step = NO_ROPE_LAYER_STEP
    return hp


def load_weights(src: TensorSource, hp: HParams) -> llama.Weights:
    return llama.load_decoder(src, hp, require_qkv_bias=False, ffn_bias=False)


forward = llama.forward
forward_reference = llama.decoder_forward
embed = llama.embed
logits = llama.logits
