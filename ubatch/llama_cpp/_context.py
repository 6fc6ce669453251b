"""Context objects of the low-level layer: a ubatch.Context built from llama_context_params (llama.cpp's
derivation of n_ctx / n_batch / n_ubatch / n_seq_max), the outputs of the last decode kept alive as float32
buffers whose pointers the getters return, and the perf counters."""
from __future__ import annotations

import time
from typing import List, Optional

import numpy as np

from ubatch.llama_cpp import _llama_log
from ubatch.llama_cpp._constants import KV_TYPE_NAMES, LLAMA_MAX_SEQ, POOLING_NAMES
from ubatch.llama_cpp._handles import REGISTRY

_POOLING_BY_NAME = {"none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}


class ContextParamError(ValueError):
    pass


class CContext:
    """What a llama_context handle names (its llama_memory handle names the same object)."""

    def __init__(self, model, params) -> None:
        import ubatch

        self.cmodel = model
        self.params = params
        n_seq_max = int(params.n_seq_max)
        if n_seq_max > LLAMA_MAX_SEQ:
            raise ContextParamError(f"n_seq_max must be <= {LLAMA_MAX_SEQ}")
        types = []
        for name in ("type_k", "type_v"):
            t = int(getattr(params, name))
            if t not in KV_TYPE_NAMES:
                raise NotImplementedError(f"{name} = {t}: not a K/V cache type (GGML_TYPE_* ids "
                                          f"{sorted(KV_TYPE_NAMES)}: {', '.join(KV_TYPE_NAMES.values())})")
            types.append(KV_TYPE_NAMES[t])
        pooling = int(params.pooling_type)
        if pooling == -1:
            pooling = int(model.raw.get(f"{model.arch}.pooling_type", 0))
        if pooling not in POOLING_NAMES:
            raise NotImplementedError(f"pooling_type = {pooling} (rank pooling) is not supported")
        self.pooling = pooling
        causal = int(params.attention_type) != 1
        n_ctx = int(params.n_ctx) or int(model.hparam("n_ctx_train"))
        self.n_threads = int(params.n_threads) if int(params.n_threads) > 0 else 4
        self.n_threads_batch = int(params.n_threads_batch) if int(params.n_threads_batch) > 0 else self.n_threads
        self.ctx = ubatch.Context(_rope_model(model.model, params), n_ctx=n_ctx, n_batch=max(int(params.n_batch), 1),
                                  n_ubatch=int(params.n_ubatch), n_seq_max=max(n_seq_max, 1),
                                  kv_unified=bool(params.kv_unified), embeddings=bool(params.embeddings),
                                  pooling=POOLING_NAMES[pooling], type_k=types[0], type_v=types[1],
                                  n_threads=self.n_threads_batch, causal_attn=causal,
                                  flash_attn=int(params.flash_attn_type), swa_full=bool(params.swa_full))
        for w in self.ctx.warnings:
            _llama_log.warn(f"llama_context: {w}")
        self.embeddings = bool(params.embeddings)
        self.no_perf = bool(params.no_perf)
        self._keep: List[np.ndarray] = []       # outputs handed out as pointers, valid until the next decode
        self.t_start_ms = time.time() * 1e3
        self.t_p_eval_ms = self.t_eval_ms = 0.0
        self.n_p_eval = self.n_eval = 0
        self.abort_cb = None
        self.handle = REGISTRY.new("context", self)
        self.mem_handle = REGISTRY.new("memory", self)

    @property
    def kv(self):
        return self.ctx.memory

    def free(self) -> None:
        REGISTRY.free(self.handle)
        REGISTRY.free(self.mem_handle)
        self._keep = []
        self.ctx.close()

    def keep(self, arr: np.ndarray) -> np.ndarray:
        self._keep.append(arr)
        return arr

    def outputs_changed(self) -> None:
        self._keep = []
        self.restored = None

    # outputs: the live ones of the last decode, or those restored with a saved state until the next decode
    restored = None

    def snapshot_outputs(self):
        try:
            return (np.array(self.ctx.get_logits(), np.float32), self.ctx.output_ids.copy(), self.ctx.n_outputs)
        except Exception:
            return None

    def logits_rows(self) -> np.ndarray:
        if self.restored is not None:
            return self.restored[0]
        return self.ctx.get_logits()

    def logits_ith(self, i: int) -> np.ndarray:
        if self.restored is None:
            return self.ctx.get_logits_ith(i)
        rows, ids, n = self.restored
        j = n + i if i < 0 else (int(ids[i]) if 0 <= i < len(ids) else -1)
        if not 0 <= j < n:
            raise IndexError(f"invalid logits id {i}")
        return rows[j]

    def count(self, n_tokens: int, seconds: float) -> None:
        if n_tokens > 1:
            self.n_p_eval += n_tokens
            self.t_p_eval_ms += seconds * 1e3
        else:
            self.n_eval += n_tokens
            self.t_eval_ms += seconds * 1e3

    def reset_perf(self) -> None:
        self.t_start_ms = time.time() * 1e3
        self.t_p_eval_ms = self.t_eval_ms = 0.0
        self.n_p_eval = self.n_eval = 0


def check_rope(params) -> None:
    """Raises NotImplementedError for the RoPE variants ubatch's kernel lacks (YaRN, LongRoPE)."""
    rtype = int(params.rope_scaling_type)
    if rtype in (2, 3):
        raise NotImplementedError(f"rope_scaling_type = {rtype} ({'YaRN' if rtype == 2 else 'LongRoPE'}): ubatch's "
                                  f"RoPE does not implement it")
    if float(params.yarn_ext_factor) > 0.0:
        raise NotImplementedError(f"yarn_ext_factor = {params.yarn_ext_factor}: YaRN is not implemented by ubatch")
    if float(params.yarn_attn_factor) >= 0.0 and float(params.yarn_attn_factor) != 1.0:   # < 0: the model's (1)
        raise NotImplementedError(f"yarn_attn_factor = {params.yarn_attn_factor}: YaRN's attention factor is not "
                                  f"implemented by ubatch (1.0 is the only value)")


def _rope_model(model, params):
    """The model with the context's RoPE parameters applied as llama.cpp derives them (cparams): rope_freq_base /
    rope_freq_scale 0 = the model's, rope_scaling_type NONE = no scaling, LINEAR = freq_scale; the sliding-window
    layers keep their own base, unscaled, as in llama.cpp. A model's own YaRN / rope factors apply (the attention
    factor recomputed for the context's freq_scale); YaRN or LongRoPE asked by the context (rope_scaling_type
    YARN / LONGROPE, yarn_ext_factor > 0, yarn_attn_factor != 1) raise: not implemented as context overrides. A model object
    with other parameters shares the weights (a shallow copy)."""
    if model is None:
        return None
    import copy
    import dataclasses
    check_rope(params)
    hp = model.hparams
    rtype = int(params.rope_scaling_type)
    base = float(params.rope_freq_base) or float(hp.rope_freq_base)
    scale = float(params.rope_freq_scale) or float(hp.rope_freq_scale)
    if rtype == 0:
        scale = 1.0
    if base <= 0.0 or scale <= 0.0:
        raise ValueError(f"rope_freq_base = {base} and rope_freq_scale = {scale} must be > 0")
    # the model's own YaRN (rope.scaling.type yarn) stays on unless the context names another scaling type;
    # its attention factor follows the context's freq_scale (llama_context's cparams)
    ext = hp.rope_ext_factor if rtype < 0 else (1.0 if rtype == 2 else 0.0)
    if float(params.yarn_ext_factor) == 0.0:
        ext = 0.0
    from ubatch._ffi import lib
    attn = float(lib.ub_rope_attn_factor(ext, scale, hp.rope_attn_factor_key))
    if (base, scale, ext, attn) == (hp.rope_freq_base, hp.rope_freq_scale, hp.rope_ext_factor, hp.rope_attn_factor):
        return model
    m = copy.copy(model)
    m.hparams = dataclasses.replace(hp, rope_freq_base=base, rope_freq_scale=scale, rope_ext_factor=ext,
                                    rope_attn_factor=attn)
    return m


def create(model, params) -> Optional[CContext]:
    try:
        return CContext(model, params)
    except (ContextParamError, NotImplementedError, ValueError, TypeError, MemoryError) as e:
        _llama_log.error(f"llama_init_from_model: failed to initialize the context: {e}")
        return None
