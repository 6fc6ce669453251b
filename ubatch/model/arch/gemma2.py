"""gemma2 (Gemma 2 2B / 9B / 27B): gemma3's layer without the q/k norms — embeddings x sqrtf(n_embd), the
four norms per layer used as stored (they contain the +1), Q pre-scaled by 1/sqrt(key_length) (27B:
1/sqrt(n_embd / n_head)) with softmax scale 1, attention scores soft-capped c * tanh(s / c)
(attn_logit_softcapping, default 50), GeGLU through ggml's f16 GELU table, sliding-window attention on
alternate layers (sliding_window default 4096, pattern default 2: even layers slide) on the two-cache iSWA
memory, one RoPE base and scale for all layers (freq_base_swa defaults to freq_base), the final logits
soft-capped (final_logit_softcapping, default 30), output tied to token_embd (llama.cpp's gemma2 graph)."""
from __future__ import annotations

import math

from ubatch.model.arch import gemma3
from ubatch.model.gguf_file import GGUFFile
from ubatch.model.hparams import ROPE_NEOX, HParams, _float, _int, read_hparams
from ubatch.model.weights import TensorSource

NAME = "gemma2"
ROPE_TYPE = ROPE_NEOX
DEFAULT_SWA = 4096
DEFAULT_SWA_PATTERN = 2
DEFAULT_ATTN_SOFTCAP = 50.0
DEFAULT_FINAL_SOFTCAP = 30.0


def load_hparams(f: GGUFFile) -> HParams:
    hp = read_hparams(f, NAME, ROPE_TYPE)
    md = f.metadata
    hp.n_swa = _int(f, f"{NAME}.attention.sliding_window", md.get(f"{NAME}.attention.sliding_window", DEFAULT_SWA), 0)
    hp.swa_layers = gemma3.swa_pattern(f, hp.n_layer, NAME, DEFAULT_SWA_PATTERN)
    hp.rope_freq_base_swa = _float(f, f"{NAME}.rope.freq_base_swa",
                                   md.get(f"{NAME}.rope.freq_base_swa", hp.rope_freq_base))
    hp.rope_freq_scale_swa = hp.rope_freq_scale
    head = hp.n_embd // hp.n_head if hp.n_layer == 46 else hp.head_dim   # the 27B: 1/sqrt(n_embd / n_head)
    hp.q_scale = 1.0 / math.sqrt(head)
    hp.kq_scale = 1.0
    hp.embd_scale = float(gemma3.np.sqrt(gemma3.np.float32(hp.n_embd), dtype=gemma3.np.float32))
    hp.attn_logit_softcap = _float(f, f"{NAME}.attn_logit_softcapping",
                                   md.get(f"{NAME}.attn_logit_softcapping", DEFAULT_ATTN_SOFTCAP))
    hp.final_logit_softcap = _float(f, f"{NAME}.final_logit_softcapping",
                                    md.get(f"{NAME}.final_logit_softcapping", DEFAULT_FINAL_SOFTCAP))
    return hp


def load_weights(src: TensorSource, hp: HParams) -> gemma3.Weights:
    e, hq, hk = hp.n_embd, hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim
    tok = src.matrix("token_embd.weight", e, hp.n_vocab)
    layers = []
    for i in range(hp.n_layer):
        p = f"blk.{i}."
        layers.append(gemma3.Layer(
            attn_norm=src.vector(p + "attn_norm.weight", e),
            wq=src.matrix(p + "attn_q.weight", e, hq), wk=src.matrix(p + "attn_k.weight", e, hk),
            wv=src.matrix(p + "attn_v.weight", e, hk), wo=src.matrix(p + "attn_output.weight", hq, e),
            q_norm=None, k_norm=None,
            post_attn_norm=src.vector(p + "post_attention_norm.weight", e),
            ffn_norm=src.vector(p + "ffn_norm.weight", e),
            w_gate=src.matrix(p + "ffn_gate.weight", e, hp.n_ff), w_up=src.matrix(p + "ffn_up.weight", e, hp.n_ff),
            w_down=src.matrix(p + "ffn_down.weight", hp.n_ff, e),
            post_ffw_norm=src.vector(p + "post_ffw_norm.weight", e)))
    # llama.cpp's gemma2 always uses token_embd as the output (an output.weight in the file is not read)
    return gemma3.Weights(tok_embd=tok, output_norm=src.vector("output_norm.weight", e), output=tok, layers=layers)


forward = gemma3.forward
forward_reference = gemma3.forward_reference
embed = gemma3.embed
logits = gemma3.logits
