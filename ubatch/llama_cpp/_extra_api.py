"""Smaller names of llama-cpp-python 0.3.36's low-level module: enum-to-string helpers (their strings are
llama.cpp's, recorded from 0.3.36), the model's file type, split-file paths, classifier heads, and the type names
(structs, callback types, handle aliases) code declares variables with."""
from __future__ import annotations

import ctypes
from typing import Optional

from ubatch.llama_cpp._cfunc import cfunc
from ubatch.llama_cpp._core import _obj

_vp, _i32, _u32, _sz, _cp = ctypes.c_void_p, ctypes.c_int32, ctypes.c_uint32, ctypes.c_size_t, ctypes.c_char_p

_FTYPE_NAMES = {
    0: "all F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K - Medium",
    11: "Q3_K - Small", 12: "Q3_K - Medium", 13: "Q3_K - Large", 14: "Q4_K - Small", 15: "Q4_K - Medium",
    16: "Q5_K - Small", 17: "Q5_K - Medium", 18: "Q6_K", 19: "IQ2_XXS - 2.0625 bpw", 20: "IQ2_XS - 2.3125 bpw",
    21: "Q2_K - Small", 22: "IQ3_XS - 3.3 bpw", 23: "IQ3_XXS - 3.0625 bpw", 24: "IQ1_S - 1.5625 bpw",
    25: "IQ4_NL - 4.5 bpw", 26: "IQ3_S - 3.4375 bpw", 27: "IQ3_S mix - 3.66 bpw", 28: "IQ2_S - 2.5 bpw",
    29: "IQ2_M - 2.7 bpw", 30: "IQ4_XS - 4.25 bpw", 31: "IQ1_M - 1.75 bpw", 32: "BF16",
    36: "TQ1_0 - 1.69 bpw ternary", 37: "TQ2_0 - 2.06 bpw ternary", 38: "MXFP4 MoE", 39: "NVFP4", 40: "Q1_0",
    41: "Q2_0"}
LLAMA_FTYPE_GUESSED = 1024
_META_KEYS = ["sequence", "top_k", "top_p", "min_p", "xtc_probability", "xtc_threshold", "temp", "penalty_last_n",
              "penalty_repeat", "mirostat", "mirostat_tau", "mirostat_eta"]
_FLASH_ATTN = {-1: "auto", 0: "disabled", 1: "enabled"}
_LOAD_MODES = {-1: "auto", 0: "none", 1: "mmap", 2: "mlock", 3: "mmap+mlock", 4: "dio"}
# the ggml tensor type -> the file type a model made mostly of it has (llama.cpp's guess when general.file_type
# is absent)
_FTYPE_OF_GGML = {0: 0, 1: 1, 2: 2, 3: 3, 6: 8, 7: 9, 8: 7, 10: 10, 11: 12, 12: 15, 13: 17, 14: 18, 30: 32,
                  16: 19, 17: 20, 18: 23, 19: 24, 20: 25, 21: 26, 22: 28, 23: 30, 29: 31, 34: 36, 35: 37, 39: 38}
SPLIT_FORMAT = "%s-%05d-of-%05d.gguf"


@cfunc([_i32], _cp)
def llama_ftype_name(ftype) -> Optional[bytes]:
    guessed = bool(ftype & LLAMA_FTYPE_GUESSED)
    name = _FTYPE_NAMES.get(ftype & ~LLAMA_FTYPE_GUESSED, "unknown, may not work")
    return (("(guessed) " if guessed else "") + name).encode()


@cfunc([_vp], _i32)
def llama_model_ftype(model) -> int:
    """general.file_type of the GGUF, else llama.cpp's guess (the type most weight tensors have) | GUESSED."""
    m = _obj(model, "model", "llama_model_ftype")
    if m is None:
        return 0
    ft = m.raw.get("general.file_type")
    if ft is not None:
        return int(ft if not hasattr(ft, "__len__") else ft[0])
    counts: dict = {}
    gf = getattr(m.model, "file", None)
    for t in getattr(gf, "tensors", {}).values():
        if len(getattr(t, "ne", ())) >= 2:
            k = int(getattr(t, "type", getattr(t, "ggml_type", 0)))
            counts[k] = counts.get(k, 0) + 1
    best = max(counts, key=counts.get) if counts else 0
    return _FTYPE_OF_GGML.get(best, 0) | LLAMA_FTYPE_GUESSED


