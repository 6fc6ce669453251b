"""Python side of the C grammar engine (csrc/grammar/): a vocabulary trie per tokenizer, compiled grammars and
per-sequence grammar states. Everything vocabulary-wide runs in one C call (the GIL is released)."""
from __future__ import annotations

import threading
import weakref
from typing import Optional, Union

import numpy as np

from ubatch._ffi import ffi, lib
from ubatch.common.params import ERR_LEN


class GrammarError(ValueError):
    """A grammar llama.cpp rejects (parse error, undefined rule, missing root, left recursion). `pos` is the
    byte offset in the grammar text where the parser stopped (-1 when the error has no position)."""

    def __init__(self, message: str, pos: int = -1, text: str = "") -> None:
        self.message, self.pos = message, pos
        where = ""
        if pos >= 0:
            b = text.encode("utf-8", "surrogatepass")[:pos]
            line = b.count(b"\n") + 1
            col = len(b) - (b.rfind(b"\n") + 1) + 1
            where = f" at byte {pos} (line {line}, column {col})"
        super().__init__(message if "grammar error" in message else f"grammar error{where}: {message}")


class GrammarRejected(ValueError):
    """A token or text the grammar does not allow at this point (the state is unchanged)."""


_ERRS = {lib.UB_E_ARG: "invalid argument", lib.UB_E_NOMEM: "out of memory",
         lib.UB_E_GRAMMAR_LIMIT: "the grammar's state space outgrew the engine's limits"}


def _check(rc: int, what: str) -> None:
    if rc == lib.UB_OK:
        return
    if rc == lib.UB_E_GRAMMAR_REJECT:
        raise GrammarRejected(f"{what}: not allowed by the grammar here")
    if rc == lib.UB_E_NOMEM:
        raise MemoryError(what)
    raise ValueError(f"{what}: {_ERRS.get(rc, f'error {rc}')}")


class GrammarVocab:
    """A tokenizer's pieces (token_to_piece with special = true) and end-of-generation ids in the C trie."""

    def __init__(self, pieces: bytes, offsets: np.ndarray, eog: np.ndarray, tokenizer=None) -> None:
        off = np.ascontiguousarray(offsets, dtype=np.int64)
        n = off.shape[0] - 1
        if n <= 0:
            raise ValueError("GrammarVocab: empty vocabulary")
        e = np.ascontiguousarray(eog, dtype=np.uint8)
        if e.shape != (n,):
            raise ValueError("GrammarVocab: eog must have one flag per token")
        buf = ffi.from_buffer(pieces) if pieces else ffi.NULL
        h = lib.ub_gvocab_new(buf, ffi.cast("int64_t *", off.ctypes.data), n, ffi.cast("uint8_t *", e.ctypes.data))
        if h == ffi.NULL:
            raise ValueError("GrammarVocab: bad piece offsets or out of memory")
        self._h = ffi.gc(h, lib.ub_gvocab_free)
        self.n_vocab = n
        self.tokenizer = tokenizer

    @classmethod
    def of(cls, tokenizer) -> "GrammarVocab":
        """The (cached) trie of a ubatch Tokenizer."""
        with _CACHE_LOCK:
            v = _VOCABS.get(tokenizer)
            if v is None:
                eog = np.zeros(tokenizer.n_vocab, np.uint8)
                ids = getattr(tokenizer, "eog_ids", None)
                if ids is None:
                    ids = [t for t in range(tokenizer.n_vocab) if tokenizer.is_eog(t)]
                for t in ids:
                    if 0 <= t < tokenizer.n_vocab:
                        eog[t] = 1
                if hasattr(tokenizer, "_piece_off"):     # ubatch's Tokenizer: its piece cache as it is
                    off = np.frombuffer(tokenizer._piece_off, dtype=np.int64)
                    pieces = tokenizer._pieces
                else:                                    # any other: token_to_piece(special=True), once
                    ps = [bytes(tokenizer.token_to_piece(t, special=True)) for t in range(tokenizer.n_vocab)]
                    off = np.concatenate([[0], np.cumsum([len(p) for p in ps])]).astype(np.int64)
                    pieces = b"".join(ps)
                v = cls(pieces, off, eog, tokenizer)
                _VOCABS[tokenizer] = v
            return v

    @property
    def n_nodes(self) -> int:
        return int(lib.ub_gvocab_n_nodes(self._h))


