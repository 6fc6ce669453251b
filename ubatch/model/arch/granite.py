"""granite (IBM Granite 3.x dense): the llama decoder (NORM RoPE, optional Q/K/V/O biases, rope factors) with
its four multipliers: token embeddings x embedding_scale, each block's output (attention after wo, FFN after
w_down) x residual_scale before the residual add, softmax scale attention.scale (else 1/sqrt(head_dim)), logits
/ logit_scale (required key); rope.scaling.finetuned = false turns RoPE off (llama.cpp src/models/granite.cpp:
granite uses it as a switch). minicpm shares this graph with other defaults (arch/minicpm.py)."""
from __future__ import annotations

import numpy as np

from ubatch.model.arch import llama
from ubatch.model.gguf_file import GGUFError, GGUFFile
from ubatch.model.hparams import ROPE_NORM, HParams, _float, read_hparams
from ubatch.model.weights import TensorSource

NAME = "granite"
ROPE_TYPE = ROPE_NORM
FUSED = True


def _opt(f: GGUFFile, key: str, default: float) -> float:
    v = f.metadata.get(key)
    return default if v is None else _float(f, key, v, positive=False)


def apply_multipliers(f: GGUFFile, hp: HParams, *, embd: float, residual: float, logit: float,
                      logit_required: bool) -> None:
    """The granite-graph multipliers of arch hp.arch from their keys (defaults given; 0 = not applied)."""
    a = hp.arch
    if logit_required and f"{a}.logit_scale" not in f.metadata:
        raise GGUFError(f"{f.path}: key not found in model: {a}.logit_scale")
    e = _opt(f, f"{a}.embedding_scale", embd)
    hp.embd_scale = e if e != 0.0 else 1.0
    hp.residual_scale = _opt(f, f"{a}.residual_scale", residual)
    hp.logit_scale = _opt(f, f"{a}.logit_scale", logit)
    if f.metadata.get(f"{a}.logit_scale") is not None and hp.logit_scale == 0.0:
        raise GGUFError(f"{f.path}: {a}.logit_scale = 0 (logits / 0)")
    s = _opt(f, f"{a}.attention.scale", 0.0)
    if s != 0.0:
        hp.kq_scale = float(np.float32(s))


def load_hparams(f: GGUFFile) -> HParams:
    hp = read_hparams(f, NAME, ROPE_TYPE)
    apply_multipliers(f, hp, embd=0.0, residual=0.0, logit=0.0, logit_required=True)
    fin = f.metadata.get(f"{NAME}.rope.scaling.finetuned", True)
    if not isinstance(fin, (bool, np.bool_)):
        raise GGUFError(f"{f.path}: {NAME}.rope.scaling.finetuned = {fin!r} must be a bool")
    hp.rope_pattern = tuple([bool(fin)] * hp.n_layer)
    return hp


def load_weights(src: TensorSource, hp: HParams) -> llama.Weights:
    return llama.load_decoder(src, hp, require_qkv_bias=False, ffn_bias=True)


forward = llama.forward
forward_reference = llama.decoder_forward
embed = llama.embed
logits = llama.logits
