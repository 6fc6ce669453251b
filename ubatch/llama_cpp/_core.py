"""Low-level functions of llama-cpp-python 0.3.36 (llama.h) over ubatch: backend, default params, model and
context lifetime and sizes, outputs (pointers into float32 buffers valid until the next decode), memory
(llama_memory_*), perf, system info. Each is a Python function with the C function's argtypes/restype
convention (see _cfunc)."""
from __future__ import annotations

import ctypes
import os
import time

import numpy as np

from ubatch.llama_cpp import _llama_log
from ubatch.llama_cpp._cfunc import cfunc
from ubatch.llama_cpp._constants import (LLAMA_MAX_DEVICES, LLAMA_MAX_SEQ, LLAMA_ROPE_TYPE_NEOX,
                                         LLAMA_ROPE_TYPE_NORM)
from ubatch.llama_cpp._context import CContext, create as _create_context
from ubatch.llama_cpp._handles import REGISTRY, HandleError
from ubatch.llama_cpp._model_type import size_label
from ubatch.llama_cpp._structs import (ggml_log_callback, llama_context_params, llama_model_params,
                                       llama_perf_context_data)

_P = ctypes.POINTER
_NULL_F = _P(ctypes.c_float)
_T0 = time.time()
_vp, _i32, _u32, _b, _f, _sz, _cp = (ctypes.c_void_p, ctypes.c_int32, ctypes.c_uint32, ctypes.c_bool,
                                     ctypes.c_float, ctypes.c_size_t, ctypes.c_char_p)


def _obj(h, kind: str, fn: str):
    try:
        return REGISTRY.get(h, kind)
    except HandleError as e:
        _llama_log.error(f"{fn}: {e}")
        return None


# ------------------------------------------------------------------ backend and system
def llama_backend_init(*_args, **_kwargs) -> None:
    """No-op (ubatch needs no backend initialisation); accepts the old `numa` argument too."""


@cfunc([])
def llama_backend_free():
    pass


@cfunc([ctypes.c_int])
def llama_numa_init(numa):
    pass


@cfunc([], _cp)
def llama_print_system_info():
    flags = []
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read().split()
    except OSError:
        info = []
    for name, flag in (("SSE3", "pni"), ("SSSE3", "ssse3"), ("AVX", "avx"), ("AVX2", "avx2"), ("F16C", "f16c"),
                       ("FMA", "fma"), ("BMI2", "bmi2"), ("AVX512", "avx512f")):
        if flag in info:
            flags.append(f"{name} = 1")
    return ("CPU : " + " | ".join(flags) + " | UBATCH = 1 | ").encode()


@cfunc([ggml_log_callback, _vp])
def llama_log_set(log_callback, user_data):
    _llama_log.set_callback(log_callback if log_callback else None, user_data)


def llama_log_get(log_callback=None, user_data=None):
    return _llama_log.get_callback()


@cfunc([], ctypes.c_int64)
def llama_time_us():
    return int(time.time() * 1e6)


@cfunc([], _sz)
def llama_max_devices():
    return LLAMA_MAX_DEVICES


@cfunc([], _sz)
def llama_max_parallel_sequences():
    return LLAMA_MAX_SEQ


@cfunc([], _b)
def llama_supports_mmap():
    return True


@cfunc([], _b)
def llama_supports_mlock():
    return False


@cfunc([], _b)
def llama_supports_gpu_offload():
    return False


@cfunc([], _b)
def llama_supports_rpc():
    return False


# ------------------------------------------------------------------ default params
@cfunc([], llama_model_params)
def llama_model_default_params():
    p = llama_model_params()
    p.n_gpu_layers, p.split_mode, p.load_mode, p.lazy_mode, p.main_gpu = -1, 1, -1, 1, 0
    p.vocab_only = p.check_tensors = p.no_host = p.no_alloc = p.load_mtp = False
    p.use_extra_bufts = True
    return p


