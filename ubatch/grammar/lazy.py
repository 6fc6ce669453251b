"""Lazy grammars for the engine (llama.cpp's `llama_sampler_init_grammar_lazy_patterns` semantics, as the drop-in's
low-level sampler has them): the output is free until a trigger word, pattern or token appears in it; from there
on the grammar constrains it, having accepted the generated text from the trigger's start (the pieces of the
tokens that overlap it, cut at it). `LazyGrammar(text, trigger_words=[...])` is given as SamplingParams.grammar;
the engine compiles it against its vocabulary like any GBNF and every sequence gets its own LazyGrammarState
(apply / accept / clone, as GrammarState)."""
from __future__ import annotations

import re
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np


def trigger_words_pattern(words: Sequence[bytes]) -> bytes:
    """llama.cpp's pattern for trigger words: [\\s\\S]*?(w1|w2|...)[\\s\\S]* with regex specials escaped."""
    esc = [re.sub(rb"[.^$|()*+?\[\]{}\\]", lambda m: b"\\" + m.group(0), w) for w in words]
    return b"[\\s\\S]*?(" + b"|".join(esc) + b")[\\s\\S]*"


class LazyGrammar:
    """GBNF text that constrains the output only once a trigger word / token has been generated."""

    def __init__(self, text: str, trigger_words: Sequence[Union[str, bytes]] = (),
                 trigger_tokens: Sequence[int] = (), root: str = "root",
                 trigger_patterns: Sequence[Union[str, bytes]] = ()) -> None:
        words = [w.encode("utf-8") if isinstance(w, str) else bytes(w) for w in trigger_words]
        pats = [p.encode("utf-8") if isinstance(p, str) else bytes(p) for p in trigger_patterns]
        if not any(words) and not trigger_tokens and not pats:
            raise ValueError("LazyGrammar: give at least one non-empty trigger word, a pattern or a trigger token")
        for p in pats:
            re.compile(p, re.S)                 # a bad pattern is an error here, not in the engine
        self._grammar, self._root = text, root
        self.trigger_words = [w for w in words if w]
        self.trigger_patterns = pats
        self.trigger_tokens = [int(t) for t in trigger_tokens]

    def bind(self, grammar) -> "BoundLazyGrammar":
        """This lazy grammar over `grammar` (its text compiled against a vocabulary with a tokenizer)."""
        pats = ([trigger_words_pattern(self.trigger_words)] if self.trigger_words else []) + self.trigger_patterns
        return BoundLazyGrammar(grammar, pats, self.trigger_tokens)


class BoundLazyGrammar:
    def __init__(self, grammar, patterns: List[bytes], tokens: List[int]) -> None:
        self.grammar = grammar
        self.tok = grammar.vocab.tokenizer
        if self.tok is None:
            raise ValueError("a lazy grammar needs a vocabulary with its tokenizer")
        self.patterns = [(p, re.compile(p, re.S)) for p in patterns]
        self.tokens = set(tokens)

    def state(self) -> "LazyGrammarState":
        return LazyGrammarState(self)


class LazyGrammarState:
    """One sequence's position: awaiting its trigger (the text so far buffered) or the grammar's state."""

    def __init__(self, bound: BoundLazyGrammar) -> None:
        self.bound = bound
        self.inner = None                       # the grammar's state once triggered
        self.refused = False                    # the grammar refused its trigger's text: free for good
        self.buffer = b""
        self.positions: List[Tuple[int, int, int]] = []

    @property
    def triggered(self) -> bool:
        return self.inner is not None

    def clone(self) -> "LazyGrammarState":
        new = LazyGrammarState(self.bound)
        new.inner = self.inner.clone() if self.inner is not None else None
        new.refused = self.refused
        new.buffer, new.positions = self.buffer, list(self.positions)
        return new

    def apply(self, logits: np.ndarray) -> None:
        """Disallowed tokens -> -inf, once triggered (before: nothing)."""
        if self.inner is not None:
            self.inner.apply(logits)

    def _start(self) -> Optional[int]:
        """llama_grammar_trigger_pattern::find over the patterns in order: a full match first for ^...$ ones,
        the start of the first non-empty group of a match (else of the match)."""
        for p, rx in self.bound.patterns:
            m = rx.fullmatch(self.buffer) if p[:1] == b"^" and p[-1:] == b"$" else None
            if m is None:
                m = rx.search(self.buffer)
            if m is None:
                continue
            for i in range(1, (m.lastindex or 0) + 1):
                if m.group(i):
                    return m.start(i)
            return m.start(0)
        return None

    def accept(self, token: int) -> None:
        """Advances by one generated token; once triggered, GrammarRejected (state unchanged) when the grammar
        refuses it. A trigger whose text (from its start to the end of its token) the grammar refuses leaves the
        output free for good (llama.cpp throws there; the engine's output then stays the unconstrained one)."""
        if self.inner is not None:
            self.inner.accept(int(token))
            return
        if self.refused:
            return
        from ubatch.grammar import GrammarRejected
        b = self.bound
        piece = bytes(b.tok.token_to_piece(int(token), special=True))
        st = b.grammar.state()
        if int(token) in b.tokens:
            try:
                st.accept_piece(int(token), piece)
            except GrammarRejected:
                self.refused, self.buffer, self.positions = True, b"", []
                return
            self.inner, self.buffer, self.positions = st, b"", []
            return
        self.positions.append((int(token), len(self.buffer), len(self.buffer) + len(piece)))
        self.buffer += piece
        start = self._start()
        if start is None:
            return
        try:
            for t, lo, hi in self.positions:
                if hi > start:
                    st.accept_piece(t, self.buffer[max(lo, start):hi])
        except GrammarRejected:
            self.refused, self.buffer, self.positions = True, b"", []
            return
        self.inner, self.buffer, self.positions = st, b"", []

    def accept_text(self, text: Union[str, bytes]) -> None:
        """Text the output starts with (already in the prompt): the grammar's own text once triggered."""
        if self.inner is not None:
            self.inner.accept_text(text)
            return
        raise ValueError("grammar_prefix with a lazy grammar that has not been triggered")


__all__ = ["LazyGrammar", "LazyGrammarState"]
