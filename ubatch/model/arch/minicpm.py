"""minicpm (MiniCPM 1B / 2B): granite's graph (arch/granite.py) with MiniCPM's defaults when the keys are
absent — embedding_scale 12, residual_scale 1.4/sqrtf(n_layer), logit_scale 256/n_embd — always with RoPE
(NORM), softmax scale 1/sqrt(head_dim); usually tied output (llama.cpp src/models/minicpm.cpp)."""
from __future__ import annotations

import numpy as np

from ubatch.model.arch import granite
from ubatch.model.arch.granite import embed, forward, forward_reference, load_weights, logits  # noqa: F401
from ubatch.model.gguf_file import GGUFFile
from ubatch.model.hparams import ROPE_NORM, HParams, read_hparams

NAME = "minicpm"
ROPE_TYPE = ROPE_NORM
FUSED = True


def load_hparams(f: GGUFFile) -> HParams:
    hp = read_hparams(f, NAME, ROPE_TYPE)
    residual = float(np.float32(1.4) / np.sqrt(np.float32(hp.n_layer)))
    logit = float(np.float32(256.0) / np.float32(hp.n_embd))
    granite.apply_multipliers(f, hp, embd=12.0, residual=residual, logit=logit, logit_required=False)
    hp.kq_scale = 1.0 / float(np.sqrt(np.float32(hp.head_dim)))
    return hp
