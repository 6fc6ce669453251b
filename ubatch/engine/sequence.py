"""The engine's bookkeeping objects: a request (a prompt and its sampling parameters), its completions (one KV
sequence each while running) and what a step reports back (RequestOutput / CompletionOutput)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Protocol

import numpy as np

from ubatch.engine.detok import TextState
from ubatch.engine.engine_stats import RequestTimes
from ubatch.engine.sampling import SamplingParams

WAITING, PROMPT, FORK, GEN, DONE = "waiting", "prompt", "fork", "generating", "done"


class _Lazy:
    """A snapshot field not built yet: f(*args) builds it on first read (the engine hands out a full snapshot of
    every touched request each step; building the copies only when a caller reads them keeps a step's status
    update O(new tokens)). f must give the same value whenever it is called: its sources only grow."""

    __slots__ = ("f", "args")

    def __init__(self, f, *args) -> None:
        self.f, self.args = f, args


_NO_DEFAULT = object()


class _Snapshot:
    """Data descriptor of a dataclass field that may hold a _Lazy: reading it builds and keeps the value; on the
    class it reads as the field's default, as a plain dataclass field does."""

    def __init__(self, default) -> None:
        self.default = default

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            if self.default is _NO_DEFAULT:           # a default_factory field has no class attribute
                raise AttributeError(f"type object {owner.__name__!r} has no attribute {self.name!r}")
            return self.default
        d = obj.__dict__
        v = d[self.name]
        if type(v) is _Lazy:
            v = d[self.name] = v.f(*v.args)
        return v

    def __set__(self, obj, value) -> None:
        obj.__dict__[self.name] = value


def _lazy_fields(cls, **defaults):
    """Puts a _Snapshot over each named field of dataclass cls (after @dataclass made __init__ / __eq__ / __repr__,
    which go through attribute access, so they see built values), and a __getstate__ that builds them (copy,
    pickle)."""
    for name, default in defaults.items():
        d = _Snapshot(default)
        d.__set_name__(cls, name)
        setattr(cls, name, d)

    def __getstate__(self):
        for name in defaults:
            getattr(self, name)
        return self.__dict__
    cls.__getstate__ = __getstate__
    return cls


def _head(xs: list, n: int) -> list:
    return xs[:n]


@dataclass
class CompletionOutput:
    """One completion of a request, as of the last step that advanced it. token_ids never hold the
    end-of-generation token; text never holds a stop string. logprobs_delta (when the request asked for
    logprobs): per new token a dict {"token_id", "logprob", "top_logprobs": [(token_id, logprob), ...]} with
    the log-softmax of the raw logits."""

    index: int
    text: str = ""
    token_ids: List[int] = field(default_factory=list)
    text_delta: str = ""
    token_ids_delta: List[int] = field(default_factory=list)
    finish_reason: Optional[str] = None
    logprobs_delta: Optional[list] = None


@dataclass
class RequestOutput:
    """What a step did to one request."""

    request_id: str
    prompt_tokens: int
    finished: bool
    outputs: List[CompletionOutput]
    prompt_token_ids: List[int] = field(default_factory=list)


_lazy_fields(CompletionOutput, text="", token_ids=_NO_DEFAULT)
_lazy_fields(RequestOutput, prompt_token_ids=_NO_DEFAULT)


class Driver(Protocol):
    """Takes over sampling and stopping for the completions of one request (LLMEngine.add_request(driver=)): the
    engine still admits, batches, decodes, forks n > 1, preempts and caches prefixes, and ends a completion at its
    context ("length"); the driver picks each token and says when a completion ends. logits: float32[n_vocab], the
    row the token is sampled from (valid only during the call). Used by ubatch.llama_cpp's batched paths
    (llama.cpp sampler chains, logits processors, stopping criteria, llama-cpp-python's stop rules)."""

    def sample(self, index: int, logits: np.ndarray) -> int:
        """The next token of completion `index`."""

    def on_token(self, index: int, token: int, logits: np.ndarray) -> Optional[str]:
        """After sample: None to go on (the token is decoded next), or the finish reason (the completion ends;
        the token is not decoded)."""

    def on_finish(self, index: int, reason: str) -> None:
        """Completion `index` ended (the reason on_token gave, or the engine's: "length", "abort")."""


class Seq:
    """One completion: while running, one KV sequence. Its tokens are prompt + generated; the KV holds the
    first n_past of them; a generating sequence has exactly one token (the last sampled) left to place."""

    __slots__ = ("req", "index", "seed", "seq_id", "n_past", "generated", "text", "finish_reason", "state", "stamp",
                 "d_text", "d_tok", "d_lp", "gstate", "spec")

    def __init__(self, req: "Request", index: int, seed: int) -> None:
        self.req = req
        self.index = index
        self.seed = seed
        self.seq_id = -1
        self.n_past = 0
        self.generated: List[int] = []
        self.text = TextState(req.params.stop)
        self.finish_reason: Optional[str] = None
        self.state = WAITING
        self.stamp = 0
        self.d_text = ""
        self.d_tok: List[int] = []
        self.d_lp: Optional[list] = [] if req.params.logprobs is not None else None
        self.gstate = req.grammar.clone() if req.grammar is not None else None   # its own grammar position
        self.spec = None                  # speculative decoding state (spec_engine.SeqSpec)

    @property
    def n_tokens(self) -> int:
        return len(self.req.prompt) + len(self.generated)

    def tokens(self, a: int, b: int) -> np.ndarray:
        """int32 tokens [a, b) of prompt + generated."""
        p = self.req.prompt
        P = len(p)
        if b <= P:
            return p[a:b]
        gen = np.asarray(self.generated[max(a - P, 0):b - P], np.int32)
        return gen if a >= P else np.concatenate([p[a:], gen])

    def history(self, last_n: int) -> np.ndarray:
        """The last last_n tokens (prompt included) the repeat penalty looks at (-1: all)."""
        n = self.n_tokens
        return self.tokens(0 if last_n < 0 else max(0, n - last_n), n)


class Request:
    """A queued or running request: its prompt (int32 token ids), parameters, completions and timings."""

    __slots__ = ("rid", "prompt", "params", "seqs", "times", "aborted", "grammar", "driver")

    def __init__(self, rid: str, prompt: np.ndarray, params: SamplingParams, times: RequestTimes,
                 grammar=None, driver=None) -> None:
        self.grammar = grammar
        self.driver = driver
        self.rid = rid
        self.prompt = prompt
        self.params = params
        self.seqs: List[Seq] = []
        self.times = times
        self.aborted = False

    @property
    def finished(self) -> bool:
        return all(s.state == DONE for s in self.seqs)

    def output(self) -> RequestOutput:
        """What changed since the last output (the deltas are handed out once)."""
        outs = []
        for s in self.seqs:
            ts = s.text
            outs.append(CompletionOutput(s.index, _Lazy(ts.emitted_text, ts.emitted),
                                         _Lazy(_head, s.generated, len(s.generated)), s.d_text, s.d_tok,
                                         s.finish_reason, s.d_lp))
            s.d_text, s.d_tok = "", []
            if s.d_lp is not None:
                s.d_lp = []
        return RequestOutput(self.rid, len(self.prompt), self.finished, outs, _Lazy(self.prompt.tolist))

__all__ = ["CompletionOutput", "DONE", "Driver", "FORK", "GEN", "PROMPT", "Request", "RequestOutput", "Seq", "WAITING"]