@cfunc([], llama_context_params)
def llama_context_default_params():
    p = llama_context_params()
    p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max = 512, 2048, 512, 1
    p.n_rs_seq, p.n_outputs_max, p.n_outputs_max_per_seq = 0, 0, 1
    p.n_threads = p.n_threads_batch = 4
    p.ctx_type = 0
    p.rope_scaling_type = p.pooling_type = p.attention_type = p.flash_attn_type = -1
    p.rope_freq_base = p.rope_freq_scale = 0.0
    p.yarn_ext_factor = p.yarn_attn_factor = p.yarn_beta_fast = p.yarn_beta_slow = -1.0
    p.yarn_orig_ctx = 0
    p.defrag_thold = -1.0
    p.type_k = p.type_v = 1
    p.embeddings = False
    p.offload_kqv = p.no_perf = p.op_offload = p.swa_full = True
    p.kv_unified = False
    p.n_samplers = 0
    return p


# ------------------------------------------------------------------ model lifetime
@cfunc([_cp, llama_model_params], _vp)
def llama_model_load_from_file(path_model, params):
    from ubatch.llama_cpp import _model
    if path_model is None:
        _llama_log.error("llama_model_load_from_file: path_model is NULL")
        return None
    m = _model.load(os.fsdecode(path_model), params)
    return None if m is None else m.handle


def llama_model_load_from_splits(paths, n_paths, params):
    if int(n_paths) != 1:
        raise NotImplementedError("llama_model_load_from_splits: split GGUF files (more than one path) are not "
                                  "supported by ubatch.llama_cpp")
    return llama_model_load_from_file(paths[0], params)


@cfunc([_vp])
def llama_model_free(model):
    m = REGISTRY.free(model)
    if m is not None:
        m.vocab.free()
        m.model = None


@cfunc([_vp], _vp)
def llama_model_get_vocab(model):
    m = _obj(model, "model", "llama_model_get_vocab")
    return None if m is None else m.vocab.handle


def _model_int(name: str, getter, restype=_i32):
    @cfunc([_vp], restype)
    def fn(model):
        m = _obj(model, "model", name)
        return 0 if m is None else getter(m)
    fn.__name__ = fn.__qualname__ = name
    return fn


def _rope_type(m) -> int:
    if m.model is not None and hasattr(m.model, "rope_type"):
        return int(m.model.rope_type)
    return LLAMA_ROPE_TYPE_NEOX if m.arch in ("qwen2", "gemma3", "gemma2", "phi3") else LLAMA_ROPE_TYPE_NORM


def _n_params(m) -> int:
    return int(m.n_params)


llama_model_n_ctx_train = _model_int("llama_model_n_ctx_train", lambda m: m.hparam("n_ctx_train"))
llama_model_n_embd = _model_int("llama_model_n_embd", lambda m: m.hparam("n_embd"))
llama_model_n_embd_inp = _model_int("llama_model_n_embd_inp", lambda m: m.hparam("n_embd"))
llama_model_n_embd_out = _model_int("llama_model_n_embd_out", lambda m: m.hparam("n_embd"))
llama_model_n_layer = _model_int("llama_model_n_layer", lambda m: m.hparam("n_layer"))
llama_model_n_head = _model_int("llama_model_n_head", lambda m: m.hparam("n_head"))
llama_model_n_head_kv = _model_int("llama_model_n_head_kv", lambda m: m.hparam("n_head_kv"))
llama_model_n_swa = _model_int("llama_model_n_swa", lambda m: m.hparam("n_swa"))
llama_model_rope_type = _model_int("llama_model_rope_type", _rope_type, ctypes.c_int)
llama_model_rope_freq_scale_train = _model_int(
    "llama_model_rope_freq_scale_train", lambda m: float(getattr(m.model, "rope_freq_scale", 1.0)), _f)
llama_model_size = _model_int("llama_model_size", lambda m: m.size_bytes, ctypes.c_uint64)
llama_model_n_params = _model_int("llama_model_n_params", _n_params, ctypes.c_uint64)
llama_model_has_encoder = _model_int("llama_model_has_encoder", lambda m: False, _b)
llama_model_has_decoder = _model_int("llama_model_has_decoder", lambda m: True, _b)
llama_model_decoder_start_token = _model_int("llama_model_decoder_start_token", lambda m: -1)
llama_model_is_recurrent = _model_int("llama_model_is_recurrent", lambda m: False, _b)
llama_model_is_hybrid = _model_int("llama_model_is_hybrid", lambda m: False, _b)
llama_model_is_diffusion = _model_int("llama_model_is_diffusion", lambda m: False, _b)
llama_model_meta_count = _model_int("llama_model_meta_count", lambda m: len(m.meta))


