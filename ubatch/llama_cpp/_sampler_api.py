"""The llama_sampler_* API: every sampler is named by a real `llama_sampler` ctypes struct (what 0.3.36's
functions return: a POINTER(llama_sampler)); the chain owns what is added to it; llama_sampler_sample takes the
context's logits row, builds the candidates, applies, checks a token was selected and accepts it, as
llama.cpp does. Custom samplers (llama_sampler_init with a llama_sampler_i of Python callbacks) are called
through their table."""
from __future__ import annotations

import ctypes
import time
from typing import Optional

import numpy as np

from ubatch.llama_cpp import _llama_log, _samplers as S
from ubatch.llama_cpp._cfunc import cfunc
from ubatch.llama_cpp._handles import HandleError, address
from ubatch.llama_cpp._structs import (llama_logit_bias, llama_perf_sampler_data, llama_sampler,
                                       llama_sampler_chain_params, llama_sampler_i, llama_token_data,
                                       llama_token_data_array)

_P = ctypes.POINTER
_SP = _P(llama_sampler)
_vp, _i32, _u32, _f, _b, _sz = ctypes.c_void_p, ctypes.c_int32, ctypes.c_uint32, ctypes.c_float, ctypes.c_bool, \
    ctypes.c_size_t

_LIVE = {}      # address of the llama_sampler struct -> (struct, Python sampler | None for custom)
_DEAD = set()
_ADOPTED = set()  # addresses of the caller's own llama_sampler structs added to a chain (the caller owns them)


def _new(obj: Optional[S.Sampler], iface=None, ctx=None):
    st = llama_sampler()
    if iface is not None:
        st.iface = iface
    st.ctx = ctx
    p = ctypes.pointer(st)
    _LIVE[ctypes.addressof(st)] = (st, obj, p)
    return p


def _get(smpl, fn: str):
    try:
        addr = address(smpl)
    except HandleError as e:
        raise ValueError(f"{fn}: {e}") from None
    ent = _LIVE.get(addr)
    if ent is None:
        raise ValueError(f"{fn}: 0x{addr:x} is {'a freed' if addr in _DEAD else 'not a'} sampler")
    return ent


def _cur(cur_p) -> llama_token_data_array:
    if isinstance(cur_p, llama_token_data_array):
        return cur_p
    if isinstance(cur_p, ctypes._Pointer):
        return cur_p.contents
    if isinstance(cur_p, getattr(ctypes, "_CArgObject", ())) or type(cur_p).__name__ == "CArgObject":
        return cur_p._obj
    addr = address(cur_p)
    return llama_token_data_array.from_address(addr)


def apply(smpl, cur: S.Cur) -> None:
    st, obj, ptr = _get(smpl, "llama_sampler_apply")
    if obj is None:            # custom: the user's table
        if not st.iface or not st.iface.contents.apply:
            raise ValueError("llama_sampler_apply: the custom sampler has no apply callback")
        st.iface.contents.apply(ptr, ctypes.pointer(cur.s))
        return
    if isinstance(obj, S.Chain):
        t0 = time.perf_counter()
        for h in obj.samplers:
            apply(h, cur)
        obj.t_sample_ms += (time.perf_counter() - t0) * 1e3
        return
    obj.apply(cur)


def accept(smpl, token: int) -> None:
    st, obj, ptr = _get(smpl, "llama_sampler_accept")
    if obj is None:
        if st.iface and st.iface.contents.accept:
            st.iface.contents.accept(ptr, token)
        return
    if isinstance(obj, S.Chain):
        for h in obj.samplers:
            accept(h, token)
        obj.n_sample += 1
        return
    obj.accept(token)


# ------------------------------------------------------------------ chain
@cfunc([], llama_sampler_chain_params)
def llama_sampler_chain_default_params():
    p = llama_sampler_chain_params()
    p.no_perf = True
    return p


@cfunc([llama_sampler_chain_params], _SP)
def llama_sampler_chain_init(params):
    return _new(S.Chain(params.no_perf))


def _adopt(smpl) -> None:
    """A llama_sampler struct the caller built (0.3.36's CustomSampler: a ctypes pointer to a struct whose iface
    is set) becomes a custom sampler of the chain, as llama.cpp takes any struct with an interface table. Only
    ctypes pointers / byref are adopted (a bare integer address cannot be checked)."""
    if isinstance(smpl, _SP) and smpl:
        st = smpl.contents
    elif type(smpl).__name__ == "CArgObject" and isinstance(getattr(smpl, "_obj", None), llama_sampler):
        st = smpl._obj
    else:
        return
    addr = ctypes.addressof(st)
    if addr not in _LIVE and st.iface:
        _LIVE[addr] = (st, None, ctypes.pointer(st))
        _ADOPTED.add(addr)
        _DEAD.discard(addr)


