"""Hyperparameters read from GGUF metadata with llama.cpp's defaults (docs/llama-cpp-behaviours.md §M1.1-M1.3).

`read_hparams(f, arch)` returns an HParams; the architecture module supplies what differs (rope type, the
epsilon key being required, gemma3's sliding window and attention scale). A missing required key raises
GGUFError "key not found in model: <key>" (llama.cpp's wording) naming the file."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Tuple

import numpy as np

from ubatch.common.params import ROPE_NEOX, ROPE_NORM  # hparams.rope_type is one of these
from ubatch.model.gguf_file import GGUFError, GGUFFile

ROPE_SCALINGS = ("none", "linear", "yarn", "longrope")


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
    attn_logit_softcap: float = 0.0    # gemma2: attention scores c * tanh(s / c) before the softmax; 0: none
    moe: Any = None                    # ubatch.model.moe.MoEParams of a mixture-of-experts arch, else None
    # RoPE scaling beyond linear (llama.cpp's cparams for a context of the model's own parameters)
    rope_scaling: str = "linear"       # rope.scaling.type: none / linear / yarn / longrope
    rope_ext_factor: float = 0.0       # YaRN's ext_factor (1 with yarn)
    rope_attn_factor: float = 1.0      # the context's attn_factor on cos/sin (YaRN's mscale ratio x the key's)
    rope_attn_factor_key: float = 1.0  # rope.scaling.attn_factor as stored
    n_ctx_orig_yarn: int = 0           # rope.scaling.original_context_length (default n_ctx_train)
    yarn_beta_fast: float = 32.0
    yarn_beta_slow: float = 1.0
    rope_pattern: Tuple[bool, ...] = field(default_factory=tuple)   # has_rope per layer (granite: finetuned)
    no_rope_layer_step: int = 0        # smollm3: layers il with (il + 1) % step == 0 skip RoPE in the forward
    residual_scale: float = 0.0        # granite / minicpm: attention and FFN outputs x it before the residual add
    logit_scale: float = 0.0           # granite / minicpm: logits / it

    def is_swa(self, il: int) -> bool:
        return bool(self.swa_layers[il]) if self.swa_layers else False

    def has_rope(self, il: int) -> bool:
        """llama.cpp's has_rope(il): whether the K-shift re-rotates layer il."""
        return bool(self.rope_pattern[il]) if self.rope_pattern else True

    def uses_rope(self, il: int) -> bool:
        """Whether the forward rotates Q/K of layer il (has_rope, and not a smollm3 NoPE layer)."""
        step = self.no_rope_layer_step
        return self.has_rope(il) and not (step and (il + 1) % step == 0)

    def rope_params(self, il: int) -> Tuple[float, float]:
        """(freq_base, freq_scale) of layer il (docs/llama-cpp-behaviours.md §M1.3)."""
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
            if isinstance(v, list) or v.dtype.kind not in "iu":
                raise GGUFError(f"{self.f.path}: {key} must be an integer or an array of integers")
            vals = sorted(set(int(x) for x in v))
            if len(v) != n_layer or len(vals) != 1:
                raise GGUFError(f"{self.f.path}: {key} varies per layer ({list(v)[:8]}...), not supported")
            return _int(self.f, key, vals[0], 0)
        return _int(self.f, key, v, 0)


INT_MAX = 2**31 - 1


def _show(v: Any) -> str:
    r = repr(v.tolist() if isinstance(v, np.ndarray) else v)
    return r if len(r) <= 60 else r[:57] + "..."


def _int(f: GGUFFile, key: str, v: Any, lo: int = 1, hi: int = INT_MAX) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= int(v) <= hi:
        raise GGUFError(f"{f.path}: {key} = {_show(v)} must be an integer in [{lo}, {hi}]")
    return int(v)


def _float(f: GGUFFile, key: str, v: Any, *, positive: bool = True) -> float:
    """A finite number (> 0, or >= 0 with positive=False) that stays so as a float32 (the kernels' type)."""
    ok = not isinstance(v, bool) and isinstance(v, (int, float, np.integer, np.floating))
    if ok:
        x = float(v)
        x32 = float(np.float32(x)) if math.isfinite(x) and abs(x) < 3.4e38 else math.inf
        ok = math.isfinite(x32) and (x32 > 0 if positive else x32 >= 0)
    if not ok:
        raise GGUFError(f"{f.path}: {key} = {_show(v)} must be a finite number {'> 0' if positive else '>= 0'}")
    return x


def check_hparams(f: GGUFFile, hp: "HParams") -> None:
    """What the kernels would refuse at the first decode, refused at load naming the key."""
    a = hp.arch
    _float(f, f"{a}.attention.layer_norm_rms_epsilon", hp.rms_eps)
    _float(f, f"{a}.rope.freq_base", hp.rope_freq_base)
    _float(f, f"{a}.rope.scaling.factor", hp.rope_freq_scale)
    if hp.n_swa:
        _int(f, f"{a}.attention.sliding_window", hp.n_swa, 0)
        _float(f, f"{a}.rope.freq_base_swa", hp.rope_freq_base_swa)
    _float(f, f"{a}.final_logit_softcapping", hp.final_logit_softcap, positive=False)
    _float(f, f"{a}.attn_logit_softcapping", hp.attn_logit_softcap, positive=False)
    if hp.n_rot % 2:
        raise GGUFError(f"{f.path}: {a}.rope.dimension_count = {hp.n_rot} must be even")


