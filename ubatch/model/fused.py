"""The fused forward: each decoder layer in one C call (csrc/compute/layer.c: ub_layer_forward) instead of
~15 kernel calls and numpy ops from Python. The C layer composes the same kernels as the Python reference
path (forward_reference in ubatch/model/arch/llama.py and gemma3.py) in the same order, so its results are
bitwise the same (tests/model/test_fused.py compares the two on every model).

    enabled(model)                    whether model's forward takes the fused path (UBATCH_FUSED=0 or
                                      set_enabled(False) turns it off; M-RoPE models are never fused)
    forward(model, step, x, keep)     the layer stack over one ubatch (what an arch's forward returns)
    layer_forward(layer, kv, x, pos, keep, n_threads)   one layer (the validated C call)

The per-layer constants (weight pointers, norms, hyperparameters) are built once per model and rebuilt when
the hyperparameters they copy change."""
from __future__ import annotations

import os
from typing import List, Optional, Tuple

import numpy as np

from ubatch._ffi import ffi, lib
from ubatch.common.params import ERR_LEN, ROPE_NEOX, ROPE_NORM

_enabled: Optional[bool] = None


def set_enabled(on: Optional[bool]) -> None:
    """Force the fused path on / off for every model (None: back to UBATCH_FUSED, default on)."""
    global _enabled
    _enabled = on


def enabled(model) -> bool:
    on = _enabled if _enabled is not None else os.environ.get("UBATCH_FUSED", "1") != "0"
    return bool(on) and model.hparams.rope_type in (ROPE_NORM, ROPE_NEOX) and \
        (model.arch in FUSED_ARCHS or getattr(model.arch_module, "FUSED", False))


FUSED_ARCHS = ("llama", "qwen2", "gemma3", "gemma2", "qwen2moe", "qwen3moe")   # and every arch with FUSED = True
GEMMA_LAYERS = ("gemma3", "gemma2")   # UB_LAYER_GEMMA3: post norms, GeGLU, Q scale


def _vec(keep: list, a: Optional[np.ndarray], n: int, name: str):
    if a is None:
        return ffi.NULL
    a = np.ascontiguousarray(a, dtype=np.float32)
    if a.shape != (n,):
        raise ValueError(f"fused layer: {name} has shape {a.shape}, expected ({n},)")
    keep.append(a)
    p = ffi.from_buffer("float[]", a)
    keep.append(p)
    return p


def _weight(dst, keep: list, w) -> None:
    qw = w.qweight()
    keep.append(qw)
    dst.data = qw.c_buf
    dst.nbytes, dst.n_rows, dst.n_cols, dst.type = qw.nbytes, qw.n_rows, qw.n_cols, qw.c_type


def _hp_key(model) -> tuple:
    hp = model.hparams
    return (hp.rms_eps, hp.n_rot, hp.rope_type, hp.q_scale, hp.kq_scale, hp.n_swa, tuple(hp.swa_layers),
            hp.rope_freq_base, hp.rope_freq_scale, getattr(hp, "rope_freq_base_swa", None),
            hp.rope_freq_scale_swa, hp.attn_logit_softcap, id(hp.moe), id(model.weights), hp.rope_ext_factor,
            hp.rope_attn_factor, hp.n_ctx_orig_yarn, hp.residual_scale,
            hp.no_rope_layer_step, hp.rope_pattern)


def _build(model, n_ctx: int) -> Tuple[List[object], list]:
    """The ub_layer structs of model for a context of n_ctx cells per sequence (LongRoPE picks its factors by
    it); every optional piece of the layer is set when the architecture's layer has it."""
    from ubatch.model import ops
    from ubatch.model.arch.llama import rope_ext
    hp, W = model.hparams, model.weights
    from ubatch.model import moe
    gemma = model.arch in GEMMA_LAYERS
    keep: list = []
    table = _vec(keep, ops.gelu_table(), 65536, "gelu_table") if gemma else ffi.NULL
    E, hq, hk, hd = hp.n_embd, hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim, hp.head_dim
    out = []
    for il, L in enumerate(W.layers):
        c = ffi.new("ub_layer *")
        c.kind = lib.UB_LAYER_GEMMA3 if gemma else lib.UB_LAYER_LLAMA
        c.n_embd, c.n_head, c.n_head_kv, c.head_dim = E, hp.n_head, hp.n_head_kv, hd
        c.n_ff, c.n_rot, c.rope_mode = L.w_gate.n_rows if L.w_gate is not None else 0, hp.n_rot, hp.rope_type
        base, scale = hp.rope_params(il)
        c.eps, c.rope_base, c.rope_scale = float(hp.rms_eps), float(base), float(scale)
        c.q_scale, c.kq_scale = float(np.float32(hp.q_scale)), float(hp.kq_scale)
        c.attn_softcap = float(hp.attn_logit_softcap)
        c.residual_scale = float(np.float32(hp.residual_scale))
        c.no_rope = 0 if hp.uses_rope(il) else 1
        ext = rope_ext(model, il, n_ctx)
        c.yarn = ext.cdata(hp.n_rot, base, keep) if ext is not None else ffi.NULL
        mw = getattr(L, "moe", None)
        if mw is not None:
            c.moe = moe.struct(mw, hp, keep)
        c.attn_norm = _vec(keep, L.attn_norm, E, "attn_norm")
        c.ffn_norm = _vec(keep, L.ffn_norm, E, "ffn_norm")
        qn, kn = getattr(L, "q_norm", None), getattr(L, "k_norm", None)
        if qn is not None or kn is not None:
            c.qk_norm_full = 0 if (qn is not None and qn.shape == (hd,)) else 1
            c.q_norm = _vec(keep, qn, hq if c.qk_norm_full else hd, "q_norm")
            c.k_norm = _vec(keep, kn, hk if c.qk_norm_full else hd, "k_norm")
        c.post_attn_norm = _vec(keep, getattr(L, "post_attn_norm", None), E, "post_attn_norm")
        c.post_ffw_norm = _vec(keep, getattr(L, "post_ffw_norm", None), E, "post_ffw_norm")
        if gemma:
            c.gelu_table = table
        else:
            c.bq, c.bk = _vec(keep, L.bq, hq, "bq"), _vec(keep, L.bk, hk, "bk")
            c.bv, c.bo = _vec(keep, L.bv, hk, "bv"), _vec(keep, L.bo, E, "bo")
        for name in ("wq", "wk", "wv", "wo") + (() if mw is not None else ("w_gate", "w_up", "w_down")):
            _weight(getattr(c, name), keep, getattr(L, name))
        out.append(c)
    return out, keep


