"""Requests of the token-level continuous batcher (`ubatch.engine.batcher`): a prompt of token ids and a generation length,
and the seeded request streams the decode benchmarks use."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import numpy as np

WAITING, PROMPT, GENERATING, FINISHED, EVICTED, REJECTED = "waiting", "prompt", "generating", "finished", \
    "evicted", "rejected"


@dataclass
class Request:
    """One generation request: a prompt (token ids) and the number of tokens to generate."""

    rid: int
    prompt: np.ndarray
    max_new: int
    status: str = WAITING
    seq_id: int = -1
    n_past: int = 0                     # tokens of this request put in a batch so far (= next position)
    pending: Optional[int] = None       # sampled token not yet decoded
    generated: List[int] = field(default_factory=list)
    finish_reason: str = ""             # "length", "context", "evicted", "rejected"
    message: str = ""

    @property
    def done(self) -> bool:
        return self.status in (FINISHED, EVICTED, REJECTED)


def parse_range(text: str, name: str = "range") -> Tuple[int, int]:
    """'8-48' -> (8, 48); '16' -> (16, 16)."""
    parts = str(text).replace(":", "-").split("-")
    try:
        lo, hi = (int(parts[0]), int(parts[-1])) if len(parts) in (1, 2) else (None, None)
    except ValueError:
        lo = hi = None
    if lo is None or lo < 1 or hi < lo:
        raise ValueError(f"{name} must be N or LO-HI with 1 <= LO <= HI, got {text!r}")
    return lo, hi


def make_requests(n: int, *, prompt_len: Tuple[int, int], gen_len: Tuple[int, int], n_vocab: int,
                  seed: int = 0) -> List[Request]:
    """n requests with prompt / generation lengths uniform in the inclusive ranges and uniform random prompt
    tokens in [0, n_vocab), all from one seeded generator."""
    if n < 0:
        raise ValueError(f"the number of requests must be >= 0, got {n}")
    rng = np.random.default_rng(seed)
    reqs = []
    for i in range(n):
        lp = int(rng.integers(prompt_len[0], prompt_len[1] + 1))
        lg = int(rng.integers(gen_len[0], gen_len[1] + 1))
        reqs.append(Request(i, rng.integers(0, n_vocab, lp).astype(np.int32), lg))
    return reqs


__all__ = ["EVICTED", "FINISHED", "GENERATING", "PROMPT", "REJECTED", "WAITING", "Request", "make_requests",
           "parse_range"]
