"""Vocabulary functions (llama_vocab_*, llama_tokenize, llama_token_to_piece, llama_detokenize) over
ubatch.Tokenizer, writing into caller-owned ctypes buffers with llama.cpp's return conventions (negative =
the size needed, nothing written). The C symbol `llama_tokenize` of the extension forwards here too."""
from __future__ import annotations

import ctypes
from typing import List, Optional

import numpy as np

from ubatch._ffi import ffi, lib
from ubatch.llama_cpp import _llama_log
from ubatch.llama_cpp._cfunc import cfunc
from ubatch.llama_cpp._constants import (LLAMA_TOKEN_ATTR_BYTE, LLAMA_TOKEN_ATTR_CONTROL, LLAMA_TOKEN_ATTR_NORMAL,
                                         LLAMA_TOKEN_ATTR_UNDEFINED, LLAMA_TOKEN_ATTR_UNKNOWN,
                                         LLAMA_TOKEN_ATTR_UNUSED, LLAMA_TOKEN_ATTR_USER_DEFINED, LLAMA_TOKEN_NULL)
from ubatch.llama_cpp._handles import REGISTRY, HandleError
from ubatch.llama_cpp._structs import llama_token_p

_VOCAB_TYPES = {"no_vocab": 0, "none": 0, "llama": 1, "gpt2": 2, "bert": 3, "t5": 4, "rwkv": 5, "plamo2": 6}
_TYPE_TO_ATTR = {0: LLAMA_TOKEN_ATTR_UNDEFINED, 1: LLAMA_TOKEN_ATTR_NORMAL, 2: LLAMA_TOKEN_ATTR_UNKNOWN,
                 3: LLAMA_TOKEN_ATTR_CONTROL, 4: LLAMA_TOKEN_ATTR_USER_DEFINED, 5: LLAMA_TOKEN_ATTR_UNUSED,
                 6: LLAMA_TOKEN_ATTR_BYTE}


class CVocab:
    """What a llama_vocab handle names: the model's tokenizer (None for a GGUF without a vocabulary)."""

    def __init__(self, model) -> None:
        self.model = model
        self.tok = model.tokenizer
        self.raw = model.raw
        self.type = int(getattr(self.tok, "vocab_type", -1))
        if self.type < 0:
            self.type = _VOCAB_TYPES.get(str(self.raw.get("tokenizer.ggml.model", "no_vocab")), 0)
        self.n_tokens = int(getattr(self.tok, "n_vocab", model.n_vocab)) if self.tok is not None else model.n_vocab
        self.handle = REGISTRY.new("vocab", self)

    def free(self) -> None:
        REGISTRY.free(self.handle)

    # special ids: the tokenizer's own values where it has them, else the GGUF keys
    def special(self, name: str) -> int:
        if self.tok is not None and name in ("bos", "eos", "eot") and hasattr(self.tok, name):
            v = getattr(self.tok, name)
            return LLAMA_TOKEN_NULL if v is None else int(v)
        if self.tok is not None:
            for attr in (f"{name}_id", f"token_{name}", name):
                v = getattr(self.tok, attr, None)
                if isinstance(v, (int, np.integer)):
                    return int(v)
        key = {"sep": "seperator", "nl": None}.get(name, name)
        if key is None:
            if self.tok is None:
                return LLAMA_TOKEN_NULL
            ids = self.encode(b"\n", False, False)
            return ids[0] if len(ids) == 1 else LLAMA_TOKEN_NULL
        v = self.raw.get(f"tokenizer.ggml.{key}_token_id")
        return LLAMA_TOKEN_NULL if v is None else int(v)

    def add_flag(self, name: str) -> bool:
        if self.tok is not None:
            for attr in (f"add_{name}", f"add_{name}_token"):
                v = getattr(self.tok, attr, None)
                if isinstance(v, (bool, np.bool_)):
                    return bool(v)
        v = self.raw.get(f"tokenizer.ggml.add_{name}_token")
        if v is not None:
            return bool(v)
        return name == "bos" and self.type == 1

    def check(self, token: int, fn: str) -> bool:
        if 0 <= token < self.n_tokens:
            return True
        _llama_log.error(f"{fn}: invalid token id {token} (n_tokens = {self.n_tokens})")
        return False

    def text(self, token: int) -> bytes:
        toks = self.raw.get("tokenizer.ggml.tokens")
        if toks is None or not self.check(token, "llama_vocab_get_text"):
            return b""
        t = toks[token]
        return t.encode("utf-8") if isinstance(t, str) else bytes(t)

    def score(self, token: int) -> float:
        s = self.raw.get("tokenizer.ggml.scores")
        if s is None or not (0 <= token < len(s)):
            return 0.0
        return float(s[token])

    def attr(self, token: int) -> int:
        if self.tok is not None and hasattr(self.tok, "token_attr"):
            return int(self.tok.token_attr(token))
        t = self.raw.get("tokenizer.ggml.token_type")
        if t is None or not (0 <= token < len(t)):
            return LLAMA_TOKEN_ATTR_UNDEFINED
        return _TYPE_TO_ATTR.get(int(t[token]), LLAMA_TOKEN_ATTR_UNDEFINED)

    def is_eog(self, token: int) -> bool:
        if self.tok is None or token < 0:
            return False
        return bool(self.tok.is_eog(int(token)))

    def is_control(self, token: int) -> bool:
        if self.tok is None or token < 0:
            return False
        return bool(self.tok.is_control(int(token)))

    def encode(self, text: bytes, add_special: bool, parse_special: bool) -> List[int]:
        if self.tok is None:
            raise NotImplementedError("tokenization: the model has no vocabulary (tokenizer.ggml.model = no_vocab)")
        try:
            return list(self.tok.encode(text, add_special=bool(add_special), parse_special=bool(parse_special),
                                        strict_utf8=False))
        except TypeError:      # a tokenizer without the strict_utf8 switch
            return list(self.tok.encode(text, add_special=bool(add_special), parse_special=bool(parse_special)))

    def piece(self, token: int, lstrip: int, special: bool) -> bytes:
        if self.tok is None:
            return b""
        # llama.cpp strips `for (i = 0; i < lstrip && ...)` spaces: a negative lstrip strips none
        return bytes(self.tok.token_to_piece(int(token), special=bool(special), lstrip=max(int(lstrip), 0)))

    def detok(self, ids, remove_special: bool, unparse_special: bool) -> bytes:
        if self.tok is None:
            return b""
        fn = getattr(self.tok, "decode_bytes", None)
        if fn is not None:
            return bytes(fn(ids, remove_special=remove_special, unparse_special=unparse_special))
        return self.tok.decode(ids, remove_special=remove_special, unparse_special=unparse_special).encode("utf-8")