_VOCABS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_CACHE_LOCK = threading.Lock()


class Grammar:
    """A GBNF grammar parsed with llama.cpp's parser and compiled against a vocabulary (or none: then only
    text-level matching works). Raises GrammarError where llama.cpp's llama_grammar_init_impl fails."""

    def __init__(self, text: Union[str, bytes], vocab: Optional[GrammarVocab] = None, root: str = "root",
                 *, syntax_only: bool = False) -> None:
        if isinstance(text, str):
            src = text.encode("utf-8", "surrogatepass")
        elif isinstance(text, (bytes, bytearray)):
            src = bytes(text)
        else:
            raise TypeError(f"grammar must be str or bytes, not {type(text).__name__}")
        if not isinstance(root, str):
            raise TypeError("root must be a str")
        self.text = src.decode("utf-8", "replace")
        self.root = root
        self.vocab = vocab
        err = ffi.new("char[]", ERR_LEN)
        pos = ffi.new("int64_t *")
        tok = getattr(vocab.tokenizer, "_h", None) if vocab is not None else None
        tok = tok if isinstance(tok, ffi.CData) else ffi.NULL
        flags = lib.UB_GRAMMAR_SYNTAX_ONLY if syntax_only else 0
        h = lib.ub_grammar_new(src, len(src), root.encode("utf-8"), tok, vocab._h if vocab else ffi.NULL,
                               flags, err, ERR_LEN, pos)
        if h == ffi.NULL:
            raise GrammarError(ffi.string(err).decode("utf-8", "replace"), int(pos[0]), self.text)
        self._h = ffi.gc(h, lib.ub_grammar_free)

    @property
    def n_rules(self) -> int:
        return int(lib.ub_grammar_n_rules(self._h))

    def rule(self, r: int) -> list:
        """Rule r's elements as (llama_gretype, value) pairs (END included)."""
        n = lib.ub_grammar_rule(self._h, int(r), ffi.NULL, 0)
        if n < 0:
            raise IndexError(f"rule {r} out of range [0, {self.n_rules})")
        buf = ffi.new("int32_t[]", 2 * n)
        lib.ub_grammar_rule(self._h, int(r), buf, n)
        return [(buf[2 * i], buf[2 * i + 1]) for i in range(n)]

    def set_mask_cache(self, on: bool) -> None:
        """Whether states keep their allowed sets (off: every apply walks the vocabulary trie)."""
        lib.ub_grammar_set_mask_cache(self._h, 1 if on else 0)

    def stats(self) -> dict:
        o = ffi.new("int64_t[3]")
        lib.ub_grammar_stats(self._h, o)
        return {"stacks": int(o[0]), "sets": int(o[1]), "mask_bytes": int(o[2])}

    def state(self) -> "GrammarState":
        return GrammarState(self)


