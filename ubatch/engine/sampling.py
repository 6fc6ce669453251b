"""Sampling parameters and the vectorised sampler (csrc/engine/sampling.c).

The chain is llama.cpp's default one: logit bias -> penalties (repeat, frequency, presence) over the last
`repeat_last_n` tokens (prompt included) ->
top-k -> top-p -> min-p -> temperature -> a draw; temperature 0 is greedy (argmax of the penalised logits).
Every sequence has its own random stream: the draw for its t-th generated token is a pure function of
(seed, t) (a counter-based generator), so its tokens never depend on what else is sampled in the same call,
on the batch, or on a preemption that makes it recompute its KV cells. Completion j of a request with
seed s uses seed s + j, so `n = 4` with seed s gives the same completions as four runs with seeds s..s+3.

One C call samples every sequence of a decode step: for the top-k candidates it reads each logits row once
(AVX2 skips blocks of 8 logits below the k-th best so far), so 32 rows of 262,144 logits take a few
milliseconds (`ubatch bench generate` prints the time).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ubatch._ffi import ffi, lib


def _num(name: str, v, lo: float, hi: float = math.inf, *, lo_open: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number, got {type(v).__name__}")
    v = float(v)
    if not math.isfinite(v):        # NaN and both infinities (a repeat_penalty of inf would zero every logit)
        raise ValueError(f"{name} must be finite, got {v}")
    if v < lo or v > hi or (lo_open and v == lo):
        raise ValueError(f"{name} must be in {'(' if lo_open else '['}{lo}, {hi}], got {v}")
    return v


def _integer(name: str, v, lo: int, hi: int = 2**31 - 1) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ValueError(f"{name} must be an int, got {type(v).__name__}")
    v = int(v)
    if v < lo or v > hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {v}")
    return v


@dataclass
class SamplingParams:
    """How one request is completed (docs/engine.md). Validated by `validated()` (ValueError naming the
    field); top_k <= 0 keeps the whole vocabulary, top_p >= 1 and min_p <= 0 disable those cuts."""

    max_tokens: Optional[int] = 128         # None or <= 0: until the sequence's context is full
    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    seed: Optional[int] = None
    stop: Optional[List[str]] = None
    n: int = 1
    logprobs: Optional[int] = None          # top-N log-probabilities per token (0: only the chosen token's)
    repeat_last_n: int = 64                 # tokens the penalties look back over (llama.cpp's default; -1: all)
    ignore_eos: bool = False                # keep generating after an end-of-generation token
    frequency_penalty: float = 0.0          # minus count x this, for tokens in the penalty window
    presence_penalty: float = 0.0           # minus this, for tokens in the penalty window
    logit_bias: Optional[Dict[int, float]] = None   # token id -> added to its logit first (-inf bans it)
    grammar: Any = None                     # GBNF text, a ubatch.grammar.Grammar or a LlamaGrammar: constrains
    json_schema: Any = None                 # a JSON schema (dict or JSON text): converted to GBNF, constrains
    grammar_prefix: Optional[str] = None    # text the constrained output starts with, already in the prompt
    speculative: bool = True                # with an engine draft: False decodes this request without draft rows

    @property
    def penalised(self) -> bool:
        return self.repeat_penalty != 1.0 or self.frequency_penalty != 0.0 or self.presence_penalty != 0.0

    def validated(self, n_vocab: Optional[int] = None) -> "SamplingParams":
        """A copy with normalised fields; raises ValueError naming the first bad field."""
        p = replace(self)
        if p.max_tokens is not None:
            p.max_tokens = _integer("max_tokens", p.max_tokens, -(2**31))
            p.max_tokens = p.max_tokens if p.max_tokens > 0 else None
        p.temperature = _num("temperature", p.temperature, 0.0)
        p.top_k = _integer("top_k", p.top_k, -(2**31))
        p.top_p = _num("top_p", p.top_p, 0.0, 1.0)
        p.min_p = _num("min_p", p.min_p, 0.0, 1.0)
        p.repeat_penalty = _num("repeat_penalty", p.repeat_penalty, 0.0, lo_open=True)
        if p.seed is not None:
            p.seed = _integer("seed", p.seed, -(2**63), 2**64 - 1) % 2**64
        if p.stop is not None:
            if isinstance(p.stop, str):
                p.stop = [p.stop]
            if not isinstance(p.stop, (list, tuple)) or not all(isinstance(s, str) for s in p.stop):
                raise ValueError("stop must be a string or a list of strings")
            p.stop = [s for s in p.stop if s]
        p.n = _integer("n", p.n, 1, 256)
        if p.logprobs is not None:
            p.logprobs = _integer("logprobs", p.logprobs, 0, n_vocab if n_vocab else 2**31 - 1)
        p.repeat_last_n = _integer("repeat_last_n", p.repeat_last_n, -1)
        if not isinstance(p.ignore_eos, (bool, np.bool_)):
            raise ValueError(f"ignore_eos must be a bool, got {type(p.ignore_eos).__name__}")
        if not isinstance(p.speculative, (bool, np.bool_)):
            raise ValueError(f"speculative must be a bool, got {type(p.speculative).__name__}")
        p.frequency_penalty = _num("frequency_penalty", p.frequency_penalty, -math.inf)
        p.presence_penalty = _num("presence_penalty", p.presence_penalty, -math.inf)
        if p.logit_bias is not None:
            if not isinstance(p.logit_bias, dict):
                raise ValueError(f"logit_bias must be a dict of token id -> bias, got {type(p.logit_bias).__name__}")
            bias = {}
            for t, b in p.logit_bias.items():
                t = _integer("logit_bias token id", int(t) if isinstance(t, str) and t.lstrip("-").isdigit() else t,
                             0, (n_vocab - 1) if n_vocab else 2**31 - 1)
                if isinstance(b, bool) or not isinstance(b, (int, float, np.integer, np.floating)) or math.isnan(b) \
                        or b == math.inf:
                    raise ValueError(f"logit_bias[{t}] must be a finite number or -inf, got {b!r}")
                bias[t] = float(b)
            p.logit_bias = bias or None
        if p.grammar is not None and p.json_schema is not None:
            raise ValueError("grammar and json_schema are exclusive: give one")
        if p.grammar is not None and not (isinstance(p.grammar, (str, bytes)) or hasattr(p.grammar, "_grammar")
                                          or type(p.grammar).__name__ == "Grammar"):
            raise ValueError(f"grammar must be GBNF text, a ubatch.grammar.Grammar or a LlamaGrammar, got "
                             f"{type(p.grammar).__name__}")
        if p.grammar_prefix is not None and not isinstance(p.grammar_prefix, str):
            raise ValueError(f"grammar_prefix must be a str, got {type(p.grammar_prefix).__name__}")
        if p.json_schema is not None and not isinstance(p.json_schema, (dict, str, bool)):
            raise ValueError(f"json_schema must be a dict or JSON text, got {type(p.json_schema).__name__}")
        return p


def uniform(seed: int, counter: int) -> float:
    """The uniform number in [0, 1) the sampler draws for (seed, counter)."""
    return float(lib.ub_sample_uniform(int(seed) % 2**64, int(counter) % 2**64))


@dataclass
class SampleBatch:
    """The sampling requests of one decode step, as the parallel arrays the C sampler reads."""

    row: List[int] = field(default_factory=list)
    temperature: List[float] = field(default_factory=list)
    top_k: List[int] = field(default_factory=list)
    top_p: List[float] = field(default_factory=list)
    min_p: List[float] = field(default_factory=list)
    penalty: List[Tuple[float, float, float]] = field(default_factory=list)
    seed: List[int] = field(default_factory=list)
    counter: List[int] = field(default_factory=list)
    pen: List[np.ndarray] = field(default_factory=list)
    bias: List[Optional[Dict[int, float]]] = field(default_factory=list)

    def add(self, row: int, p: SamplingParams, seed: int, counter: int, history: Optional[np.ndarray]) -> None:
        """Request: sample from logits row `row` with (validated) params p; history: the tokens the penalties
        look at (the last repeat_last_n)."""
        self.row.append(row)
        self.temperature.append(p.temperature)
        self.top_k.append(p.top_k)
        self.top_p.append(p.top_p)
        self.min_p.append(p.min_p)
        self.penalty.append((p.repeat_penalty, p.frequency_penalty, p.presence_penalty))
        self.seed.append(seed)
        self.counter.append(counter)
        self.pen.append(history if history is not None and p.penalised else _EMPTY)
        self.bias.append(p.logit_bias)

    def __len__(self) -> int:
        return len(self.row)


_EMPTY = np.zeros(0, np.int32)


def sample(logits: np.ndarray, sb: SampleBatch, *, n_logprobs: int = -1, n_threads: Optional[int] = None
           ) -> Tuple[np.ndarray, Optional[np.ndarray], Optional[np.ndarray], Optional[np.ndarray]]:
    """Samples every request of sb in one C call. logits: float32[n_rows, n_vocab]. Returns (tokens int32[n],
    chosen-token logprob float32[n] | None, top ids int32[n, k] | None, top logprobs float32[n, k] | None), the
    logprobs being the log-softmax of the raw logits (n_logprobs >= 0 asks for them)."""
    logits = np.ascontiguousarray(logits, dtype=np.float32)
    if logits.ndim != 2:
        raise ValueError(f"logits must be float32[n_rows, n_vocab], got shape {logits.shape}")
    n_rows, n_vocab = logits.shape
    n = len(sb)
    row = np.asarray(sb.row, np.int32)
    if n and (row.min() < 0 or row.max() >= n_rows):
        raise ValueError(f"a sampling row is outside the {n_rows} logits rows")
    pen_len = np.fromiter((len(a) for a in sb.pen), np.int64, n)
    pen_off = np.zeros(n + 1, np.int64)
    np.cumsum(pen_len, out=pen_off[1:])
    pen_tok = np.concatenate(sb.pen).astype(np.int32, copy=False) if pen_off[-1] else _EMPTY
    if pen_tok.size and (pen_tok.min() < 0 or pen_tok.max() >= n_vocab):
        raise ValueError(f"a penalised token id is outside the vocabulary [0, {n_vocab})")
    temperature = np.asarray(sb.temperature, np.float32)
    top_k = np.asarray(sb.top_k, np.int32)
    top_p = np.asarray(sb.top_p, np.float32)
    min_p = np.asarray(sb.min_p, np.float32)
    penalty = np.asarray(sb.penalty, np.float32).reshape(n, 3)
    bias_off = bias_tok = bias_val = None
    if any(sb.bias):
        cnt = np.fromiter((len(b) if b else 0 for b in sb.bias), np.int64, n)
        bias_off = np.zeros(n + 1, np.int64)
        np.cumsum(cnt, out=bias_off[1:])
        bias_tok = np.fromiter((t for b in sb.bias if b for t in b), np.int32, int(bias_off[-1]))
        bias_val = np.fromiter((v for b in sb.bias if b for v in b.values()), np.float32, int(bias_off[-1]))
        if bias_tok.min() < 0 or bias_tok.max() >= n_vocab:
            raise ValueError(f"a logit_bias token id is outside the vocabulary [0, {n_vocab})")
    seed = np.asarray(sb.seed, np.uint64)
    counter = np.asarray(sb.counter, np.uint64)
    out = np.zeros(n, np.int32)
    nl = int(n_logprobs)
    lp = np.zeros(n, np.float32) if nl >= 0 else None
    top_id = np.zeros((n, max(nl, 0)), np.int32) if nl >= 0 else None
    top_lp = np.zeros((n, max(nl, 0)), np.float32) if nl >= 0 else None
    if n_threads is None:
        import os
        n_threads = os.cpu_count() or 1

    def p(a, t):
        return ffi.from_buffer(t, a) if a is not None and a.size else ffi.NULL

    rc = lib.ub_sample(p(logits, "float[]"), n_rows, n_vocab, n, p(row, "int32_t[]"), p(temperature, "float[]"),
                       p(top_k, "int32_t[]"), p(top_p, "float[]"), p(min_p, "float[]"), p(penalty, "float[]"),
                       p(pen_off, "int64_t[]"), p(pen_tok, "int32_t[]"), p(bias_off, "int64_t[]"),
                       p(bias_tok, "int32_t[]"), p(bias_val, "float[]"), p(seed, "uint64_t[]"),
                       p(counter, "uint64_t[]"), nl, p(out, "int32_t[]"), p(lp, "float[]"), p(top_id, "int32_t[]"),
                       p(top_lp, "float[]"), int(n_threads))
    if rc == lib.UB_E_NOMEM:
        raise MemoryError("sampling: out of memory")
    if rc != lib.UB_OK:
        raise ValueError("sampling: invalid arguments (a NaN temperature or a penalty <= 0?)")
    return out, lp, top_id, top_lp


__all__ = ["SampleBatch", "SamplingParams", "sample", "uniform"]