def _snprintf(buf, size: int, s: str) -> int:
    data = s.encode("utf-8")
    if buf and size > 0:
        n = min(len(data), size - 1)
        ctypes.memmove(buf, data[:n] + b"\0", n + 1)
    return len(data)


@cfunc([_vp, _vp, _sz], _i32)
def llama_model_desc(model, buf, buf_size):
    m = _obj(model, "model", "llama_model_desc")
    if m is None:
        return -1
    ftypes = {0: "all F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K - Medium",
              12: "Q3_K - Medium", 15: "Q4_K - Medium", 17: "Q5_K - Medium", 18: "Q6_K", 32: "BF16",
              19: "IQ2_XXS - 2.0625 bpw", 20: "IQ2_XS - 2.3125 bpw", 23: "IQ3_XXS - 3.0625 bpw", 24: "IQ1_S - 1.5625 bpw", 25: "IQ4_NL - 4.5 bpw",
              26: "IQ3_S - 3.4375 bpw", 27: "IQ3_S mix - 3.66 bpw", 28: "IQ2_S - 2.5 bpw", 29: "IQ2_M - 2.7 bpw",
              30: "IQ4_XS - 4.25 bpw", 31: "IQ1_M - 1.75 bpw", 36: "TQ1_0 - 1.69 bpw ternary",
              37: "TQ2_0 - 2.06 bpw ternary", 38: "MXFP4 MoE"}
    file_type = m.raw.get("general.file_type")
    if file_type is None and m.model is not None:     # llama.cpp guesses it from the commonest tensor type
        ft = "(guessed) " + ftypes.get(_guess_file_type(m.model.file.tensors.values()), "?")
    else:
        ft = ftypes.get(int(file_type if file_type is not None else -1), "?")
    return _snprintf(buf, buf_size, f"{m.arch} {size_label(m.arch, lambda n: _desc_hparam(m, n))} {ft}")


# ggml type -> the llama_ftype llama.cpp names a file after when its tensors are mostly of that type
_FTYPE_OF_GGML = {0: 0, 1: 1, 30: 32, 2: 2, 3: 3, 6: 8, 7: 9, 8: 7, 10: 10, 11: 12, 12: 15, 13: 17, 14: 18, 34: 36,
                  35: 37, 16: 19, 17: 20, 22: 28, 18: 23, 19: 24, 29: 31, 20: 25, 23: 30, 21: 26, 39: 38}


def _guess_file_type(tensors) -> int:
    """A file without general.file_type: the llama_ftype of its commonest tensor type (a tie: the lower ggml type
    id), all F32 for a type with no file type, as llama.cpp's loader guesses."""
    counts: dict = {}
    for t in tensors:
        counts[t.ggml_type] = counts.get(t.ggml_type, 0) + 1
    if not counts:
        return 0
    best = min(counts, key=lambda g: (-counts[g], g))
    return _FTYPE_OF_GGML.get(best, 0)


def _desc_hparam(m, name: str) -> int:
    """The hyper-parameters llama.cpp's size label reads (n_vocab and n_expert from the GGUF metadata)."""
    if name == "n_vocab":
        v = m.raw.get(f"{m.arch}.vocab_size")
        return int(v) if v is not None else len(m.raw.get("tokenizer.ggml.tokens", ()))
    if name == "n_expert":
        return int(m.raw.get(f"{m.arch}.expert_count", 0) or 0)
    return m.hparam(name)


@cfunc([_vp, _cp, _vp, _sz], _i32)
def llama_model_meta_val_str(model, key, buf, buf_size):
    m = _obj(model, "model", "llama_model_meta_val_str")
    if m is None or key is None:
        return -1
    v = m.meta.get(key.decode("utf-8", "replace"))
    if v is None:
        if buf and buf_size > 0:
            ctypes.memmove(buf, b"\0", 1)
        return -1
    return _snprintf(buf, buf_size, v)


@cfunc([_vp, _i32, _vp, _sz], _i32)
def llama_model_meta_key_by_index(model, i, buf, buf_size):
    m = _obj(model, "model", "llama_model_meta_key_by_index")
    if m is None or not (0 <= i < len(m.meta)):
        if buf and buf_size > 0:
            ctypes.memmove(buf, b"\0", 1)
        return -1
    return _snprintf(buf, buf_size, list(m.meta)[i])


