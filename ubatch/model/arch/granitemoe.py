"""granitemoe (IBM Granite 3.x MoE: 1B-A400M, 3B-A800M; Granite MoE Shared): granite's graph — token
embeddings x embedding_scale, attention and FFN outputs x residual_scale before the residual adds, softmax scale
attention.scale, logits / logit_scale (required) — with a mixture-of-experts FFN: softmax router, top-k experts of
width feed_forward_length, weights renormalised (llama.cpp's norm_w = true), and with
expert_shared_feed_forward_length > 0 a shared SwiGLU expert added ungated (llama.cpp src/models/granite-moe.cpp
on granite.cpp's graph; ubatch.model.moe, moe.c). RoPE is always on (granite-moe reads no
rope.scaling.finetuned)."""
from __future__ import annotations

from ubatch.model import moe
from ubatch.model.arch import granite
from ubatch.model.arch.granite import embed, forward, forward_reference, load_weights, logits  # noqa: F401
from ubatch.model.gguf_file import GGUFFile
from ubatch.model.hparams import ROPE_NORM, HParams, read_hparams

NAME = "granitemoe"
ROPE_TYPE = ROPE_NORM
FUSED = True


def load_hparams(f: GGUFFile) -> HParams:
    hp = read_hparams(f, NAME, ROPE_TYPE, experts=True)
    granite.apply_multipliers(f, hp, embd=0.0, residual=0.0, logit=0.0, logit_required=True)
    hp.moe = moe.read_moe(f, hp, norm_w=True, shared=True, ff_exp=hp.n_ff, shared_default=0, shexp_gated=False)
    return hp
