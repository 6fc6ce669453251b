"""Hyperparameters read from GGUF metadata with llama.cpp's defaults (real-models.md §1.1-1.3).

`read_hparams(f, arch)` returns an HParams; the architecture module supplies what differs (rope type, the
epsilon key being required, gemma3's sliding window and attention scale). A missing required key raises
GGUFError "key not found in model: <key>" (llama.cpp's wording) naming the file."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Tuple

import numpy as np

from ubatch.model.gguf_file import GGUFError, GGUFFile

ROPE_NORM = 0   # LLAMA_ROPE_TYPE_NORM: adjacent pairs (llama)
ROPE_NEOX = 2   # LLAMA_ROPE_TYPE_NEOX: i with i + n_rot/2 (qwen2, gemma3)


@dataclass
class HParams:
    arch: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    head_dim: int              # key_length (= value_length for the supported architectures)
    n_rot: int
    n_ctx_train: int
    rms_eps: float
    rope_type: int
    rope_freq_base: float
    rope_freq_scale: float
    rope_freq_base_swa: float = 10000.0
    rope_freq_scale_swa: float = 1.0   # never read by llama.cpp: SWA layers ignore rope scaling
    n_swa: int = 0                     # 0: no sliding window
    swa_layers: Tuple[bool, ...] = field(default_factory=tuple)
    kq_scale: float = 0.0              # softmax scale (1/sqrt(head_dim), gemma3: 1.0 with Q pre-scaled)
    q_scale: float = 1.0               # gemma3: 1/sqrt(key_length) applied to Q after RoPE
    embd_scale: float = 1.0            # gemma3: sqrtf(n_embd) on token embeddings
    final_logit_softcap: float = 0.0   # 0: none

    def is_swa(self, il: int) -> bool:
        return bool(self.swa_layers[il]) if self.swa_layers else False

    def rope_params(self, il: int) -> Tuple[float, float]:
        """(freq_base, freq_scale) of layer il (real-models.md §1.3)."""
        if self.n_swa > 0 and self.is_swa(il):
            return self.rope_freq_base_swa, self.rope_freq_scale_swa
        return self.rope_freq_base, self.rope_freq_scale


class _Keys:
    def __init__(self, f: GGUFFile, arch: str) -> None:
        self.f, self.arch = f, arch

    def get(self, suffix: str, default: Any = None) -> Any:
        return self.f.metadata.get(f"{self.arch}.{suffix}", default)

    def req(self, suffix: str) -> Any:
        key = f"{self.arch}.{suffix}"
        if key not in self.f.metadata:
            raise GGUFError(f"{self.f.path}: key not found in model: {key}")
        return self.f.metadata[key]

    def scalar_per_layer(self, suffix: str, n_layer: int, default: int) -> int:
        """A per-layer key stored as a scalar or an array; the supported archs need one value for all."""
        key = f"{self.arch}.{suffix}"
        v = self.f.metadata.get(key, default)
        if isinstance(v, (np.ndarray, list)):
            vals = sorted(set(int(x) for x in v))
            if len(v) != n_layer or len(vals) != 1:
                raise GGUFError(f"{self.f.path}: {key} varies per layer ({list(v)[:8]}...), not supported")
            return vals[0]
        return int(v)


def _int(f: GGUFFile, key: str, v: Any, lo: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < lo:
        raise GGUFError(f"{f.path}: {key} = {v!r} must be an integer >= {lo}")
    return int(v)


def read_hparams(f: GGUFFile, arch: str, rope_type: int) -> HParams:
    """The hyperparameters every architecture shares (llama_model_base::load_hparams)."""
    k = _Keys(f, arch)
    n_embd = _int(f, f"{arch}.embedding_length", k.req("embedding_length"))
    n_layer = _int(f, f"{arch}.block_count", k.req("block_count"))
    n_ctx_train = _int(f, f"{arch}.context_length", k.req("context_length"))
    if int(k.get("expert_count", 0) or 0) > 0:
        raise GGUFError(f"{f.path}: {arch}.expert_count > 0: mixture-of-experts models are not supported")
    n_head = k.scalar_per_layer("attention.head_count", n_layer, 0)
    if n_head <= 0:
        raise GGUFError(f"{f.path}: key not found in model: {arch}.attention.head_count")
    n_head_kv = k.scalar_per_layer("attention.head_count_kv", n_layer, n_head)
    n_ff = k.scalar_per_layer("feed_forward_length", n_layer, 0)
    if n_ff <= 0:
        raise GGUFError(f"{f.path}: key not found in model: {arch}.feed_forward_length")
    if n_head_kv <= 0 or n_head % n_head_kv:
        raise GGUFError(f"{f.path}: {arch}.attention.head_count = {n_head} is not a multiple of "
                        f"head_count_kv = {n_head_kv}")
    head_k = _int(f, f"{arch}.attention.key_length", k.get("attention.key_length", n_embd // n_head))
    head_v = _int(f, f"{arch}.attention.value_length", k.get("attention.value_length", n_embd // n_head))
    if head_k != head_v:
        raise GGUFError(f"{f.path}: {arch}.attention.key_length {head_k} != value_length {head_v} (not supported)")
    n_rot = _int(f, f"{arch}.rope.dimension_count", k.get("rope.dimension_count", head_k))
    if n_rot != head_k:
        raise GGUFError(f"{f.path}: invalid n_rot: {n_rot}, expected {head_k}")
    eps = float(k.req("attention.layer_norm_rms_epsilon"))
    scaling = k.get("rope.scaling.type", "linear")
    if scaling not in ("none", "linear"):
        raise GGUFError(f"{f.path}: {arch}.rope.scaling.type = {scaling!r} is not supported (none, linear)")
    factor = k.get("rope.scaling.factor", k.get("rope.scale_linear", 0.0)) or 0.0
    freq_scale = 1.0 if (not factor or scaling == "none") else 1.0 / float(factor)
    freq_base = float(k.get("rope.freq_base", 10000.0))
    if not freq_base > 0:
        raise GGUFError(f"{f.path}: {arch}.rope.freq_base = {freq_base} must be > 0")
    toks = f.metadata.get("tokenizer.ggml.tokens")
    if toks is not None and f.metadata.get("tokenizer.ggml.model") != "no_vocab":
        n_vocab = len(toks)
    else:
        n_vocab = k.get("vocab_size")
        if n_vocab is None:
            emb = f.tensor("token_embd.weight")
            if emb is None:
                raise GGUFError(f"{f.path}: missing tensor 'token_embd.weight'")
            n_vocab = emb.n_rows
    return HParams(arch=arch, n_vocab=int(n_vocab), n_embd=n_embd, n_layer=n_layer, n_head=n_head,
                   n_head_kv=n_head_kv, n_ff=n_ff, head_dim=head_k, n_rot=n_rot, n_ctx_train=n_ctx_train,
                   rms_eps=eps, rope_type=rope_type, rope_freq_base=freq_base, rope_freq_scale=freq_scale,
                   swa_layers=tuple([False] * n_layer), kq_scale=1.0 / math.sqrt(head_k))


__all__ = ["HParams", "read_hparams", "ROPE_NORM", "ROPE_NEOX"]