@cfunc([_vp, _i32, _vp, _sz], _i32)
def llama_model_meta_val_str_by_index(model, i, buf, buf_size):
    m = _obj(model, "model", "llama_model_meta_val_str_by_index")
    if m is None or not (0 <= i < len(m.meta)):
        if buf and buf_size > 0:
            ctypes.memmove(buf, b"\0", 1)
        return -1
    return _snprintf(buf, buf_size, list(m.meta.values())[i])


@cfunc([_vp, _cp], _cp)
def llama_model_chat_template(model, name):
    m = _obj(model, "model", "llama_model_chat_template")
    if m is None:
        return None
    key = "tokenizer.chat_template" if not name else f"tokenizer.chat_template.{name.decode()}"
    v = m.raw.get(key)
    return None if v is None else (v.encode("utf-8") if isinstance(v, str) else bytes(v))


# ------------------------------------------------------------------ context lifetime and sizes
@cfunc([_vp, llama_context_params], _vp)
def llama_init_from_model(model, params):
    m = _obj(model, "model", "llama_init_from_model")
    if m is None:
        return None
    c = _create_context(m, params)
    return None if c is None else c.handle


@cfunc([_vp])
def llama_free(ctx):
    c = REGISTRY.find(ctx, "context")
    if c is not None:
        c.free()


@cfunc([_vp], _vp)
def llama_get_model(ctx):
    c = _obj(ctx, "context", "llama_get_model")
    return None if c is None else c.cmodel.handle


@cfunc([_vp], _vp)
def llama_get_memory(ctx):
    c = _obj(ctx, "context", "llama_get_memory")
    return None if c is None else c.mem_handle


def _ctx_int(name: str, getter, restype=_u32):
    @cfunc([_vp], restype)
    def fn(ctx):
        c = _obj(ctx, "context", name)
        return 0 if c is None else getter(c)
    fn.__name__ = fn.__qualname__ = name
    return fn


llama_n_ctx = _ctx_int("llama_n_ctx", lambda c: c.ctx.n_ctx)
llama_n_ctx_seq = _ctx_int("llama_n_ctx_seq", lambda c: c.ctx.n_ctx_seq)
llama_n_batch = _ctx_int("llama_n_batch", lambda c: c.ctx.n_batch)
llama_n_ubatch = _ctx_int("llama_n_ubatch", lambda c: c.ctx.n_ubatch)
llama_n_seq_max = _ctx_int("llama_n_seq_max", lambda c: c.ctx.n_seq_max)
llama_n_threads = _ctx_int("llama_n_threads", lambda c: c.n_threads, _i32)
llama_n_threads_batch = _ctx_int("llama_n_threads_batch", lambda c: c.n_threads_batch, _i32)
llama_pooling_type = _ctx_int("llama_pooling_type", lambda c: c.pooling, ctypes.c_int)


@cfunc([_vp, _i32, _i32])
def llama_set_n_threads(ctx, n_threads, n_threads_batch):
    c = _obj(ctx, "context", "llama_set_n_threads")
    if c is not None:
        c.n_threads, c.n_threads_batch = n_threads, n_threads_batch


@cfunc([_vp, _b])
def llama_set_embeddings(ctx, embeddings):
    c = _obj(ctx, "context", "llama_set_embeddings")
    if c is not None and bool(embeddings) != c.embeddings:
        raise NotImplementedError("llama_set_embeddings: switching a context between logits and embeddings after "
                                  "creation is not supported; create it with embeddings set in its params")


@cfunc([_vp, _b])
def llama_set_causal_attn(ctx, causal_attn):
    c = _obj(ctx, "context", "llama_set_causal_attn")
    if c is not None and bool(causal_attn) != c.ctx.causal_attn:
        raise NotImplementedError("llama_set_causal_attn: changing the attention type after creation is not "
                                  "supported; set attention_type in the context params")


@cfunc([_vp, _b])
def llama_set_warmup(ctx, warmup):
    pass


@cfunc([_vp, ctypes.c_void_p, _vp])
def llama_set_abort_callback(ctx, abort_callback, abort_callback_data):
    c = _obj(ctx, "context", "llama_set_abort_callback")
    if c is not None:
        c.abort_cb = None if not abort_callback else (abort_callback, abort_callback_data)


@cfunc([_vp])
def llama_synchronize(ctx):
    pass


