"""ubatch.Tokenizer: llama.cpp's llama_vocab (tokenize, detokenize, token_to_piece) over a GGUF vocabulary.

Every call is one C call (csrc/tokenizer/); the vocabulary is read-only after loading, so one Tokenizer may
be used from several threads at once (the C calls release the GIL).
"""
from __future__ import annotations

import logging
import os
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from ubatch._ffi import ffi, lib
from ubatch.common.params import ERR_LEN
from ubatch.tokenizer.errors import TokenizerError
from ubatch.tokenizer.vocab import ATTR_CONTROL, Vocab, load_vocab

TextLike = Union[str, bytes, bytearray, memoryview]
log = logging.getLogger("ubatch.tokenizer")


def _utf8(text: TextLike, strict_utf8: bool) -> bytes:
    if isinstance(text, str):
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise TokenizerError(
                f"text has a lone surrogate U+{ord(text[e.start]):04X} at index {e.start}: not encodable as "
                "UTF-8") from None
    if isinstance(text, (bytes, bytearray, memoryview)):
        b = bytes(text)
        if strict_utf8:
            try:
                b.decode("utf-8")
            except UnicodeDecodeError as e:
                raise TokenizerError(
                    f"text is not valid UTF-8: byte 0x{b[e.start]:02X} at offset {e.start} ({e.reason}); pass "
                    "strict_utf8=False to tokenize it as llama.cpp does (U+FFFD / byte tokens)") from None
        return b
    raise TypeError(f"text must be str or bytes, not {type(text).__name__}")