@cfunc([_i32], _cp)
def llama_model_meta_key_str(key) -> Optional[bytes]:
    return f"general.sampling.{_META_KEYS[key]}".encode() if 0 <= key < len(_META_KEYS) else None


@cfunc([_i32], _cp)
def llama_flash_attn_type_name(flash_attn_type) -> Optional[bytes]:
    return _FLASH_ATTN.get(flash_attn_type, "unknown").encode()


@cfunc([_i32], _cp)
def llama_load_mode_name(load_mode) -> Optional[bytes]:
    return _LOAD_MODES.get(load_mode, "unknown").encode()


@cfunc([_cp], _i32)
def llama_load_mode_from_str(value) -> int:
    """The load mode named value; llama.cpp throws (and aborts the process) on an unknown name, ubatch raises
    ValueError."""
    text = (value or b"").decode("utf-8", "replace")
    for k, v in _LOAD_MODES.items():
        if v == text:
            return k
    raise ValueError(f"unknown load mode: {text}")


@cfunc([], _sz)
def llama_max_tensor_buft_overrides() -> int:
    return 4096


def _write_c_string(buf, maxlen: int, text: str) -> int:
    """snprintf(buf, maxlen, "%s", text); returns strlen(text), or 0 when it did not fit (llama.cpp's value)."""
    raw = text.encode()
    if maxlen <= 0:
        return 0
    n = min(len(raw), maxlen - 1)
    ctypes.memmove(buf, raw[:n] + b"\0", n + 1)
    return len(raw) if len(raw) < maxlen else 0


def _split_path(split_path, maxlen, path_prefix, split_no, split_count):
    if split_path is None or path_prefix is None:
        return 0
    text = SPLIT_FORMAT % (path_prefix.decode("utf-8", "surrogateescape"), split_no + 1, split_count)
    return _write_c_string(split_path, int(maxlen), text)


def _split_prefix(split_prefix, maxlen, split_path, split_no, split_count):
    if split_prefix is None or split_path is None:
        return 0
    path = split_path.decode("utf-8", "surrogateescape")
    postfix = "-%05d-of-%05d.gguf" % (split_no + 1, split_count)
    if not path.endswith(postfix):
        return 0
    return _write_c_string(split_prefix, int(maxlen), path[: len(path) - len(postfix)])


def _buffer_fn(name, impl, argtypes, restype):
    """The char * output buffer arrives as the caller's ctypes buffer (create_string_buffer / c_char array),
    not converted to bytes, so it can be written."""
    def fn(*args):
        if len(args) < len(argtypes):
            raise TypeError(f"this function takes at least {len(argtypes)} arguments ({len(args)} given)")
        buf = args[0]
        if not isinstance(buf, (ctypes.Array, ctypes._Pointer, ctypes.c_char_p)) and buf is not None:
            raise ctypes.ArgumentError("argument 1: TypeError: wrong type")
        rest = [cfunc_conv(t)(a) for t, a in zip(argtypes[1:], args[1:len(argtypes)])]
        return impl(buf, *rest)
    fn.__name__ = fn.__qualname__ = name
    fn.argtypes, fn.restype = list(argtypes), restype
    return fn


def cfunc_conv(t):
    from ubatch.llama_cpp._cfunc import _converter
    return _converter(t)


_SPLIT_ARGS = [ctypes.c_char_p, _sz, _cp, ctypes.c_int, ctypes.c_int]
llama_split_path = _buffer_fn("llama_split_path", _split_path, _SPLIT_ARGS, ctypes.c_int)
llama_split_prefix = _buffer_fn("llama_split_prefix", _split_prefix, _SPLIT_ARGS, ctypes.c_int)


def _labels(m):
    v = m.raw.get(f"{m.arch}.classifier.output_labels")
    return [x.decode() if isinstance(x, bytes) else str(x) for x in v] if v is not None else []


@cfunc([_vp], _u32)
def llama_model_n_cls_out(model) -> int:
    m = _obj(model, "model", "llama_model_n_cls_out")
    if m is None:
        return 0
    return int(m.raw.get(f"{m.arch}.classifier.output_count", len(_labels(m))) or 0)


@cfunc([_vp, _u32], _cp)
def llama_model_cls_label(model, i) -> Optional[bytes]:
    m = _obj(model, "model", "llama_model_cls_label")
    labels = _labels(m) if m is not None else []
    return labels[i].encode() if 0 <= i < len(labels) else None


