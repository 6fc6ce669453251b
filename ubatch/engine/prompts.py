"""The prompt set shipped with the package (data/prompts.jsonl) and the seeded request streams `ubatch run` and
`ubatch bench generate` make from it."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import List, Optional, Tuple, Union

import numpy as np

PROMPTS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "prompts.jsonl")


def load_prompts(path: str = PROMPTS_PATH) -> List[dict]:
    """The prompt records ({"id", "kind", "prompt"}), in file order."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@dataclass
class WorkItem:
    """One request of a workload: the prompt (text, or token ids for a synthetic workload), its max_tokens and
    where it came from (the prompt set's id, -1 for a synthetic prompt)."""

    prompt: Union[str, List[int]]
    max_tokens: int
    prompt_id: int = -1


def parse_range(text: str, name: str = "range") -> Tuple[int, int]:
    """'8-48' -> (8, 48); '16' -> (16, 16) (the --prompt-len / --gen-len ranges)."""
    parts = str(text).replace(":", "-").split("-")
    try:
        lo, hi = (int(parts[0]), int(parts[-1])) if len(parts) in (1, 2) else (None, None)
    except ValueError:
        lo = hi = None
    if lo is None or lo < 1 or hi < lo:
        raise ValueError(f"{name} must be N or LO-HI with 1 <= LO <= HI, got {text!r}")
    return lo, hi


def make_workload(n: int, *, seed: int = 0, gen_len: Tuple[int, int] = (16, 48),
                  prompt_len: Optional[Tuple[int, int]] = None, n_vocab: int = 256) -> List[WorkItem]:
    """n requests from one seeded generator: prompts drawn from the shipped set (a seeded permutation, repeated
    when n is larger than the set) or, with prompt_len, uniform random token ids of a length uniform in
    prompt_len; max_tokens uniform in gen_len (inclusive)."""
    if n < 0:
        raise ValueError(f"the number of requests must be >= 0, got {n}")
    rng = np.random.default_rng(seed)
    items: List[WorkItem] = []
    recs = load_prompts() if prompt_len is None else []
    order: List[int] = []
    for _ in range(n):
        g = int(rng.integers(gen_len[0], gen_len[1] + 1))
        if prompt_len is not None:
            lp = int(rng.integers(prompt_len[0], prompt_len[1] + 1))
            items.append(WorkItem(rng.integers(0, n_vocab, lp).astype(np.int32).tolist(), g))
            continue
        if not order:
            order = rng.permutation(len(recs)).tolist()
        r = recs[order.pop(0)]
        items.append(WorkItem(r["prompt"], g, int(r["id"])))
    return items


__all__ = ["PROMPTS_PATH", "WorkItem", "load_prompts", "make_workload", "parse_range"]