def read_hparams(f: GGUFFile, arch: str, rope_type: int, *, experts: bool = False,
                 partial_rope: bool = False) -> HParams:
    """The hyperparameters every architecture shares (llama_model_base::load_hparams); experts=True: the
    arch reads expert_count itself (ubatch.model.moe), else a file with experts is refused; partial_rope: the
    architecture rotates only the first rope.dimension_count dims of a head (phi3), else they must be equal."""
    k = _Keys(f, arch)
    n_embd = _int(f, f"{arch}.embedding_length", k.req("embedding_length"))
    n_layer = _int(f, f"{arch}.block_count", k.req("block_count"))
    if n_layer > max(len(f.tensors), 1024):   # every layer has tensors: a count the file cannot hold is corrupt
        raise GGUFError(f"{f.path}: {arch}.block_count = {n_layer} exceeds the {len(f.tensors)} tensors of the file")
    n_ctx_train = _int(f, f"{arch}.context_length", k.req("context_length"))
    if not experts and _int(f, f"{arch}.expert_count", k.get("expert_count", 0), 0) > 0:
        raise GGUFError(f"{f.path}: {arch}.expert_count > 0: arch {arch!r} has no mixture-of-experts layers "
                        f"(supported MoE archs: qwen2moe, qwen3moe)")
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
    if n_rot > head_k or (n_rot != head_k and not partial_rope):
        raise GGUFError(f"{f.path}: invalid n_rot: {n_rot}, expected {head_k}")
    eps = _float(f, f"{arch}.attention.layer_norm_rms_epsilon", k.req("attention.layer_norm_rms_epsilon"))
    scaling = k.get("rope.scaling.type", "linear")
    if not isinstance(scaling, str) or scaling not in ROPE_SCALINGS:
        raise GGUFError(f"{f.path}: {arch}.rope.scaling.type = {scaling!r} is not supported "
                        f"({', '.join(ROPE_SCALINGS)})")
    fkey = f"{arch}.rope.scaling.factor" if f"{arch}.rope.scaling.factor" in f.metadata else f"{arch}.rope.scale_linear"
    factor = f.metadata.get(fkey, 0.0)
    if isinstance(factor, (int, float, np.number)) and not isinstance(factor, bool) and factor == 0:
        factor = 0.0
    else:
        factor = _float(f, fkey, factor)
    freq_scale = 1.0 if (not factor or scaling == "none") else float(np.float32(1.0) / np.float32(factor))
    freq_base = _float(f, f"{arch}.rope.freq_base", k.get("rope.freq_base", 10000.0))
    attn_key = _float(f, f"{arch}.rope.scaling.attn_factor", k.get("rope.scaling.attn_factor", 1.0))
    n_ctx_orig = _int(f, f"{arch}.rope.scaling.original_context_length",
                      k.get("rope.scaling.original_context_length", n_ctx_train))
    if k.get("rope.scaling.yarn_log_multiplier", 0.0) not in (0, 0.0):
        raise GGUFError(f"{f.path}: {arch}.rope.scaling.yarn_log_multiplier is not supported")
    ext = 1.0 if scaling == "yarn" else 0.0
    from ubatch._ffi import lib
    attn = float(lib.ub_rope_attn_factor(ext, freq_scale, attn_key))
    toks = f.metadata.get("tokenizer.ggml.tokens")
    if toks is not None and f.metadata.get("tokenizer.ggml.model") != "no_vocab":
        n_vocab = len(toks)
    else:
        n_vocab = k.get("vocab_size")
        if n_vocab is not None:
            n_vocab = _int(f, f"{arch}.vocab_size", n_vocab)
        else:
            emb = f.tensor("token_embd.weight")
            if emb is None:
                raise GGUFError(f"{f.path}: missing tensor 'token_embd.weight'")
            n_vocab = emb.n_rows
    return HParams(arch=arch, n_vocab=int(n_vocab), n_embd=n_embd, n_layer=n_layer, n_head=n_head,
                   n_head_kv=n_head_kv, n_ff=n_ff, head_dim=head_k, n_rot=n_rot, n_ctx_train=n_ctx_train,
                   rms_eps=eps, rope_type=rope_type, rope_freq_base=freq_base, rope_freq_scale=freq_scale,
                   swa_layers=tuple([False] * n_layer), kq_scale=1.0 / math.sqrt(head_k), rope_scaling=scaling,
                   rope_ext_factor=ext, rope_attn_factor=attn, rope_attn_factor_key=attn_key,
                   n_ctx_orig_yarn=n_ctx_orig)


__all__ = ["HParams", "read_hparams", "check_hparams", "ROPE_NORM", "ROPE_NEOX"]