def get(vocab) -> Optional[CVocab]:
    try:
        return REGISTRY.get(vocab, "vocab")
    except HandleError as e:
        _llama_log.error(f"llama_vocab: {e}")
        return None


def tokenize_into(v: CVocab, text: bytes, text_len: int, dst_addr: int, n_max: int, add_special: bool,
                  parse_special: bool) -> int:
    """The shared body of the Python and the C llama_tokenize. dst_addr: address of int32[n_max]."""
    if text_len < 0:
        # llama.cpp builds std::string(text, text_len): a negative length is a failed tokenization (the C library
        # throws std::length_error); here it is llama_tokenize's failure code, INT32_MIN, with a log line
        _llama_log.error(f"llama_tokenize: text_len = {text_len} < 0")
        return -2**31
    text = text[:text_len]
    try:
        ids = v.encode(text, add_special, parse_special)
    except NotImplementedError as e:
        _llama_log.error(f"llama_tokenize: {e}")
        return 0
    except (ValueError, TypeError) as e:
        _llama_log.error(f"llama_tokenize: {e}")
        return -2**31
    n = len(ids)
    if n > n_max:
        return -n
    if n:
        np.ctypeslib.as_array((ctypes.c_int32 * n).from_address(dst_addr))[:] = ids
    return n


@cfunc([ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32, llama_token_p, ctypes.c_int32, ctypes.c_bool,
        ctypes.c_bool], ctypes.c_int32)
def llama_tokenize(vocab, text, text_len, tokens, n_tokens_max, add_special, parse_special):
    v = get(vocab)
    if v is None:
        return -2**31
    text = text or b""
    if text_len > len(text):
        text_len = len(text)
    addr = ctypes.cast(tokens, ctypes.c_void_p).value if tokens is not None else 0
    if not addr and n_tokens_max > 0:
        return -2**31
    return tokenize_into(v, text, text_len, addr or 0, n_tokens_max, add_special, parse_special)