class Tokenizer:
    """A GGUF vocabulary ('llama' = SPM, 'gpt2' = byte-level BPE) tokenized exactly as llama.cpp does."""

    def __init__(self, vocab: Vocab) -> None:
        self._v = vocab
        self._h = vocab.handle
        self.n_vocab: int = vocab.n_tokens
        self.bos: int = vocab.ids["bos"]
        self.eos: int = vocab.ids["eos"]
        self.eot: int = vocab.ids["eot"]
        self.eom: int = vocab.ids["eom"]
        self.unk: int = vocab.ids["unk"]
        self.sep: int = vocab.ids["sep"]
        self.pad: int = vocab.ids["pad"]
        self.mask: int = vocab.ids["mask"]
        self.fim_pre: int = vocab.ids["fim_pre"]
        self.fim_suf: int = vocab.ids["fim_suf"]
        self.fim_mid: int = vocab.ids["fim_mid"]
        self.fim_pad: int = vocab.ids["fim_pad"]
        self.fim_rep: int = vocab.ids["fim_rep"]
        self.fim_sep: int = vocab.ids["fim_sep"]
        self.add_bos: bool = vocab.add_bos
        self.add_eos: bool = vocab.add_eos
        self.add_sep: bool = vocab.add_sep
        self.add_space_prefix: bool = vocab.add_space_prefix
        self.model: str = vocab.model           # tokenizer.ggml.model
        self.pre: str = vocab.pre               # tokenizer.ggml.pre as used
        self.vocab_type: int = 1 if vocab.kind == lib.UB_TOK_SPM else 2   # llama_vocab_type: 1 SPM, 2 BPE
        self.chat_template: Optional[str] = vocab.chat_template
        self.chat_templates: Dict[str, str] = dict(vocab.chat_templates)
        self._eog = frozenset(vocab.eog)
        # the piece cache (token_to_piece with special = true) copied once; offsets and attributes as
        # memoryviews, so token_to_piece is a slice, not a C call
        offp = ffi.new("const int64_t **")
        base = lib.ub_tok_pieces(self._h, offp)
        off = ffi.buffer(offp[0], 8 * (self.n_vocab + 1))
        self._piece_off = memoryview(bytes(off)).cast("q")
        self._pieces = ffi.buffer(base, self._piece_off[self.n_vocab])[:]
        self._attr_mv = memoryview(ffi.buffer(lib.ub_tok_attrs(self._h), 4 * self.n_vocab)).cast("i")
        self.nl: int = self._linefeed()         # llama_vocab_nl

    def _linefeed(self) -> int:
        """llama.cpp's linefeed id: SPM byte_to_token('\\n') (<0x0A>, else the 1-byte text, else pad); BPE the first
        token of tokenizing "\\n" (else pad)."""
        if self.vocab_type == 1:
            for text in (b"<0x0A>", b"\n"):
                i = int(lib.ub_tok_find(self._h, text, len(text)))
                if i >= 0:
                    return i
            return self.pad
        ids = self.encode("\n", add_special=False)
        return ids[0] if ids else self.pad

    @classmethod
    def from_gguf(cls, path: "str | os.PathLike[str]") -> "Tokenizer":
        """Load the vocabulary of a GGUF file (its tokenizer keys only; no tensor data is read)."""
        return cls(load_vocab(path))

    # --- ids and attributes ---
    def _check_id(self, token: int, what: str = "token") -> int:
        if isinstance(token, bool) or not isinstance(token, (int, np.integer)):
            raise TypeError(f"{what} must be an int, not {type(token).__name__}")
        t = int(token)
        if not 0 <= t < self.n_vocab:
            raise TokenizerError(f"{what} id {t} out of range [0, {self.n_vocab})")
        return t

    def token_attr(self, token: int) -> int:
        """llama_token_get_attr: the llama_token_attr bits of a token."""
        return int(self._v.attrs[self._check_id(token)])

    def is_eog(self, token: int) -> bool:
        """llama_vocab_is_eog: the token ends generation."""
        return int(token) in self._eog

    def is_control(self, token: int) -> bool:
        """llama_vocab_is_control: the token has the CONTROL attribute."""
        return bool(self._v.attrs[self._check_id(token)] & ATTR_CONTROL)

    @property
    def eog_ids(self) -> frozenset:
        return self._eog

    def token_text(self, token: int) -> bytes:
        """llama_vocab_get_text: the raw vocabulary text of a token."""
        p = ffi.new("const uint8_t **")
        n = lib.ub_tok_text(self._h, self._check_id(token), p)
        return ffi.buffer(p[0], n)[:]

    def token_score(self, token: int) -> float:
        return float(np.frombuffer(ffi.buffer(lib.ub_tok_scores(self._h), 4 * self.n_vocab),
                                   dtype=np.float32)[self._check_id(token)])

    # --- tokenize ---
    def encode(self, text: TextLike, *, add_special: bool = True, parse_special: bool = False,
               strict_utf8: bool = True) -> List[int]:
        """llama_tokenize(vocab, text, add_special, parse_special). `str` is encoded as UTF-8 (a lone surrogate
        is an error); `bytes` must be valid UTF-8 unless strict_utf8=False, which tokenizes any bytes as
        llama.cpp does."""
        return self._encode(_utf8(text, strict_utf8), add_special, parse_special, ffi.NULL)

    def _encode(self, data: bytes, add_special: bool, parse_special: bool, protect) -> List[int]:
        """ub_tok_encode_protected on UTF-8 bytes (protect: bytes of the same length, or ffi.NULL)."""
        err = ffi.new("char[]", ERR_LEN)
        cap = len(data) + 16           # tokens <= bytes almost always; else one exact retry
        for _ in range(2):
            out = np.empty(cap, dtype=np.int32)
            n = lib.ub_tok_encode_protected(self._h, data, len(data), int(bool(add_special)), int(bool(parse_special)),
                                            protect, ffi.from_buffer("int32_t[]", out), cap, err, len(err))
            if n < 0:
                raise TokenizerError(ffi.string(err).decode("utf-8", "replace"))
            if n <= cap:
                ids = out[:n].tolist()
                if add_special:
                    self._warn_double(ids)
                return ids
            cap = n
        raise TokenizerError("tokenize: output size changed between calls")  # pragma: no cover

    tokenize = encode

    def encode_segments(self, segments: Sequence[Tuple[str, bool]], *, add_special: bool = True) -> List[int]:
        """Tokenizes the concatenation of segments (text, is_text) with special tokens parsed only where
        is_text is False: a control token written inside an is_text segment (chat message content) stays text.
        Fragments run across segment boundaries, so the ids equal encode(joined, parse_special=True) whenever
        the is_text segments contain no control-token text."""
        parts = [_utf8(t, True) for t, _ in segments]
        protect = b"".join((b"\x01" if is_text else b"\x00") * len(b) for b, (_, is_text) in zip(parts, segments))
        return self._encode(b"".join(parts), add_special, True, protect)

    def _warn_double(self, ids: List[int]) -> None:
        """llama.cpp's double-BOS / double-EOS warnings (the latter for BPE only), as log warnings."""
        if self.add_bos and len(ids) >= 2 and ids[1] == self.bos:
            log.warning("Added a BOS token to the prompt as specified by the model but the prompt also starts with "
                        "a BOS token. So now the final prompt starts with 2 BOS tokens. Are you sure this is what "
                        "you want?")
        if self.vocab_type == 2 and self.add_eos and len(ids) >= 2 and ids[-2] == self.eos:
            log.warning("Added a EOS token to the prompt as specified by the model but the prompt also ends with a "
                        "EOS token. So now the final prompt ends with 2 EOS tokens. Are you sure this is what you "
                        "want?")

    # --- detokenize ---
    def _ids_array(self, ids: Iterable[int]) -> np.ndarray:
        if not isinstance(ids, (np.ndarray, list, tuple)):
            ids = list(ids)
        try:
            arr = ids if isinstance(ids, np.ndarray) else np.asarray(ids)
        except ValueError:
            raise TypeError("ids must be a 1-D sequence of ints") from None
        if arr.size == 0:
            return np.zeros(0, dtype=np.int32)
        if arr.ndim != 1 or arr.dtype.kind not in "iu":
            if arr.ndim == 1:   # name the culprit (error path only)
                for k, t in enumerate(ids.tolist() if isinstance(ids, np.ndarray) else ids):
                    if isinstance(t, bool) or not isinstance(t, int):
                        raise TypeError(f"ids[{k}] must be an int, not {type(t).__name__}")
            raise TypeError("ids must be a 1-D sequence of ints")
        if arr.min() < 0 or arr.max() >= self.n_vocab:
            k = int(np.flatnonzero((arr < 0) | (arr >= self.n_vocab))[0])
            raise TokenizerError(f"ids[{k}] = {int(arr[k])} out of range [0, {self.n_vocab})")
        return arr if arr.dtype == np.int32 and arr.flags.c_contiguous else np.ascontiguousarray(arr, dtype=np.int32)

    def decode_bytes(self, ids: Iterable[int], *, remove_special: bool = False,
                     unparse_special: bool = False) -> bytes:
        """llama_detokenize as bytes (may end inside a UTF-8 sequence)."""
        arr = self._ids_array(ids)
        cap = 16 * len(arr) + 64
        for _ in range(2):
            out = bytearray(cap)
            n = lib.ub_tok_detokenize(self._h, ffi.from_buffer("int32_t[]", arr), len(arr),
                                      ffi.from_buffer("uint8_t[]", out), cap, int(bool(remove_special)),
                                      int(bool(unparse_special)))
            if n < 0:
                raise TokenizerError("detokenize: id out of range")  # pragma: no cover - checked above
            if n <= cap:
                return bytes(out[:n])
            cap = n
        raise TokenizerError("detokenize: output size changed between calls")  # pragma: no cover

    def decode(self, ids: Iterable[int], *, remove_special: bool = False, unparse_special: bool = False) -> str:
        """llama_detokenize(vocab, ids, remove_special, unparse_special) decoded as UTF-8 (a byte sequence
        that is not valid UTF-8, e.g. a cut multi-byte character, becomes U+FFFD)."""
        return self.decode_bytes(ids, remove_special=remove_special,
                                 unparse_special=unparse_special).decode("utf-8", "replace")

    detokenize = decode

    def token_to_piece(self, token: int, *, special: bool = False, lstrip: int = 0) -> bytes:
        """llama_token_to_piece(vocab, token, lstrip, special): the token's bytes (possibly part of a UTF-8
        sequence); control/unknown tokens are empty unless special."""
        if type(token) is not int:
            token = self._check_id(token)
        if not 0 <= token < self.n_vocab:
            raise TokenizerError(f"token id {token} out of range [0, {self.n_vocab})")
        if type(lstrip) is not int or lstrip < 0:
            raise TokenizerError(f"lstrip must be an int >= 0, not {lstrip!r}")
        if not special and self._attr_mv[token] & 9:      # UNKNOWN | CONTROL: hidden
            return b""
        a, b = self._piece_off[token], self._piece_off[token + 1]
        if lstrip:
            pieces = self._pieces
            while lstrip and a < b and pieces[a] == 32:
                a += 1
                lstrip -= 1
        return self._pieces[a:b]

    # --- chat ---
    def apply_chat_template(self, messages: Sequence[dict], *, add_generation_prompt: bool = True,
                            template: Optional[str] = None, **kwargs) -> str:
        """Render the GGUF's Jinja chat template (tokenizer.chat_template, or `template`) with jinja2's
        sandboxed environment; messages are dicts with 'role' and 'content'."""
        from ubatch.tokenizer.chat_template import render_chat_template
        tpl = template if template is not None else self.chat_template
        if tpl is None:
            raise TokenizerError("this model's GGUF has no chat template (tokenizer.chat_template); pass "
                                 "template=... to apply_chat_template")
        bos = self.token_text(self.bos).decode("utf-8", "replace") if self.bos >= 0 else ""
        eos = self.token_text(self.eos).decode("utf-8", "replace") if self.eos >= 0 else ""
        return render_chat_template(tpl, messages, add_generation_prompt=add_generation_prompt,
                                    bos_token=bos, eos_token=eos, **kwargs)

    def __repr__(self) -> str:
        return (f"Tokenizer(model={self.model!r}, pre={self.pre!r}, n_vocab={self.n_vocab}, bos={self.bos}, "
                f"eos={self.eos}, eot={self.eot})")
