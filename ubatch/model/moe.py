"""Mixture-of-experts pieces shared by the MoE architectures (qwen2moe, qwen3moe): the hyperparameters llama.cpp
reads for them, the expert tensors, and the FFN itself — one C call per layer (csrc/compute/moe.c,
ub_moe_ffn: router -> softmax -> top-k -> each row's expert SwiGLU FFNs -> weighted sum in slot order, plus
an optional shared expert with a sigmoid gate).

    read_moe(f, hp, norm_w=, shared=)   MoEParams of the file (llama.cpp's keys and defaults); refuses, naming
                                        the key, what llama.cpp would do differently (expert groups, clamped
                                        SwiGLU, per-layer expert counts)
    load_moe(src, hp, il)               MoEWeights of layer il (every tensor checked by name and shape)
    ffn(layer_moe, hp, h, n_threads)    float32[n, n_embd] -> float32[n, n_embd] (optionally the routing)
    struct(moe_w, hp, keep)             the cffi ub_moe of one layer (for the fused forward)

Batch invariance: each expert's products of a row are computed by ub_matmul on that row alone (its rows are
gathered per expert; ub_matmul's output rows are bitwise independent of the call's row count), so a row's
result does not depend on which other rows chose the same experts (tests/model/test_arch_moe.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from ubatch._ffi import ffi, lib
from ubatch.common.params import ERR_LEN
from ubatch.model.gguf_file import GGUFError, GGUFFile
from ubatch.model.weights import TensorSource, Weight

MAX_EXPERTS = 1024        # LLAMA_MAX_EXPERTS (and MOE_MAX_EXPERTS in moe.c)


@dataclass
class MoEParams:
    n_expert: int
    n_expert_used: int
    n_ff_exp: int
    n_ff_shexp: int = 0           # 0: no shared expert
    norm_w: bool = False          # the selected weights divided by their sum (qwen3moe)
    shexp_gated: bool = True      # the shared expert scaled by sigmoid(x . ffn_gate_inp_shexp) (qwen2moe); False:
                                  # added as it is (granitemoe)
    w_scale: float = 0.0          # 0 / 1: none (llama.cpp reads no scale for qwen2moe / qwen3moe)
    gating: str = "softmax"


@dataclass
class MoEWeights:
    gate_inp: Weight                       # router: n_embd -> n_expert
    gate_exps: Weight                      # {n_embd, n_ff_exp, n_expert}: n_expert * n_ff_exp rows
    up_exps: Weight
    down_exps: Weight                      # {n_ff_exp, n_embd, n_expert}
    gate_inp_shexp: Optional[Weight] = None   # {n_embd}: the shared expert's gate (n_embd -> 1)
    gate_shexp: Optional[Weight] = None
    up_shexp: Optional[Weight] = None
    down_shexp: Optional[Weight] = None


def _uniform(f: GGUFFile, key: str, v, n_layer: int, lo: int = 0) -> int:
    from ubatch.model.hparams import _int
    if isinstance(v, (np.ndarray, list)):
        vals = sorted(set(int(x) for x in v))
        if len(v) != n_layer or len(vals) != 1:
            raise GGUFError(f"{f.path}: {key} varies per layer ({list(v)[:8]}...), not supported")
        v = vals[0]
    return _int(f, key, v, lo)


def has_experts(f: GGUFFile, arch: str) -> bool:
    """Whether the file sets {arch}.expert_count to anything but 0 (read_moe then checks the value)."""
    v = f.metadata.get(f"{arch}.expert_count")
    return v is not None and not (isinstance(v, (int, np.integer)) and not isinstance(v, bool) and int(v) == 0)


def read_moe(f: GGUFFile, hp, *, norm_w: bool, shared: bool, ff_exp: Optional[int] = None,
             shared_default: Optional[int] = None, shexp_gated: bool = True) -> MoEParams:
    """The MoE hyperparameters of arch hp.arch (llama.cpp: expert_count, expert_used_count,
    expert_feed_forward_length default n_ff / n_used — or ff_exp when the arch fixes it (llama / Mixtral:
    n_ff) —, expert_shared_feed_forward_length default n_ff (or shared_default: granitemoe 0, no shared
    expert))."""
    a, md = hp.arch, f.metadata
    from ubatch.model.hparams import _int
    n_expert = _int(f, f"{a}.expert_count", md.get(f"{a}.expert_count", 0), 0)   # a scalar (llama.cpp's get_key)
    if n_expert <= 0:
        raise GGUFError(f"{f.path}: n_expert must be > 0 for {a.upper()} ({a}.expert_count)")
    if n_expert > MAX_EXPERTS:
        raise GGUFError(f"{f.path}: {a}.expert_count = {n_expert} exceeds llama.cpp's maximum of {MAX_EXPERTS}")
    n_used = _uniform(f, f"{a}.expert_used_count", md.get(f"{a}.expert_used_count", 0), hp.n_layer)
    if n_used <= 0:
        raise GGUFError(f"{f.path}: n_expert_used must be > 0 for {a.upper()} ({a}.expert_used_count)")
    if n_used > n_expert:
        raise GGUFError(f"{f.path}: {a}.expert_used_count = {n_used} exceeds {a}.expert_count = {n_expert}")
    groups = md.get(f"{a}.expert_group_count", 0)
    if not isinstance(groups, (int, np.integer)) or isinstance(groups, bool) or int(groups) > 1:
        raise GGUFError(f"{f.path}: {a}.expert_group_count = {groups!r}: expert group selection is not supported")
    clamp = md.get(f"{a}.swiglu_clamp_exp")
    if clamp is not None:
        try:
            on = bool(np.any(np.asarray(clamp, dtype=np.float64) > 1e-6))
        except (TypeError, ValueError):
            raise GGUFError(f"{f.path}: {a}.swiglu_clamp_exp = {clamp!r:.60} must be numbers") from None
        if on:
            raise GGUFError(f"{f.path}: {a}.swiglu_clamp_exp (clamped expert SwiGLU) is not supported")
    if ff_exp is None:
        ff_exp = _uniform(f, f"{a}.expert_feed_forward_length", md.get(f"{a}.expert_feed_forward_length", 0),
                          hp.n_layer)
    if ff_exp == 0:
        ff_exp = hp.n_ff // n_used
    if ff_exp <= 0:
        raise GGUFError(f"{f.path}: {a}.expert_feed_forward_length is 0 and n_ff / n_expert_used is 0")
    ff_sh = 0
    if shared:
        ff_sh = _uniform(f, f"{a}.expert_shared_feed_forward_length",
                         md.get(f"{a}.expert_shared_feed_forward_length", 0), hp.n_layer)
        if ff_sh == 0:
            ff_sh = hp.n_ff if shared_default is None else shared_default
    return MoEParams(n_expert=n_expert, n_expert_used=n_used, n_ff_exp=ff_exp, n_ff_shexp=ff_sh, norm_w=norm_w,
                     shexp_gated=shexp_gated)


def _experts(src: TensorSource, name: str, n_cols: int, n_rows: int, n_expert: int) -> Weight:
    t = src._info(name, (n_cols, n_rows, n_expert), True)
    return Weight(t)


def load_moe(src: TensorSource, hp, il: int) -> MoEWeights:
    """Layer il's router, stacked experts and (n_ff_shexp > 0) shared expert; per-expert scale tensors (which
    llama.cpp would multiply in) are refused naming the tensor."""
    mp: MoEParams = hp.moe
    p, E, X, F = f"blk.{il}.", hp.n_embd, mp.n_expert, mp.n_ff_exp
    for suffix in ("ffn_gate_exps.scale", "ffn_up_exps.scale", "ffn_down_exps.scale", "ffn_gate_up_exps.weight",
                   "ffn_gate_inp.bias", "ffn_gate_exps.bias", "ffn_up_exps.bias", "ffn_down_exps.bias"):
        if src.f.tensors.get(p + suffix) is not None:
            raise GGUFError(f"{src.f.path}: tensor '{p + suffix}' is not supported for {hp.arch}")
    w = MoEWeights(gate_inp=src.matrix(p + "ffn_gate_inp.weight", E, X),
                   gate_exps=_experts(src, p + "ffn_gate_exps.weight", E, F, X),
                   up_exps=_experts(src, p + "ffn_up_exps.weight", E, F, X),
                   down_exps=_experts(src, p + "ffn_down_exps.weight", F, E, X))
    if mp.n_ff_shexp:
        S = mp.n_ff_shexp
        if mp.shexp_gated:
            w.gate_inp_shexp = src.matrix(p + "ffn_gate_inp_shexp.weight", E, 1)
        w.gate_shexp = src.matrix(p + "ffn_gate_shexp.weight", E, S)
        w.up_shexp = src.matrix(p + "ffn_up_shexp.weight", E, S)
        w.down_shexp = src.matrix(p + "ffn_down_shexp.weight", S, E)
    return w


def _lw(dst, keep: list, w: Optional[Weight], repack: bool = True) -> None:
    if w is None:
        dst.data = ffi.NULL
        return
    qw = w.qweight(repack=repack)
    keep.append(qw)
    dst.data = qw.c_buf
    dst.nbytes, dst.n_rows, dst.n_cols, dst.type = qw.nbytes, qw.n_rows, qw.n_cols, qw.c_type


def struct(mw: MoEWeights, hp, keep: list):
    """The cffi ub_moe of one layer; the objects its pointers need are appended to keep."""
    mp: MoEParams = hp.moe
    c = ffi.new("ub_moe *")
    keep.append(c)
    c.n_embd, c.n_expert, c.n_used, c.n_ff_exp = hp.n_embd, mp.n_expert, mp.n_expert_used, mp.n_ff_exp
    c.gating, c.norm_w, c.w_scale = lib.UB_MOE_GATING_SOFTMAX, int(mp.norm_w), float(mp.w_scale)
    c.n_ff_shexp = mp.n_ff_shexp
    for name in ("gate_inp", "gate_exps", "up_exps", "down_exps", "gate_inp_shexp", "gate_shexp", "up_shexp",
                 "down_shexp"):
        _lw(getattr(c, name), keep, getattr(mw, name), repack=not name.endswith("_exps"))  # experts: sliced in C
    return c


def ffn(mw: MoEWeights, hp, h: np.ndarray, n_threads: Optional[int] = None, *,
        routing: bool = False):
    """The MoE FFN of h float32[n, n_embd] in one C call; routing=True also returns (experts int32[n, n_used]
    in slot order, their weights float32[n, n_used])."""
    from ubatch.compute.kernels import default_threads
    h = np.ascontiguousarray(h, dtype=np.float32)
    if h.ndim != 2 or h.shape[1] != hp.n_embd:
        raise ValueError(f"moe ffn: h must be float32[n, {hp.n_embd}], got shape {h.shape}")
    keep: list = []
    cache = getattr(mw, "_c", None)
    if cache is None or cache[0] is not hp.moe:
        cache = (hp.moe, struct(mw, hp, keep), keep)
        mw._c = cache
    n, k = h.shape[0], hp.moe.n_expert_used
    out = np.empty_like(h)
    sel = np.empty((n, k), np.int32)
    wts = np.empty((n, k), np.float32)
    err = ffi.new("char[]", ERR_LEN)
    nt = default_threads() if n_threads is None else int(n_threads)
    if n:
        rc = lib.ub_moe_ffn(cache[1], ffi.from_buffer("float[]", h), n, ffi.from_buffer("float[]", out),
                            ffi.from_buffer("int32_t[]", sel), ffi.from_buffer("float[]", wts), nt, err, ERR_LEN)
        if rc == lib.UB_E_NOMEM:
            raise MemoryError("moe ffn: out of memory")
        if rc != lib.UB_OK:
            raise ValueError(ffi.string(err).decode(errors="replace"))
    return (out, sel, wts) if routing else out


__all__ = ["MoEParams", "MoEWeights", "read_moe", "load_moe", "ffn", "struct"]
