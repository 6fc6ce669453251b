"""exaone4 (EXAONE 4.0 1.2B): olmo2's block with per-head Q/K RMSNorm — no pre-norms, attn_q_norm /
attn_k_norm {head_dim} before NEOX RoPE, post_attention_norm / post_ffw_norm before each residual add —,
optional Llama-3 `rope_freqs.weight`, tied or separate output (llama.cpp src/models/exaone4.cpp). The 64-layer
32B, to which llama.cpp gives sliding-window layers (RoPE on those only), and files with NextN / MTP layers are
refused naming what is missing."""
from __future__ import annotations

from ubatch.model.arch import llama, olmo2
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
    return olmo2.load_postnorm_decoder(src, hp, NAME, per_head_qk_norm=True, tied=True)


forward = llama.forward
forward_reference = llama.decoder_forward
embed = llama.embed
logits = llama.logits
