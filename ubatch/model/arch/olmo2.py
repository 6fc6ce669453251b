"""olmo2 (OLMo 2 1B ... 32B): no pre-norms — Q/K/V read the residual stream itself —, RMSNorm over the whole
Q row ({n_embd}) and K row ({n_head_kv * head_dim}) before NEOX RoPE, post-norms on the attention output
(post_attention_norm) and the FFN output (post_ffw_norm) before each residual add, separate output
(llama.cpp src/models/olmo2.cpp). OLMo 3's sliding-window layers are refused (not supported).
`load_postnorm_decoder` is this block's loader, shared with exaone4 (per-head Q/K norms, tied output)."""
from __future__ import annotations

from ubatch.model.arch import llama
from ubatch.model.gguf_file import GGUFError, GGUFFile
from ubatch.model.hparams import ROPE_NEOX, HParams, read_hparams
from ubatch.model.weights import TensorSource

NAME = "olmo2"
ROPE_TYPE = ROPE_NEOX
FUSED = True


def load_hparams(f: GGUFFile) -> HParams:
    hp = read_hparams(f, NAME, ROPE_TYPE)
    n_swa = f.metadata.get(f"{NAME}.attention.sliding_window", 0)
    if n_swa:
        raise GGUFError(f"{f.path}: {NAME}.attention.sliding_window = {n_swa}: OLMo 3 sliding-window layers are "
                        f"not supported")
    return hp


def load_postnorm_decoder(src: TensorSource, hp: HParams, arch: str, *, per_head_qk_norm: bool,
                          tied: bool) -> llama.Weights:
    """The post-norm block's tensors (no pre-norms; optional Q/K/V biases; Q/K norms over the whole row or,
    per_head_qk_norm, per head; post-attention / post-FFN norms); tied: output.weight optional (token_embd
    when absent) and the Llama-3 rope_freqs read, else output.weight required."""
    e, hd, hq, hk = llama.attn_dims(src, hp, arch)
    qn, kn = (hd, hd) if per_head_qk_norm else (e, hk)
    layers = []
    for i in range(hp.n_layer):
        p = f"blk.{i}."
        layers.append(llama.Layer(
            attn_norm=None, ffn_norm=None,
            wq=src.matrix(p + "attn_q.weight", e, hq), wk=src.matrix(p + "attn_k.weight", e, hk),
            wv=src.matrix(p + "attn_v.weight", e, hk), wo=src.matrix(p + "attn_output.weight", e, e),
            bq=src.vector(p + "attn_q.bias", hq, required=False), bk=src.vector(p + "attn_k.bias", hk, required=False),
            bv=src.vector(p + "attn_v.bias", hk, required=False),
            q_norm=src.vector(p + "attn_q_norm.weight", qn), k_norm=src.vector(p + "attn_k_norm.weight", kn),
            post_attn_norm=src.vector(p + "post_attention_norm.weight", e),
            w_gate=src.matrix(p + "ffn_gate.weight", e, hp.n_ff), w_up=src.matrix(p + "ffn_up.weight", e, hp.n_ff),
            w_down=src.matrix(p + "ffn_down.weight", hp.n_ff, e),
            post_ffw_norm=src.vector(p + "post_ffw_norm.weight", e)))
        llama.refuse_ffn_bias(src, p)
    tok = src.matrix("token_embd.weight", e, hp.n_vocab)
    norm = src.vector("output_norm.weight", e)
    out = src.matrix("output.weight", e, hp.n_vocab, required=not tied)
    factors = llama.load_rope_factors(src, hp, longrope=False) if tied else {}
    return llama.Weights(tok_embd=tok, output_norm=norm, output=out if out is not None else tok, layers=layers,
                         **factors)


def load_weights(src: TensorSource, hp: HParams) -> llama.Weights:
    return load_postnorm_decoder(src, hp, NAME, per_head_qk_norm=False, tied=False)


forward = llama.forward
forward_reference = llama.decoder_forward
embed = llama.embed
logits = llama.logits