def _factor_choice(model, n_ctx: int) -> bool:
    """Which LongRoPE factor set a context of n_ctx cells per sequence uses (True: long)."""
    return n_ctx > model.hparams.n_ctx_orig_yarn


def layers(model, n_ctx: int = 0) -> List[object]:
    """The model's ub_layer structs for contexts of n_ctx cells per sequence (cached on the model, one set
    per LongRoPE factor choice; rebuilt when the hyperparameters change)."""
    key = (_hp_key(model), _factor_choice(model, n_ctx))
    cache = getattr(model, "_fused_layers", None)
    if cache is None or cache[0] != key[0]:
        cache = (key[0], {})
        model._fused_layers = cache
    built = cache[1].get(key[1])
    if built is None:
        built = cache[1][key[1]] = _build(model, n_ctx)
    return built[0]


def _check(x: np.ndarray, pos: np.ndarray, keep: Optional[np.ndarray], n_embd: int) -> None:
    if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim != 2 or not x.flags.c_contiguous \
            or not x.flags.writeable:
        raise ValueError("x must be a writeable C-contiguous float32 array [n, n_embd]")
    if not isinstance(pos, np.ndarray) or pos.dtype != np.int32 or pos.ndim != 2 or pos.shape[1] != x.shape[0] \
            or not pos.flags.c_contiguous:
        raise ValueError(f"pos must be a C-contiguous int32 array [n_pos, {x.shape[0]}]")
    if x.shape[1] != n_embd:
        raise ValueError(f"x rows have {x.shape[1]} values, the layer's n_embd is {n_embd}")
    if keep is not None and (not isinstance(keep, np.ndarray) or keep.dtype != np.int32 or keep.ndim != 1
                             or not keep.flags.c_contiguous):
        raise ValueError("keep must be a C-contiguous 1-D int32 array")


def _call(layer, kv, xb, n: int, pb, n_pos: int, kb, n_keep: int, n_threads: int, err) -> None:
    """ub_layer_forward on checked buffers; raises with the C side's message."""
    rc = lib.ub_layer_forward(layer, kv, xb, n, pb, n_pos, kb, n_keep, n_threads, err, ERR_LEN)
    if rc == lib.UB_E_NOMEM:
        raise MemoryError("fused layer: out of memory")
    if rc != lib.UB_OK:
        raise ValueError(f"fused layer: {ffi.string(err).decode(errors='replace')}")


def _keep_ptr(keep: Optional[np.ndarray]):
    if keep is None:
        return ffi.NULL
    return ffi.from_buffer("int32_t[]", keep) if keep.size else ffi.new("int32_t[1]")


def layer_forward(layer, kv, x: np.ndarray, pos: np.ndarray, keep: Optional[np.ndarray], n_threads: int) -> None:
    """One ub_layer_forward call: x float32[n, n_embd] C-contiguous, updated in place (the kept rows first
    when keep is given); pos int32[n_pos, n]; layer / kv: the cffi structs (layers(), Step.fused_kv).
    Raises ValueError with the C side's message naming the culprit, MemoryError."""
    _check(x, pos, keep, layer.n_embd)
    _call(layer, kv, ffi.from_buffer("float[]", x), x.shape[0], ffi.from_buffer("int32_t[]", pos), pos.shape[0],
          _keep_ptr(keep), 0 if keep is None else keep.size, int(n_threads), ffi.new("char[]", ERR_LEN))


def forward(model, step, x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The decoder layers over one ubatch, one C call each; returns the residual stream of rows `keep`
    (ascending, as the runner gives them). The buffers are checked once for all the layers."""
    from ubatch.model.arch.llama import n_ctx_seq
    Ls = layers(model, n_ctx_seq(step))
    x = np.array(x, dtype=np.float32, order="C", copy=True)
    keep32 = np.ascontiguousarray(keep, dtype=np.int32)
    pos = step.pos
    _check(x, pos, keep32, Ls[0].n_embd)
    xb, pb, kb = ffi.from_buffer("float[]", x), ffi.from_buffer("int32_t[]", pos), _keep_ptr(keep32)
    err = ffi.new("char[]", ERR_LEN)
    n, n_pos, nt, last = x.shape[0], pos.shape[0], int(step.n_threads), len(Ls) - 1
    for il, L in enumerate(Ls):
        try:
            _call(L, step.fused_kv(il), xb, n, pb, n_pos, kb if il == last else ffi.NULL,
                  keep32.size if il == last else 0, nt, err)
        except ValueError as e:
            raise ValueError(f"layer {il}: {e}") from None
    return x[:keep32.size]


__all__ = ["enabled", "set_enabled", "forward", "layers", "layer_forward"]
