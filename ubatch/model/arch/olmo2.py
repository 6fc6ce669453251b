"""olmo2 (OLMo 2 1B ... 32B): no pre-norms — Q/K/V read the residual stream itself —, RMSNorm over the whole
Q row ({n_embd}) and K row ({n_head_kv * head_dim}) before NEOX RoPE, post-norms on the attention output
(post_attention_norm) and the FFN output (post_ffw_norm) before each residual add, separate output
(llama.cpp src/models/olmo2.cpp). OLMo 3's sliding-window layers are refused (not supported)."""
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


def load_weights(src: TensorSource, hp: HParams) -> llama.Weights:
    e, hd = hp.n_embd, hp.head_dim
    hq, hk = hp.n_head * hd, hp.n_head_kv * hd
    if hq != e:
        raise GGUFError(f"{src.f.path}: olmo2 needs head_count * key_length = embedding_length "
                        f"({hp.n_head} * {hd} != {e})")
    layers = []
    for i in range(hp.n_layer):
        p = f"blk.{i}."
        layers.append(llama.Layer(
            attn_norm=None, ffn_norm=None,
            wq=src.matrix(p + "attn_q.weight", e, hq), wk=src.matrix(p + "attn_k.weight", e, hk),
            wv=src.matrix(p + "attn_v.weight", e, hk), wo=src.matrix(p + "attn_output.weight", e, e),
            bq=src.vector(p + "attn_q.bias", hq, required=False), bk=src.vector(p + "attn_k.bias", hk, required=False),
            bv=src.vector(p + "attn_v.bias", hk, required=False),
            q_norm=src.vector(p + "attn_q_norm.weight", e), k_norm=src.vector(p + "attn_k_norm.weight", hk),
            post_attn_norm=src.vector(p + "post_attention_norm.weight", e),
            w_gate=src.matrix(p + "ffn_gate.weight", e, hp.n_ff), w_up=src.matrix(p + "ffn_up.weight", e, hp.n_ff),
            w_down=src.matrix(p + "ffn_down.weight", hp.n_ff, e),
            post_ffw_norm=src.vector(p + "post_ffw_norm.weight", e)))
        llama.refuse_ffn_bias(src, p)
    return llama.Weights(tok_embd=src.matrix("token_embd.weight", e, hp.n_vocab),
                         output_norm=src.vector("output_norm.weight", e),
                         output=src.matrix("output.weight", e, hp.n_vocab), layers=layers)


forward = llama.forward
forward_reference = llama.decoder_forward
embed = llama.embed
logits = llama.logits
