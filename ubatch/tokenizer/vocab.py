"""Vocabulary loading: what llama.cpp's llama_vocab::impl::load derives from the GGUF keys (docs/llama-cpp-behaviours.md §T1-T3).

`load_vocab(path)` reads only the tokenizer keys, copies texts/scores/types into the C vocabulary in bulk
(no Python loop per token), then applies llama.cpp's load-time rules in its order: per-type defaults, id and
flag overrides, EOT/EOM/FIM detection by text (forcing CONTROL), the "unused" rule, the EOG set (forcing
CONTROL), the gpt-oss / harmony / `</s>` rules, then the special-token and piece caches, then the name-based
LSTRIP/RSTRIP attributes.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, Optional, Set

import numpy as np

from ubatch._ffi import ffi, lib
from ubatch.common.params import ERR_LEN
from ubatch.tokenizer.errors import TokenizerError, UnsupportedVocabError
from ubatch.tokenizer.gguf_vocab import GGUFMetadata, NumArray, StringArray, T_F32, T_I32
from ubatch.tokenizer.pretok import PRE_TOKENIZERS

KEY = "tokenizer.ggml."
ATTR_UNKNOWN, ATTR_UNUSED, ATTR_NORMAL, ATTR_CONTROL = 1, 2, 4, 8
ATTR_USER_DEFINED, ATTR_BYTE, ATTR_LSTRIP, ATTR_RSTRIP = 16, 32, 128, 256
# GGUF token type (0 undefined .. 6 byte) -> llama_token_attr
_TYPE_TO_ATTR = np.array([0, ATTR_NORMAL, ATTR_UNKNOWN, ATTR_CONTROL, ATTR_USER_DEFINED, ATTR_UNUSED, ATTR_BYTE],
                         dtype=np.int32)

EOT_TEXTS = ["<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
             "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"]
EOM_TEXTS = ["<|eom_id|>"]
FIM_TEXTS = {
    "fim_pre": ["<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
                "<|code_prefix|>", "<|prefix|>"],
    "fim_suf": ["<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
                "<|code_suffix|>", "<|suffix|>"],
    "fim_mid": ["<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
                "<|code_middle|>", "<|middle|>"],
    "fim_pad": ["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"],
    "fim_rep": ["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"],
    "fim_sep": ["<|file_sep|>"],
}
EOG_TEXTS = ["<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
             "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
             "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
             "<｜end▁of▁sentence｜>", "[e~["]
GPT_OSS_USER_DEFINED = ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"]
# (key suffix, field); the deprecated aliases come last and win, as in llama.cpp's list
ID_KEYS = [("bos", "bos"), ("eos", "eos"), ("eot", "eot"), ("eom", "eom"), ("unknown", "unk"),
           ("seperator", "sep"), ("padding", "pad"), ("mask", "mask"), ("fim_pre", "fim_pre"),
           ("fim_suf", "fim_suf"), ("fim_mid", "fim_mid"), ("fim_pad", "fim_pad"), ("fim_rep", "fim_rep"),
           ("fim_sep", "fim_sep"), ("prefix", "fim_pre"), ("suffix", "fim_suf"), ("middle", "fim_mid")]
OTHER_MODELS = {"bert": "WPM", "t5": "UGM", "rwkv": "RWKV", "plamo2": "PLaMo2", "gemma4": "BPE (gemma4, SPM-style)",
                "hybriddna": "BPE (hybriddna)", "whitespace": "BPE (whitespace)", "test": "TEST"}


@dataclass
class Vocab:
    """The loaded vocabulary: the C handle plus the values load() derives."""
    handle: object                      # cdata ub_tok*, freed by ffi.gc
    kind: int                           # lib.UB_TOK_SPM / UB_TOK_BPE
    model: str                          # tokenizer.ggml.model
    pre: str                            # tokenizer.ggml.pre as used ("default" for SPM)
    n_tokens: int
    ids: Dict[str, int] = field(default_factory=dict)     # bos eos eot eom unk sep pad mask fim_* (-1 none)
    add_bos: bool = False
    add_eos: bool = False
    add_sep: bool = False
    add_space_prefix: bool = False
    clean_spaces: bool = False
    ignore_merges: bool = False
    eog: Set[int] = field(default_factory=set)
    attrs: Optional[np.ndarray] = None  # int32[n_tokens] view of the C attributes
    chat_template: Optional[str] = None
    chat_templates: Dict[str, str] = field(default_factory=dict)
    name: str = ""


def _int_key(md: GGUFMetadata, key: str) -> Optional[int]:
    v = md.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise TokenizerError(f"{md.path}: {key} must be an integer, found {md.type_name(key)}")
    return v


def _bool_key(md: GGUFMetadata, key: str) -> Optional[bool]:
    v = md.get(key)
    if v is None:
        return None
    if not isinstance(v, (bool, int)) or isinstance(v, (StringArray, NumArray)):
        raise TokenizerError(f"{md.path}: {key} must be a bool, found {md.type_name(key)}")
    return bool(v)


def _errbuf():
    return ffi.new("char[]", ERR_LEN)


class _Loader:
    def __init__(self, md: GGUFMetadata) -> None:
        self.md = md
        self.path = md.path

    def fail(self, msg: str) -> TokenizerError:
        return TokenizerError(f"{self.path}: {msg}")

    def find(self, text: str) -> int:
        b = text.encode("utf-8")
        return int(lib.ub_tok_find(self.h, b, len(b)))

    def load(self) -> Vocab:
        md = self.md
        model = md.get(KEY + "model")
        if model is None:
            raise self.fail("no tokenizer in this GGUF (key tokenizer.ggml.model missing)")
        if not isinstance(model, str):
            raise self.fail(f"tokenizer.ggml.model must be a string, found {md.type_name(KEY + 'model')}")
        pre = md.get(KEY + "pre")
        if pre is not None and not isinstance(pre, str):
            raise self.fail(f"tokenizer.ggml.pre must be a string, found {md.type_name(KEY + 'pre')}")
        if model in ("no_vocab", "none"):
            raise UnsupportedVocabError(f"{self.path}: tokenizer.ggml.model = {model!r}: the file has no vocabulary")
        if model in OTHER_MODELS:
            raise UnsupportedVocabError(
                f"{self.path}: tokenizer.ggml.model = {model!r} ({OTHER_MODELS[model]}) is not supported; "
                "ubatch implements 'llama' (SPM) and 'gpt2' (byte-level BPE)")
        if model not in ("llama", "gpt2"):
            raise self.fail(f"unknown tokenizer: {model!r} (tokenizer.ggml.model)")
        kind = lib.UB_TOK_SPM if model == "llama" else lib.UB_TOK_BPE
        v = Vocab(handle=None, kind=kind, model=model, pre="default", n_tokens=0)
        v.name = md.get("general.name") if isinstance(md.get("general.name"), str) else ""

        ids = {k: -1 for _, k in ID_KEYS}
        ids["unk"] = -1
        if kind == lib.UB_TOK_SPM:
            ids.update(bos=1, eos=2, unk=0)
            v.add_space_prefix, v.clean_spaces, v.add_bos, v.add_eos = True, False, True, False
            pt = None
        else:
            ids.update(bos=11, eos=11)
            v.pre = pre if pre else "default"
            pt = PRE_TOKENIZERS.get(v.pre)
            if pt is None:
                raise UnsupportedVocabError(
                    f"{self.path}: tokenizer.ggml.pre = {v.pre!r} is not supported (supported: "
                    f"{', '.join(sorted(PRE_TOKENIZERS))})")
            v.add_space_prefix, v.clean_spaces = False, pt.clean_spaces
            v.ignore_merges, v.add_bos = pt.ignore_merges, pt.add_bos
            if v.pre in ("jina-v1-en", "jina-v2-code", "roberta-bpe"):
                v.add_sep = True
        asp = _bool_key(md, KEY + "add_space_prefix")
        if asp is not None:
            v.add_space_prefix = asp

        # tokens, scores, types
        toks = md.get(KEY + "tokens")
        if toks is None:
            raise self.fail("cannot find tokenizer vocab (key tokenizer.ggml.tokens missing)")
        if not isinstance(toks, StringArray):
            raise self.fail(f"tokenizer.ggml.tokens must be an array of string, found {md.type_name(KEY + 'tokens')}")
        if toks.count >= 2 ** 31 - 1:
            raise self.fail(f"tokenizer.ggml.tokens has {toks.count} entries (more than int32 ids)")
        n = v.n_tokens = toks.count
        err = _errbuf()
        buf = ffi.from_buffer("uint8_t[]", md.buf)
        try:
            h = lib.ub_tok_new(kind, buf, len(md.buf), toks.offset, n, err, len(err))
            if h == ffi.NULL:
                raise self.fail(ffi.string(err).decode())
            self.h = v.handle = ffi.gc(h, lib.ub_tok_free)
            if kind == lib.UB_TOK_BPE:
                merges = md.get(KEY + "merges")
                if merges is None:
                    raise self.fail("cannot find tokenizer merges (key tokenizer.ggml.merges missing)")
                if not isinstance(merges, StringArray):
                    raise self.fail(f"invalid gguf type for tokenizer.ggml.merges: {md.type_name(KEY + 'merges')}")
                if lib.ub_tok_set_merges(self.h, buf, len(md.buf), merges.offset, merges.count, err, len(err)) != 0:
                    raise self.fail(ffi.string(err).decode())
        finally:
            ffi.release(buf)
        attrs = np.frombuffer(ffi.buffer(lib.ub_tok_attrs(self.h), 4 * n), dtype=np.int32)
        scores = np.frombuffer(ffi.buffer(lib.ub_tok_scores(self.h), 4 * n), dtype=np.float32)
        sc = md.get(KEY + "scores")
        if sc is not None:
            if not isinstance(sc, NumArray) or sc.elem_type not in (T_F32, T_I32):
                raise self.fail(f"invalid gguf type for tokenizer.ggml.scores: {md.type_name(KEY + 'scores')} "
                                "(array of float32 or int32 expected)")
            if len(sc.values) < n:
                raise self.fail(f"tokenizer.ggml.scores has {len(sc.values)} entries for {n} tokens")
            scores[:] = sc.values[:n].astype(np.float32)
        tt = md.get(KEY + "token_type")
        if tt is not None:
            if not isinstance(tt, NumArray) or tt.elem_type != T_I32:
                raise self.fail(f"invalid gguf type for tokenizer.ggml.token_type: {md.type_name(KEY + 'token_type')}")
            if len(tt.values) < n:
                raise self.fail(f"tokenizer.ggml.token_type has {len(tt.values)} entries for {n} tokens")
            t = tt.values[:n].astype(np.int64)
            attrs[:] = np.where((t >= 0) & (t < 7), _TYPE_TO_ATTR[np.clip(t, 0, 6)], 0)
        v.attrs = attrs

        # special ids: defaults disabled when out of range; keys override when in range
        for suffix, fld in ID_KEYS:
            if ids[fld] >= n:
                ids[fld] = -1
            val = _int_key(md, f"{KEY}{suffix}_token_id")
            if val is not None and 0 <= val < n:
                ids[fld] = val
        for flag in ("add_bos", "add_eos", "add_sep"):
            b = _bool_key(md, f"{KEY}{flag}_token")
            if b is not None:
                setattr(v, flag, b)

        # EOT / EOM / FIM detection by text (first candidate in llama.cpp's list order; llama.cpp walks an
        # unordered_map, see docs/tokenizer.md) forces CONTROL on the hit
        for fld, texts in [("eot", EOT_TEXTS), ("eom", EOM_TEXTS)] + list(FIM_TEXTS.items()):
            if ids[fld] != -1:
                continue
            for text in texts:
                i = self.find(text)
                if i >= 0:
                    ids[fld] = i
                    attrs[i] |= ATTR_CONTROL
                    break
        lib.ub_tok_mark_unused(self.h)
        eog: Set[int] = {ids[f] for f in ("fim_pad", "fim_rep", "fim_sep") if ids[f] != -1}
        for text in EOG_TEXTS:
            i = self.find(text)
            if i >= 0:
                eog.add(i)
                attrs[i] |= ATTR_CONTROL
        for text in GPT_OSS_USER_DEFINED:
            i = self.find(text)
            if i >= 0:
                attrs[i] = ATTR_USER_DEFINED
        eog |= {ids[f] for f in ("eos", "eot", "eom") if ids[f] != -1}
        texts = {i: self.text(i) for i in eog}
        has = lambda s: any(t == s for t in texts.values())  # noqa: E731
        has_call = has("<|call|>") or has("<|calls|>")
        if has_call and has("<|end|>") and (has("<|return|>") or has("<|flush|>")):
            end_id = next(i for i, t in texts.items() if t == "<|end|>")
            eog.discard(end_id)
            attrs[end_id] = ATTR_USER_DEFINED
        if (has("<|tool_response>") or has("<|plamo:eos|>")) and has("</s>"):
            s_id = next(i for i, t in texts.items() if t == "</s>")
            eog.discard(s_id)
            attrs[s_id] = ATTR_NORMAL
        v.eog, v.ids = eog, ids

        cfg = ffi.new("ub_tok_config *")
        cfg.pre = pt.regex if pt is not None else 0
        cfg.add_space_prefix = int(v.add_space_prefix)
        cfg.add_bos, cfg.add_eos = int(v.add_bos), int(v.add_eos)
        cfg.bos, cfg.eos = ids["bos"], ids["eos"]
        cfg.clean_spaces, cfg.ignore_merges = int(v.clean_spaces), int(v.ignore_merges)
        if lib.ub_tok_finalize(self.h, cfg, err, len(err)) != 0:
            raise self.fail(ffi.string(err).decode())
        self._name_attrs(v)

        ct = md.get(KEY.replace("ggml.", "") + "chat_template")
        if isinstance(ct, str):
            v.chat_template = ct
        for k, val in md.kv.items():
            if k.startswith("tokenizer.chat_template.") and isinstance(val, str):
                v.chat_templates[k[len("tokenizer.chat_template."):]] = val
        return v

    def text(self, i: int) -> str:
        p = ffi.new("const uint8_t **")
        n = lib.ub_tok_text(self.h, i, p)
        return ffi.buffer(p[0], n)[:].decode("utf-8", "replace")

    def _name_attrs(self, v: Vocab) -> None:
        """LSTRIP / RSTRIP set by model / tokenizer / architecture name, after the caches (as llama.cpp)."""
        md, attrs = self.md, v.attrs
        name = (v.name or "").lower()
        pre = md.get(KEY + "pre") if isinstance(md.get(KEY + "pre"), str) else ""
        arch = md.get("general.architecture") if isinstance(md.get("general.architecture"), str) else ""
        if any(s in pre for s in ("jina-v2-de", "jina-v2-es", "jina-v2-code")) or \
                any(s in arch for s in ("nomic-bert-moe", "jina-bert-v3")):
            i = self.find("<mask>")
            if i >= 0:
                attrs[i] |= ATTR_LSTRIP
        elif "phi-3" in name or "phi3" in name:
            special = (attrs & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN)) != 0
            attrs[special] |= ATTR_RSTRIP
            for t, on in (("</s>", True), ("<unk>", False), ("<s>", False), ("<|endoftext|>", False)):
                i = self.find(t)
                if i < 0:
                    raise self.fail(f"phi-3 vocabulary without the token {t!r} (llama.cpp requires it)")
                attrs[i] = (attrs[i] | ATTR_RSTRIP) if on else (attrs[i] & ~ATTR_RSTRIP)
        elif "modern-bert" in name:
            i = self.find("[MASK]")
            if i >= 0:
                attrs[i] |= ATTR_LSTRIP


def load_vocab(path: "str | os.PathLike[str]") -> Vocab:
    """Read the vocabulary of the GGUF file at `path` (see the module docstring)."""
    with GGUFMetadata(path) as md:
        return _Loader(md).load()
