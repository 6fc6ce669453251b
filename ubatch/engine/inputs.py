"""What the engine makes of its inputs before anything is decoded: the tokenizer to use, a prompt as int32 token
ids (validated), and a request's compiled grammar."""
from __future__ import annotations

from typing import Dict

import numpy as np

from ubatch.engine.sampling import SamplingParams


class PromptTooLongError(ValueError):
    """A prompt that cannot fit in the context of one sequence (raised by add_request, before any decode)."""


def resolve_tokenizer(model, tokenizer):
    """The tokenizer to use: the one given, else the model's, else a byte tokenizer for a 256-token vocabulary
    without one (the embedded tiny model), else None (token-id prompts only)."""
    if tokenizer is not None:
        return tokenizer
    try:
        tok = getattr(model, "tokenizer", None)
    except Exception:       # a GGUF without a vocabulary
        tok = None
    if tok is None and int(model.n_vocab) == 256:
        from ubatch.engine.byte_tokenizer import ByteTokenizer
        tok = ByteTokenizer()
    return tok


def prompt_tokens(prompt, tokenizer, n_vocab: int) -> np.ndarray:
    """int32 token ids of a text prompt (tokenized with BOS and special tokens) or of a list of token ids
    (checked against the vocabulary); ValueError naming what is wrong."""
    if isinstance(prompt, (str, bytes)):
        if tokenizer is None:
            raise ValueError("a text prompt needs a tokenizer (this model has none): pass token ids")
        ids = tokenizer.encode(prompt, add_special=True, parse_special=True)
        bos = getattr(tokenizer, "bos", -1)
        if len(ids) >= 2 and bos >= 0 and ids[0] == bos and ids[1] == bos:
            ids = ids[1:]       # a template that writes the BOS itself, plus the one add_special adds
        arr = np.asarray(ids, np.int32)
    else:
        try:
            arr = np.asarray(list(prompt))
        except TypeError:
            raise ValueError(f"prompt must be a string or a list of token ids, got {type(prompt).__name__}")
        if arr.size and (arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer)):
            raise ValueError("prompt token ids must be a flat list of ints")
        arr = arr.astype(np.int64)
        if arr.size and (arr.min() < 0 or arr.max() >= n_vocab):
            bad = int(arr[(arr < 0) | (arr >= n_vocab)][0])
            raise ValueError(f"prompt token id {bad} is outside the vocabulary [0, {n_vocab})")
        arr = arr.astype(np.int32)
    if arr.size == 0:
        raise ValueError("the prompt is empty (no tokens)")
    return arr


def grammar_of(params: SamplingParams, tokenizer, cache: Dict[tuple, object]):
    """The compiled grammar of a request (grammar= GBNF / Grammar / LlamaGrammar, or json_schema=), or None.
    Compiled grammars are kept in cache (a few, by text) so that their per-state caches serve later requests."""
    if params.grammar is None and params.json_schema is None:
        return None
    from ubatch.grammar import Grammar, GrammarVocab
    from ubatch.grammar.schema import json_schema_to_gbnf
    if tokenizer is None or not hasattr(tokenizer, "token_to_piece"):
        raise ValueError("grammar / json_schema need the model's tokenizer")
    g = params.grammar
    root = "root"
    if g is None:
        text = json_schema_to_gbnf(params.json_schema)
    elif isinstance(g, Grammar):
        if g.vocab is not None and g.vocab.tokenizer is tokenizer:
            return g
        text, root = g.text, g.root
    elif isinstance(g, (str, bytes)):
        text = g.decode("utf-8") if isinstance(g, bytes) else g
    else:                                   # LlamaGrammar
        text, root = g._grammar, getattr(g, "_root", "root")
    key = (text, root)
    hit = cache.pop(key, None)
    if hit is None:
        hit = Grammar(text, GrammarVocab.of(tokenizer), root)
    cache[key] = hit
    while len(cache) > 16:
        cache.pop(next(iter(cache)))
    if hasattr(g, "trigger_words"):         # a LazyGrammar: free until its trigger (ubatch/grammar/lazy.py)
        return g.bind(hit)
    return hit


def start_grammar(params: SamplingParams, grammar):
    """The request's grammar start state (its completions clone it), grammar_prefix accepted; turns drafting
    off (drafts would be verified without the grammar)."""
    if hasattr(params, "speculative"):
        params.speculative = False
    state = grammar.state()
    if params.grammar_prefix:
        from ubatch.grammar import GrammarRejected
        try:
            state.accept_text(params.grammar_prefix)
        except GrammarRejected:
            raise ValueError("grammar_prefix: the grammar does not allow this text") from None
    return state


__all__ = ["PromptTooLongError", "grammar_of", "prompt_tokens", "resolve_tokenizer", "start_grammar"]
