"""Structured output: GBNF grammars with llama.cpp's semantics (a C engine) and JSON schema -> GBNF."""
from ubatch.grammar.engine import Grammar, GrammarError, GrammarRejected, GrammarState, GrammarVocab

__all__ = ["Grammar", "GrammarError", "GrammarRejected", "GrammarState", "GrammarVocab"]