@cfunc([_SP, _SP])
def llama_sampler_chain_add(chain, smpl):
    _, c, _p = _get(chain, "llama_sampler_chain_add")
    _adopt(smpl)
    _get(smpl, "llama_sampler_chain_add")
    if not isinstance(c, S.Chain):
        raise ValueError("llama_sampler_chain_add: the first argument is not a sampler chain")
    c.samplers.append(address(smpl))


@cfunc([_SP, _i32], _SP)
def llama_sampler_chain_get(chain, i):
    _, c, _p = _get(chain, "llama_sampler_chain_get")
    if not isinstance(c, S.Chain) or not (0 <= i < len(c.samplers)):
        return _SP()
    return _LIVE[c.samplers[i]][2]


@cfunc([_SP], ctypes.c_int)
def llama_sampler_chain_n(chain):
    _, c, _p = _get(chain, "llama_sampler_chain_n")
    return len(c.samplers) if isinstance(c, S.Chain) else 0


@cfunc([_SP, _i32], _SP)
def llama_sampler_chain_remove(chain, i):
    _, c, _p = _get(chain, "llama_sampler_chain_remove")
    if not isinstance(c, S.Chain) or not (0 <= i < len(c.samplers)):
        return _SP()
    addr = c.samplers.pop(i)
    if addr in _ADOPTED and addr not in c.samplers:       # the caller's struct goes back to the caller
        _ADOPTED.discard(addr)
        return _LIVE.pop(addr)[2]
    return _LIVE[addr][2]


# ------------------------------------------------------------------ initialisers
def _init(name: str, argtypes: list, make):
    @cfunc(argtypes, _SP)
    def fn(*args):
        return _new(make(*args))
    fn.__name__ = fn.__qualname__ = name
    return fn


llama_sampler_init_greedy = _init("llama_sampler_init_greedy", [], S.Greedy)
llama_sampler_init_dist = _init("llama_sampler_init_dist", [_u32], S.Dist)
llama_sampler_init_top_k = _init("llama_sampler_init_top_k", [_i32], S.TopK)
llama_sampler_init_top_p = _init("llama_sampler_init_top_p", [_f, _sz], S.TopP)
llama_sampler_init_min_p = _init("llama_sampler_init_min_p", [_f, _sz], S.MinP)
llama_sampler_init_typical = _init("llama_sampler_init_typical", [_f, _sz], S.Typical)
llama_sampler_init_temp = _init("llama_sampler_init_temp", [_f], S.Temp)
llama_sampler_init_temp_ext = _init("llama_sampler_init_temp_ext", [_f, _f, _f], S.TempExt)
llama_sampler_init_xtc = _init("llama_sampler_init_xtc", [_f, _f, _sz, _u32], S.Xtc)
llama_sampler_init_top_n_sigma = _init("llama_sampler_init_top_n_sigma", [_f], S.TopNSigma)
llama_sampler_init_mirostat = _init("llama_sampler_init_mirostat", [_i32, _u32, _f, _f, _i32], S.Mirostat)
llama_sampler_init_mirostat_v2 = _init("llama_sampler_init_mirostat_v2", [_u32, _f, _f], S.MirostatV2)


@cfunc([_i32, _i32, _f, _f, _f], _SP)
def llama_sampler_init_penalties(n_vocab, penalty_last_n, penalty_repeat, penalty_freq, penalty_present):
    """0.3.36's 5-argument form (n_vocab first, unused)."""
    return _new(S.Penalties(penalty_last_n, penalty_repeat, penalty_freq, penalty_present))


@cfunc([_i32, _i32, _P(llama_logit_bias)], _SP)
def llama_sampler_init_logit_bias(n_vocab, n_logit_bias, logit_bias):
    items = [(int(logit_bias[i].token), float(logit_bias[i].bias)) for i in range(max(n_logit_bias, 0))]
    return _new(S.LogitBias(n_vocab, items))


@cfunc([_vp, _f, _f, _i32, _i32, _P(ctypes.c_char_p), _sz], _SP)
def llama_sampler_init_dry(vocab, dry_multiplier, dry_base, dry_allowed_length, dry_penalty_last_n, seq_breakers,
                           num_breakers):
    from ubatch.llama_cpp._handles import REGISTRY
    v = REGISTRY.find(vocab, "vocab")
    breakers = [seq_breakers[i] for i in range(num_breakers)] if seq_breakers and num_breakers else []
    return _new(S.Dry(v, dry_multiplier, dry_base, dry_allowed_length, dry_penalty_last_n,
                      [b for b in breakers if b]))