# ------------------------------------------------------------------ outputs
def _pointer(c: CContext, arr: np.ndarray):
    c.keep(arr)
    return ctypes.cast(arr.ctypes.data, _NULL_F)


def _rows(c: CContext, what: str):
    try:
        if what == "logits":
            return np.ascontiguousarray(c.logits_rows(), dtype=np.float32)
        return np.ascontiguousarray(c.ctx.get_embeddings(), dtype=np.float32)
    except Exception as e:      # no decode yet / planning-only context / wrong mode
        _llama_log.error(f"llama_get_{what}: {e}")
        return None


@cfunc([_vp], _P(ctypes.c_float))
def llama_get_logits(ctx):
    c = _obj(ctx, "context", "llama_get_logits")
    rows = None if c is None else _rows(c, "logits")
    return _NULL_F() if rows is None else _pointer(c, rows)


@cfunc([_vp, _i32], _P(ctypes.c_float))
def llama_get_logits_ith(ctx, i):
    c = _obj(ctx, "context", "llama_get_logits_ith")
    if c is None:
        return _NULL_F()
    try:
        row = np.ascontiguousarray(c.logits_ith(i), dtype=np.float32)
    except Exception as e:
        _llama_log.error(f"llama_get_logits_ith: {e}")
        return _NULL_F()
    return _pointer(c, row)


@cfunc([_vp], _P(ctypes.c_float))
def llama_get_embeddings(ctx):
    c = _obj(ctx, "context", "llama_get_embeddings")
    rows = None if c is None else _rows(c, "embeddings")
    return _NULL_F() if rows is None else _pointer(c, rows)


@cfunc([_vp, _i32], _P(ctypes.c_float))
def llama_get_embeddings_ith(ctx, i):
    c = _obj(ctx, "context", "llama_get_embeddings_ith")
    if c is None:
        return _NULL_F()
    try:
        row = np.ascontiguousarray(c.ctx.get_embeddings_ith(i), dtype=np.float32)
    except Exception as e:
        _llama_log.error(f"llama_get_embeddings_ith: {e}")
        return _NULL_F()
    return _pointer(c, row)


@cfunc([_vp, _i32], _P(ctypes.c_float))
def llama_get_embeddings_seq(ctx, seq_id):
    c = _obj(ctx, "context", "llama_get_embeddings_seq")
    if c is None or c.pooling == 0:
        return _NULL_F()
    try:
        row = np.ascontiguousarray(c.ctx.get_embeddings_seq(seq_id), dtype=np.float32)
    except Exception:
        return _NULL_F()
    return _pointer(c, row)


# backend samplers are never configured: the getters say "none"
@cfunc([_vp, _i32], _i32)
def llama_get_sampled_token_ith(ctx, i):
    return -1


for _n in ("probs", "logits"):
    globals()[f"llama_get_sampled_{_n}_ith"] = cfunc([_vp, _i32], _P(ctypes.c_float))(lambda ctx, i: _NULL_F())
    globals()[f"llama_get_sampled_{_n}_count_ith"] = cfunc([_vp, _i32], _u32)(lambda ctx, i: 0)
llama_get_sampled_candidates_ith = cfunc([_vp, _i32], _P(ctypes.c_int32))(lambda ctx, i: _P(ctypes.c_int32)())
llama_get_sampled_candidates_count_ith = cfunc([_vp, _i32], _u32)(lambda ctx, i: 0)


# ------------------------------------------------------------------ memory
def _mem(mem, fn: str):
    if not mem:
        return None            # NULL memory: a no-op, as in llama.cpp
    return _obj(mem, "memory", fn)


def _valid_seq(c: CContext, s: int, fn: str, allow_all: bool) -> bool:
    if (allow_all and s < 0) or 0 <= s < c.ctx.n_seq_max:
        return True
    _llama_log.error(f"{fn}: invalid seq_id {s} (n_seq_max = {c.ctx.n_seq_max}); llama.cpp aborts here, nothing done")
    return False


@cfunc([_vp, _b])
def llama_memory_clear(mem, data):
    c = _mem(mem, "llama_memory_clear")
    if c is not None:
        c.kv.clear()


@cfunc([_vp, _i32, _i32, _i32], _b)
def llama_memory_seq_rm(mem, seq_id, p0, p1):
    c = _mem(mem, "llama_memory_seq_rm")
    if c is None:
        return True
    if not _valid_seq(c, seq_id, "llama_memory_seq_rm", True):
        return False
    try:
        return bool(c.kv.seq_rm(max(seq_id, -1), p0, p1))
    except ValueError as e:
        _llama_log.error(f"llama_memory_seq_rm: {e}")
        return False


