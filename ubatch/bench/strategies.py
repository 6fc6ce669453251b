"""The split strategies the suite compares: one callable per strategy, `split(alloc, n_ubatch)` -> UBatch|None."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

from ubatch.batch.allocator import BatchAllocator
from ubatch.batch.ubatch_view import UBatch


@dataclass(frozen=True)
class Strategy:
    name: str
    desc: str
    split: Callable[[BatchAllocator, int], Optional[UBatch]]


STRATEGIES: Dict[str, Strategy] = {s.name: s for s in [
    Strategy("simple", "split_simple: the next n_ubatch rows in batch order",
             lambda a, n: a.split_simple(n)),
    Strategy("equal", "split_equal(sequential=False, strict=True): disjoint seq sets in lockstep, <= n_ubatch",
             lambda a, n: a.split_equal(n, sequential=False, strict=True)),
    Strategy("equal-seq", "split_equal(sequential=True, strict=True): consecutive seq ids only",
             lambda a, n: a.split_equal(n, sequential=True, strict=True)),
    Strategy("equal-llama", "split_equal(sequential=False, strict=False): llama.cpp-exact (n_ubatch + 1 overflow)",
             lambda a, n: a.split_equal(n, sequential=False, strict=False)),
    Strategy("equal-seq-llama", "split_equal(sequential=True, strict=False): llama.cpp-exact, consecutive ids",
             lambda a, n: a.split_equal(n, sequential=True, strict=False)),
    Strategy("seq", "split_seq: one sequence set per ubatch (shared prefixes first)",
             lambda a, n: a.split_seq(n)),
]}


def select(names: Optional[List[str]]) -> List[Strategy]:
    if not names:
        return list(STRATEGIES.values())
    bad = [n for n in names if n not in STRATEGIES]
    if bad:
        raise ValueError(f"unknown strategy {bad[0]!r}; choose from {', '.join(STRATEGIES)}")
    return [STRATEGIES[n] for n in names]