def _missing(name: str, what: str):
    def fn(*args):
        raise NotImplementedError(f"{name}: {what} is not implemented in ubatch.llama_cpp")
    fn.__name__ = fn.__qualname__ = name
    fn.ubatch_unsupported = what          # read by tests/dropin/test_llama_cpp_names.py
    return fn


def _grammar(vocab, grammar_str, grammar_root, lazy=False, patterns=(), tokens=()):
    """A grammar sampler, or NULL (None) for a grammar llama.cpp rejects (the reason is logged)."""
    from ubatch.grammar import GrammarError
    from ubatch.llama_cpp._grammar_sampler import GrammarSampler
    from ubatch.llama_cpp._handles import REGISTRY
    v = REGISTRY.find(vocab, "vocab")
    if v is None:
        raise ValueError("llama_sampler_init_grammar: not a vocab handle")
    try:
        return _new(GrammarSampler(v, grammar_str or b"", grammar_root or b"root", lazy, patterns, tokens))
    except GrammarError as e:
        _llama_log.log(4, f"llama_grammar_init_impl: {e}\n")
        return None


def _strings(arr, n):
    return [arr[i] for i in range(n)] if arr and n else []


def _ids(arr, n):
    return [int(arr[i]) for i in range(n)] if arr and n else []


@cfunc([_vp, ctypes.c_char_p, ctypes.c_char_p], _SP)
def llama_sampler_init_grammar(vocab, grammar_str, grammar_root):
    return _grammar(vocab, grammar_str, grammar_root)


@cfunc([_vp, ctypes.c_char_p, ctypes.c_char_p, _P(ctypes.c_char_p), _sz, _P(ctypes.c_int32), _sz], _SP)
def llama_sampler_init_grammar_lazy(vocab, grammar_str, grammar_root, trigger_words, num_trigger_words,
                                    trigger_tokens, num_trigger_tokens):
    from ubatch.llama_cpp._grammar_sampler import _trigger_words_pattern
    words = [w for w in _strings(trigger_words, num_trigger_words) if w is not None]
    pats = [_trigger_words_pattern(words)] if words else []
    return _grammar(vocab, grammar_str, grammar_root, True, pats, _ids(trigger_tokens, num_trigger_tokens))


@cfunc([_vp, ctypes.c_char_p, ctypes.c_char_p, _P(ctypes.c_char_p), _sz, _P(ctypes.c_int32), _sz], _SP)
def llama_sampler_init_grammar_lazy_patterns(vocab, grammar_str, grammar_root, trigger_patterns,
                                             num_trigger_patterns, trigger_tokens, num_trigger_tokens):
    pats = [p for p in _strings(trigger_patterns, num_trigger_patterns) if p is not None]
    return _grammar(vocab, grammar_str, grammar_root, True, pats, _ids(trigger_tokens, num_trigger_tokens))


@cfunc([_vp], _SP)
def llama_sampler_init_infill(vocab):
    from ubatch.llama_cpp._handles import REGISTRY
    from ubatch.llama_cpp._sampler_infill import Infill
    v = REGISTRY.find(vocab, "vocab")
    if v is None:
        raise ValueError("llama_sampler_init_infill: not a vocab handle")
    return _new(Infill(v))


llama_sampler_init_adaptive_p = _missing("llama_sampler_init_adaptive_p", "the adaptive-p sampler")


@cfunc([_P(llama_sampler_i), _vp], _SP)
def llama_sampler_init(iface, ctx):
    return _new(None, iface=iface, ctx=ctx)


# ------------------------------------------------------------------ use
@cfunc([_SP], ctypes.c_char_p)
def llama_sampler_name(smpl):
    st, obj, ptr = _get(smpl, "llama_sampler_name")
    if obj is None:
        return st.iface.contents.name(ptr) if st.iface and st.iface.contents.name else b"(null)"
    return obj.name.encode()


@cfunc([_SP, _i32])
def llama_sampler_accept(smpl, token):
    accept(smpl, token)


@cfunc([_SP, _P(llama_token_data_array)])
def llama_sampler_apply(smpl, cur_p):
    apply(smpl, S.Cur(_cur(cur_p)))