@ffi.callback("ub_compat_tokenize_fn", error=-2**31)
def _c_tokenize(vocab, text, text_len, tokens, n_max, add_special, parse_special):
    """The C llama_tokenize's path back into the tokenizer (see csrc/compat/llama_tokenize.c)."""
    v = REGISTRY.find(int(ffi.cast("uintptr_t", vocab)), "vocab")
    if v is None:
        return -2**31
    data = ffi.unpack(text, text_len) if text_len > 0 else b""
    return tokenize_into(v, data, text_len, int(ffi.cast("uintptr_t", tokens)), n_max, add_special, parse_special)


lib.ub_compat_set_tokenize(_c_tokenize)


@cfunc([ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_bool],
       ctypes.c_int32)
def llama_token_to_piece(vocab, token, buf, length, lstrip, special):
    v = get(vocab)
    if v is None:
        return 0
    if not v.check(token, "llama_token_to_piece"):
        return 0
    piece = v.piece(token, lstrip, special)
    if len(piece) > length:
        return -len(piece)
    if piece and buf:
        ctypes.memmove(buf, piece, len(piece))
    return len(piece)


@cfunc([ctypes.c_void_p, llama_token_p, ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32, ctypes.c_bool,
        ctypes.c_bool], ctypes.c_int32)
def llama_detokenize(vocab, tokens, n_tokens, text, text_len_max, remove_special, unparse_special):
    v = get(vocab)
    if v is None or n_tokens < 0:
        return 0
    ids = np.ctypeslib.as_array(ctypes.cast(tokens, ctypes.POINTER(ctypes.c_int32)), (n_tokens,)).tolist() \
        if n_tokens else []
    bad = [t for t in ids if not (0 <= t < v.n_tokens)]
    if bad:
        _llama_log.error(f"llama_detokenize: invalid token id {bad[0]}")
        return 0
    out = v.detok(ids, remove_special, unparse_special)
    if len(out) > text_len_max:
        return -len(out)
    if out and text:
        ctypes.memmove(text, out, len(out))
    return len(out)


def _vocab_fn(name: str, body, restype=ctypes.c_int32, with_token: bool = False):
    args = [ctypes.c_void_p, ctypes.c_int32] if with_token else [ctypes.c_void_p]

    @cfunc(args, restype)
    def fn(vocab, *tok):
        v = get(vocab)
        if v is None:
            return {ctypes.c_bool: False, ctypes.c_float: 0.0, ctypes.c_char_p: None}.get(restype, LLAMA_TOKEN_NULL)
        return body(v, *tok)
    fn.__name__ = fn.__qualname__ = name
    return fn


llama_vocab_type = _vocab_fn("llama_vocab_type", lambda v: v.type)
llama_vocab_n_tokens = _vocab_fn("llama_vocab_n_tokens", lambda v: v.n_tokens)
llama_vocab_get_text = _vocab_fn("llama_vocab_get_text", lambda v, t: v.text(t), ctypes.c_char_p, True)
llama_vocab_get_score = _vocab_fn("llama_vocab_get_score", lambda v, t: v.score(t), ctypes.c_float, True)
llama_vocab_get_attr = _vocab_fn("llama_vocab_get_attr", lambda v, t: v.attr(t), ctypes.c_int, True)
llama_vocab_is_eog = _vocab_fn("llama_vocab_is_eog", lambda v, t: v.is_eog(t), ctypes.c_bool, True)
llama_vocab_is_control = _vocab_fn("llama_vocab_is_control", lambda v, t: v.is_control(t), ctypes.c_bool, True)
for _name in ("bos", "eos", "eot", "sep", "nl", "pad", "mask", "cls"):
    globals()[f"llama_vocab_{_name}"] = _vocab_fn(f"llama_vocab_{_name}", lambda v, n=_name: v.special(n))
for _name in ("pre", "suf", "mid", "pad", "rep", "sep"):
    globals()[f"llama_vocab_fim_{_name}"] = _vocab_fn(f"llama_vocab_fim_{_name}",
                                                      lambda v, n=_name: v.special(f"fim_{n}"))
llama_vocab_get_add_bos = _vocab_fn("llama_vocab_get_add_bos", lambda v: v.add_flag("bos"), ctypes.c_bool)
llama_vocab_get_add_eos = _vocab_fn("llama_vocab_get_add_eos", lambda v: v.add_flag("eos"), ctypes.c_bool)
llama_vocab_get_add_sep = _vocab_fn("llama_vocab_get_add_sep", lambda v: v.add_flag("sep"), ctypes.c_bool)
del _name

__all__ = [n for n in list(globals()) if n.startswith("llama_")]