@cfunc([_vp, _i32, _i32, _i32, _i32])
def llama_memory_seq_cp(mem, seq_id_src, seq_id_dst, p0, p1):
    c = _mem(mem, "llama_memory_seq_cp")
    if c is None or seq_id_src == seq_id_dst:
        return
    if _valid_seq(c, seq_id_src, "llama_memory_seq_cp", False) and \
            _valid_seq(c, seq_id_dst, "llama_memory_seq_cp", False):
        try:
            c.kv.seq_cp(seq_id_src, seq_id_dst, p0, p1)
        except ValueError as e:
            _llama_log.error(f"llama_memory_seq_cp: {e}")


@cfunc([_vp, _i32])
def llama_memory_seq_keep(mem, seq_id):
    c = _mem(mem, "llama_memory_seq_keep")
    if c is not None and _valid_seq(c, seq_id, "llama_memory_seq_keep", False):
        c.kv.seq_keep(seq_id)


@cfunc([_vp, _i32, _i32, _i32, _i32])
def llama_memory_seq_add(mem, seq_id, p0, p1, delta):
    c = _mem(mem, "llama_memory_seq_add")
    if c is None or delta == 0 or not _valid_seq(c, seq_id, "llama_memory_seq_add", False):
        return
    try:
        c.kv.seq_add(seq_id, p0, p1, delta)
    except ValueError as e:
        _llama_log.error(f"llama_memory_seq_add: {e}")


@cfunc([_vp, _i32, _i32, _i32, ctypes.c_int])
def llama_memory_seq_div(mem, seq_id, p0, p1, d):
    c = _mem(mem, "llama_memory_seq_div")
    if c is None or d == 1 or not _valid_seq(c, seq_id, "llama_memory_seq_div", False):
        return
    try:
        c.kv.seq_div(seq_id, p0, p1, d)
    except ValueError as e:
        _llama_log.error(f"llama_memory_seq_div: {e}")


@cfunc([_vp, _i32], _i32)
def llama_memory_seq_pos_min(mem, seq_id):
    c = _mem(mem, "llama_memory_seq_pos_min")
    if c is None or not (0 <= seq_id < c.ctx.n_seq_max):
        return -1
    return c.kv.seq_pos_min(seq_id)


@cfunc([_vp, _i32], _i32)
def llama_memory_seq_pos_max(mem, seq_id):
    c = _mem(mem, "llama_memory_seq_pos_max")
    if c is None or not (0 <= seq_id < c.ctx.n_seq_max):
        return -1
    return c.kv.seq_pos_max(seq_id)


@cfunc([_vp], _b)
def llama_memory_can_shift(mem):
    return _mem(mem, "llama_memory_can_shift") is not None


# ------------------------------------------------------------------ perf
@cfunc([_vp], llama_perf_context_data)
def llama_perf_context(ctx):
    d = llama_perf_context_data()
    c = _obj(ctx, "context", "llama_perf_context")
    if c is not None:
        d.t_start_ms, d.t_load_ms = c.t_start_ms, 0.0
        d.t_p_eval_ms, d.t_eval_ms = c.t_p_eval_ms, c.t_eval_ms
        d.n_p_eval, d.n_eval, d.n_reused = max(c.n_p_eval, 1), max(c.n_eval, 1), 0
    return d


@cfunc([_vp])
def llama_perf_context_print(ctx):
    c = _obj(ctx, "context", "llama_perf_context_print")
    if c is None:
        return
    d = llama_perf_context(ctx)
    _llama_log.log(_llama_log.GGML_LOG_LEVEL_INFO,
             f"llama_perf_context_print: prompt eval time = {d.t_p_eval_ms:10.2f} ms / {d.n_p_eval:5d} tokens\n"
             f"llama_perf_context_print:        eval time = {d.t_eval_ms:10.2f} ms / {d.n_eval:5d} runs")


@cfunc([_vp])
def llama_perf_context_reset(ctx):
    c = _obj(ctx, "context", "llama_perf_context_reset")
    if c is not None:
        c.reset_perf()


__all__ = [n for n in list(globals()) if n.startswith("llama_")]