@cfunc([_SP])
def llama_sampler_reset(smpl):
    st, obj, ptr = _get(smpl, "llama_sampler_reset")
    if obj is None:
        if st.iface and st.iface.contents.reset:
            st.iface.contents.reset(ptr)
    elif isinstance(obj, S.Chain):
        for h in obj.samplers:
            llama_sampler_reset(_LIVE[h][2])
    else:
        obj.reset()


def _clone(h):
    st, obj, ptr = _get(h, "llama_sampler_clone")
    if obj is None:
        if st.iface and st.iface.contents.clone:
            return st.iface.contents.clone(ptr)
        if not st.ctx:
            return _new(None, iface=st.iface, ctx=None)
        raise ValueError("llama_sampler_clone: the custom sampler does not support cloning")
    if isinstance(obj, S.Chain):
        new = S.Chain(obj.no_perf)
        new.samplers = [address(_clone(_LIVE[s][2])) for s in obj.samplers]
        return _new(new)
    return _new(obj.clone())


@cfunc([_SP], _SP)
def llama_sampler_clone(smpl):
    return _clone(smpl)


@cfunc([_SP])
def llama_sampler_free(smpl):
    if not smpl:
        return
    addr = address(smpl)
    ent = _LIVE.pop(addr, None)
    if ent is None:
        return
    _DEAD.add(addr)
    _ADOPTED.discard(addr)
    st, obj, ptr = ent
    if obj is None:
        if st.iface and st.iface.contents.free:
            st.iface.contents.free(ptr)
    elif isinstance(obj, S.Chain):
        for h in obj.samplers:
            llama_sampler_free(_LIVE[h][2] if h in _LIVE else None)


@cfunc([_SP], _u32)
def llama_sampler_get_seed(smpl):
    st, obj, ptr = _get(smpl, "llama_sampler_get_seed")
    if isinstance(obj, S.Chain):
        for h in reversed(obj.samplers):
            s = llama_sampler_get_seed(_LIVE[h][2])
            if s != 0xFFFFFFFF:
                return s
        return 0xFFFFFFFF
    return 0xFFFFFFFF if obj is None else obj.seed()


def candidates(logits: np.ndarray):
    """A fresh llama_token_data_array over all n_vocab ids (unsorted, p = 0) and the memory it points at."""
    n = logits.shape[0]
    buf = np.empty(n, S.TD)
    buf["id"] = np.arange(n, dtype=np.int32)
    buf["logit"] = logits
    buf["p"] = 0.0
    arr = llama_token_data_array(ctypes.cast(buf.ctypes.data, _P(llama_token_data)), n, -1, False)
    return arr, buf


def sample_row(smpl, logits: np.ndarray) -> int:
    arr, buf = candidates(logits)
    apply(smpl, S.Cur(arr))
    if not (0 <= arr.selected < arr.size):
        raise RuntimeError(f"llama_sampler_sample: no token selected (selected = {arr.selected}, size = {arr.size});"
                           f" a chain must end with greedy, dist or mirostat (llama.cpp aborts here)")
    tok = int(S.Cur(arr).a["id"][arr.selected])
    accept(smpl, tok)
    return tok


@cfunc([_SP, _vp, _i32], _i32)
def llama_sampler_sample(smpl, ctx, idx):
    from ubatch.llama_cpp._handles import REGISTRY
    c = REGISTRY.get(ctx, "context")
    try:
        row = c.logits_ith(idx)
    except (IndexError, Exception) as e:
        raise ValueError(f"llama_sampler_sample: no logits for idx {idx}: {e}") from None
    return sample_row(smpl, np.asarray(row, np.float32))


@cfunc([_SP], llama_perf_sampler_data)
def llama_perf_sampler(chain):
    d = llama_perf_sampler_data()
    _, c, _p = _get(chain, "llama_perf_sampler")
    if isinstance(c, S.Chain):
        d.t_sample_ms, d.n_sample = c.t_sample_ms, max(c.n_sample, 1)
    return d


@cfunc([_SP])
def llama_perf_sampler_print(chain):
    d = llama_perf_sampler(chain)
    _llama_log.log(_llama_log.GGML_LOG_LEVEL_INFO,
                   f"llama_perf_sampler_print:    sampling time = {d.t_sample_ms:10.2f} ms / {d.n_sample:5d} runs")


@cfunc([_SP])
def llama_perf_sampler_reset(chain):
    _, c, _p = _get(chain, "llama_perf_sampler_reset")
    if isinstance(c, S.Chain):
        c.t_sample_ms, c.n_sample = 0.0, 0


__all__ = [n for n in list(globals()) if n.startswith("llama_")]
