"""olmoe (OLMoE-1B-7B): attention with RMSNorm over the whole Q row and the whole K row ({n_embd} each, so
n_head_kv * head_dim = n_embd) before NEOX RoPE, no biases needed, and a mixture-of-experts FFN: softmax
router, top-k experts of width feed_forward_length whose weights are NOT renormalised (llama.cpp's norm_w =
false), SwiGLU experts, separate output (llama.cpp src/models/olmoe.cpp; ubatch.model.moe, moe.c)."""
from __future__ import annotations

from ubatch.model import moe
from ubatch.model.arch import llama, qwen2moe
from ubatch.model.gguf_file import GGUFError, GGUFFile
from ubatch.model.hparams import ROPE_NEOX, HParams, read_hparams
from ubatch.model.weights import TensorSource

NAME = "olmoe"
ROPE_TYPE = ROPE_NEOX
FUSED = True
NORM_W = False


def load_hparams(f: GGUFFile) -> HParams:
    hp = read_hparams(f, NAME, ROPE_TYPE, experts=True)
    hp.moe = moe.read_moe(f, hp, norm_w=NORM_W, shared=False, ff_exp=hp.n_ff)
    return hp


def load_weights(src: TensorSource, hp: HParams) -> llama.Weights:
    e, hd = hp.n_embd, hp.head_dim
    hq, hk = hp.n_head * hd, hp.n_head_kv * hd
    if hq != e or hk != e:
        raise GGUFError(f"{src.f.path}: olmoe needs head_count * key_length = head_count_kv * key_length = "
                        f"embedding_length ({hp.n_head} * {hd}, {hp.n_head_kv} * {hd}, {e}): its q/k norms are "
                        f"{{n_embd}}")
    return qwen2moe.load_moe_decoder(src, hp, qk_norm=e, tied=False)


forward = llama.forward
forward_reference = llama.decoder_forward
embed = llama.embed
logits = llama.logits