class GrammarState:
    """One sequence's position in a grammar: llama.cpp's stacks and partial UTF-8 sequence."""

    def __init__(self, grammar: Grammar, _h=None) -> None:
        self.grammar = grammar
        h = _h if _h is not None else lib.ub_gstate_new(grammar._h)
        if h == ffi.NULL:
            raise MemoryError("GrammarState")
        self._h = ffi.gc(h, lib.ub_gstate_free)

    def clone(self) -> "GrammarState":
        return GrammarState(self.grammar, lib.ub_gstate_clone(self._h))

    def copy_from(self, other: "GrammarState") -> None:
        _check(lib.ub_gstate_copy(self._h, other._h), "GrammarState.copy_from (another grammar)")

    def reset(self) -> None:
        lib.ub_gstate_reset(self._h)

    @property
    def can_end(self) -> bool:
        """Some stack is empty: the text so far is a complete match (end-of-generation tokens are allowed)."""
        return bool(lib.ub_gstate_can_end(self._h))

    @property
    def n_stacks(self) -> int:
        return int(lib.ub_gstate_info(self._h, ffi.NULL))

    def _need_vocab(self) -> int:
        if self.grammar.vocab is None:
            raise ValueError("this grammar was compiled without a vocabulary")
        return self.grammar.vocab.n_vocab

    def mask(self, out: Optional[np.ndarray] = None) -> np.ndarray:
        """bool[n_vocab]: the tokens llama_grammar_apply_impl leaves allowed."""
        n = self._need_vocab()
        if out is None:
            out = np.empty(n, np.bool_)
        if out.dtype != np.bool_ or out.shape != (n,) or not out.flags.c_contiguous:
            raise ValueError(f"mask: out must be a contiguous bool array of shape ({n},)")
        _check(lib.ub_gstate_mask(self._h, ffi.cast("uint8_t *", out.ctypes.data), n), "GrammarState.mask")
        return out

    def allowed(self) -> np.ndarray:
        """int32 ids of the allowed tokens, ascending."""
        return np.flatnonzero(self.mask()).astype(np.int32)

    def apply(self, logits: np.ndarray) -> None:
        """logits float32[n_vocab] (id order), in place: disallowed tokens become -inf."""
        n = self._need_vocab()
        if logits.dtype != np.float32 or logits.shape != (n,) or not logits.flags.c_contiguous \
                or not logits.flags.writeable:
            raise ValueError(f"apply: logits must be a writeable contiguous float32 array of shape ({n},)")
        _check(lib.ub_gstate_apply_row(self._h, ffi.cast("float *", logits.ctypes.data), n), "GrammarState.apply")

    def apply_td(self, addr: int, n: int) -> None:
        """llama_token_data[n] at address addr (a candidate array in any order): disallowed -> -inf."""
        self._need_vocab()
        rc = lib.ub_gstate_apply_td(self._h, ffi.cast("ub_token_data *", addr), int(n))
        if rc == lib.UB_E_ARG:
            raise ValueError("grammar apply: a candidate id is outside the vocabulary")
        _check(rc, "grammar apply")

    def allows(self, token: int) -> bool:
        n = self._need_vocab()
        t = int(token)
        if not 0 <= t < n:
            raise ValueError(f"token id {t} out of range [0, {n})")
        r = lib.ub_gstate_allows(self._h, t)
        if r < 0:
            _check(r, "GrammarState.allows")
        return bool(r)

    def accept(self, token: int) -> None:
        """llama_grammar_accept_impl; GrammarRejected (state unchanged) when the token is not allowed."""
        n = self._need_vocab()
        t = int(token)
        if not 0 <= t < n:
            raise ValueError(f"token id {t} out of range [0, {n})")
        _check(lib.ub_gstate_accept_token(self._h, t), f"token {t}")

    def accept_piece(self, token: int, piece: bytes) -> None:
        """llama_grammar_accept_token with an explicit piece (a lazy grammar replaying part of a token)."""
        b = bytes(piece)
        _check(lib.ub_gstate_accept_piece(self._h, int(token), b, len(b)), f"token {int(token)}")

    def accept_text(self, text: Union[str, bytes]) -> None:
        """llama_grammar_accept_str: advance by the code points of text."""
        b = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
        _check(lib.ub_gstate_accept_bytes(self._h, b, len(b)), f"text {text[:40]!r}")

    def matches(self, text: Union[str, bytes]) -> bool:
        """Whether the whole text is a complete match from this state (the state is not changed)."""
        s = self.clone()
        try:
            s.accept_text(text)
        except GrammarRejected:
            return False
        return s.can_end
