"""llama.cpp's grammar sampler (llama_sampler_init_grammar / _lazy / _lazy_patterns) over ubatch's C grammar
engine: apply sets the logit of every candidate the grammar does not allow to -inf (any candidate array, one C
call), accept advances the grammar. Lazy grammars wait for a trigger token or a trigger pattern (matched with
Python's re, which reads the ECMAScript patterns llama.cpp's std::regex takes the same way for the usual
subset) over the text generated so far, then replay the tokens from the match on."""
from __future__ import annotations

import re
from typing import List, Optional, Sequence, Tuple

from ubatch.grammar.lazy import trigger_words_pattern as _trigger_words_pattern  # noqa: F401  (_sampling's)
from ubatch.llama_cpp import _samplers as S


class GrammarSampler(S.Sampler):
    name = "grammar"

    def __init__(self, vocab, text: bytes, root: bytes, lazy: bool = False,
                 patterns: Sequence[bytes] = (), tokens: Sequence[int] = ()) -> None:
        from ubatch.grammar import Grammar, GrammarVocab
        self.vocab = vocab
        self.text, self.root = text, root
        self.lazy = bool(lazy)
        self.trigger_tokens = [int(t) for t in tokens]
        self.patterns = [(p, re.compile(p, re.S)) for p in patterns]
        self.grammar = None
        self.state = None
        if text:                      # an empty grammar string: a sampler that does nothing (llama.cpp's)
            tok = vocab.tok
            if tok is None:
                raise ValueError("llama_sampler_init_grammar: the model has no vocabulary")
            self.grammar = Grammar(text, GrammarVocab.of(tok), root.decode("utf-8", "replace"))
            self.state = self.grammar.state()
        self._reset_lazy()

    def _reset_lazy(self) -> None:
        self.awaiting = self.lazy
        self.buffer = b""
        self.positions: List[Tuple[int, int, int]] = []

    def apply(self, cur: S.Cur) -> None:
        if self.state is None or self.awaiting:
            return
        self.state.apply_td(cur.addr, cur.size)

    def _find(self, pattern: bytes, rx) -> Optional[int]:
        """llama_grammar_trigger_pattern::find: the start of the first non-empty group of a match (else of the
        match), a full match first for ^...$ patterns."""
        m = None
        if pattern[:1] == b"^" and pattern[-1:] == b"$":
            m = rx.fullmatch(self.buffer)
        if m is None:
            m = rx.search(self.buffer)
        if m is None:
            return None
        for i in range(1, (m.lastindex or 0) + 1):
            if m.group(i):
                return m.start(i)
        return m.start(0)

    def accept(self, token: int) -> None:
        if self.state is None:
            return
        piece = self.vocab.tok.token_to_piece(int(token), special=True)
        if self.awaiting:
            if int(token) in self.trigger_tokens:
                self.awaiting = False
                self.buffer = b""
                self.state.accept_piece(int(token), piece)
                return
            start_pos = len(self.buffer)
            self.positions.append((int(token), start_pos, start_pos + len(piece)))
            self.buffer += piece
            for p, rx in self.patterns:
                start = self._find(p, rx)
                if start is None:
                    continue
                self.awaiting = False
                for tok, a, b in self.positions:
                    if b <= start:
                        continue
                    a = max(a, start)
                    self.state.accept_piece(tok, self.buffer[a:b])
                self.buffer = b""
                self.positions = []
                return
            return
        self.state.accept(int(token))

    def reset(self) -> None:
        if self.state is not None:
            self.state.reset()
        self._reset_lazy()

    def clone(self) -> "GrammarSampler":
        new = object.__new__(GrammarSampler)
        new.__dict__.update(self.__dict__)
        new.state = self.state.clone() if self.state is not None else None
        new.positions = list(self.positions)
        return new
