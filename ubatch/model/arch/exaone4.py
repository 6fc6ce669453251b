"""exaone4 (EXAONE 4.0 1.2B): olmo2's block with per-head Q/K RMSNorm — no pre-norms, attn_q_norm /
attn_k_norm {head_dim} before NEOX RoPE, post_attention_norm / post_ffw_norm before each residual add —,
optional Llama-3 `rope_freqs.weight`, tied or separate output (llama.cpp src/models/exaone4.cpp). The 64-layer
32B, to which llama.cpp gives sliding-window layers (RoPE on those only), and files with NextN / MTP layers are
refused naming what is missing."""
from __future__ import annotations

from ubatch.model.arch import llama
from ubatch.model.gguf_file import GGUFError, GGUFFile
from ubatch.model.hparams import ROPE_NEOX, HParams, read_hparams
from ubatch.model.weights import TensorSource

NAME = "exaone4"
ROPE_TYPE = ROPE_NEOX
FUSED = True


def load_hparams(f: GGUFFile) -> HParams:
    nextn = f.metadata.get(f"{NAME}.nextn_predict_layers", 0)
    if nextn:
        raise GGUFError(f"{f.path}: {NAME}.nextn_predict_layers = {nextn}: NextN / MTP layers are not supported")
    hp = read_hparams(f, NAME, ROPE_TYPE)
    if hp.n_layer == 64:
        raise GGUFError(f"{f.path}: {NAME}.block_count = 64 (EXAONE 4.0 32B): its sliding-window layers "
                        f"(window 4096, pattern 4, RoPE on those only) are not supported")
    return hp


def load_weights(src: TensorSource, hp: HParams) -> llama.Weights:
    e, hd = hp.n_embd, hp.head_dim
    hq, hk = hp.n_head * hd, hp.n_head_kv * hd
    if hq != e:
        raise GGUFError(f"{src.f.path}: exaone4 needs head_count * key_length = embedding_length "
                        f"({hp.n_head} * {hd} != {e})")
    tok = src.matrix("token_embd.weight", e, hp.n_vocab)
    out = src.matrix("output.weight", e, hp.n_vocab, required=False)
    layers = []
    for i in range(hp.n_layer):
        p = f"blk.{i}."
        layers.append(llama.Layer(
            attn_norm=None, ffn_norm=None,
            wq=src.matrix(p + "attn_q.weight", e, hq), wk=src.matrix(p + "attn_k.weight", e, hk),
            wv=src.matrix(p + "attn_v.weight", e, hk), wo=src.matrix(p + "attn_output.weight", e, e),
            bq=src.vector(p + "attn_q.bias", hq, required=False), bk=src.vector(p + "attn_k.bias", hk, required=False),
            bv=src.vector(p + "attn_v.bias", hk, required=False),
            q_norm=src.vector(p + "attn_q_norm.weight", hd), k_norm=src.vector(p + "attn_k_norm.weight", hd),
            post_attn_norm=src.vector(p + "post_attention_norm.weight", e),
            w_gate=src.matrix(p + "ffn_gate.weight", e, hp.n_ff), w_up=src.matrix(p + "ffn_up.weight", e, hp.n_ff),
            w_down=src.matrix(p + "ffn_down.weight", hp.n_ff, e),
            post_ffw_norm=src.vector(p + "post_ffw_norm.weight", e)))
        llama.refuse_ffn_bias(src, p)
    return llama.Weights(tok_embd=tok, output_norm=src.vector("output_norm.weight", e),
                         output=out if out is not None else tok, layers=layers,
                         **llama.load_rope_factors(src, hp, longrope=False))


forward = llama.forward
forward_reference = llama.decoder_forward
embed = llama.embed
logits = llama.logits