@cfunc([_vp], _i32)
def llama_model_n_layer_nextn(model) -> int:
    m = _obj(model, "model", "llama_model_n_layer_nextn")
    return 0 if m is None else int(m.raw.get(f"{m.arch}.nextn_predict_layers", 0) or 0)


# ------------------------------------------------------------------ type names
llama_state_seq_flags = ctypes.c_uint32
gguf_context_p_ctypes = ctypes.c_void_p
gguf_context_p = int
llama_batch_ext_p_ctypes = ctypes.c_void_p
llama_model_set_tensor_data_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
llama_opt_param_filter = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.c_void_p)


class llama_model_tensor_override(ctypes.Structure):
    _fields_ = [("pattern", ctypes.c_char_p), ("type", ctypes.c_int)]


class llama_model_imatrix_data(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("data", ctypes.POINTER(ctypes.c_float)), ("size", ctypes.c_size_t)]


class llama_opt_params(ctypes.Structure):
    _fields_ = [("n_ctx_train", ctypes.c_uint32), ("param_filter", llama_opt_param_filter),
                ("param_filter_ud", ctypes.c_void_p), ("get_opt_pars", ctypes.c_void_p),
                ("get_opt_pars_ud", ctypes.c_void_p)]


class llama_sampler_data(ctypes.Structure):
    _fields_ = [("logits", ctypes.c_void_p), ("probs", ctypes.c_void_p), ("sampled", ctypes.c_void_p),
                ("candidates", ctypes.c_void_p)]


llama_sampler_i_backend_init = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint32)
llama_sampler_i_backend_accept = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                                  ctypes.c_void_p)
llama_sampler_i_backend_apply = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                                 ctypes.POINTER(llama_sampler_data))
llama_sampler_i_backend_set_input = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
llama_sampler_i_backend_reset = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
llama_sampler_i_copy_state = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)


@cfunc([], None)
def llama_model_quantize_default_params():
    from ubatch.llama_cpp._structs import llama_model_quantize_params
    p = llama_model_quantize_params()
    p.nthread, p.ftype, p.quantize_output_tensor = 0, 7, True
    if hasattr(p, "output_tensor_type"):
        p.output_tensor_type = p.token_embedding_type = 43     # GGML_TYPE_COUNT: "the default"
    if hasattr(p, "max_buf_size"):
        p.max_buf_size = 8 << 30
    return p


def _quantize_params(params):
    """The llama_model_quantize_params a POINTER(...) argument names, as ctypes accepts it (the struct, a pointer,
    byref); TypeError otherwise."""
    from ubatch.llama_cpp._structs import llama_model_quantize_params
    if isinstance(params, llama_model_quantize_params):
        return params
    if isinstance(params, ctypes.POINTER(llama_model_quantize_params)):
        if not params:
            raise TypeError("params is NULL")
        return params.contents
    if type(params).__name__ == "CArgObject" and isinstance(getattr(params, "_obj", None), llama_model_quantize_params):
        return params._obj
    raise TypeError(f"expected LP_llama_model_quantize_params instance instead of {type(params).__name__}")


@cfunc([_cp, _cp, ctypes.POINTER(ctypes.c_void_p)], _u32)
def llama_model_quantize(fname_inp, fname_out, params):
    """0 when fname_out was written (ubatch/llama_cpp/_quantize.py: the file types it writes, llama.cpp's rules
    and layout); 1 with the reason logged otherwise (nothing written). params: a llama_model_quantize_params
    (the struct, a pointer to it or byref)."""
    from ubatch.llama_cpp import _llama_log
    from ubatch.llama_cpp._quantize import QuantizeError, quantize
    try:
        p = _quantize_params(params)
    except TypeError as e:
        raise ctypes.ArgumentError(f"argument 3: TypeError: {e}") from None
    try:
        if not fname_inp or not fname_out:
            raise QuantizeError("fname_inp and fname_out are required")
        quantize(fname_inp.decode("utf-8"), fname_out.decode("utf-8"), p)
        return 0
    except (QuantizeError, OSError, ValueError) as e:
        _llama_log.error(f"llama_model_quantize: failed to quantize: {e}")
        return 1


__all__ = [n for n in list(globals()) if n.startswith(("llama_", "gguf_"))]
