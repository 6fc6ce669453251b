"""What the generation engine counts while it runs (`LLMEngine.stats()`, the `ubatch run` report and timeline)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List

import numpy as np

from ubatch.engine.batcher import RunStats


@dataclass
class RequestTimes:
    """perf_counter() times of one request: added, first token sampled, finished (0.0 until then); and, for the
    timeline, the number of ubatches computed before it was first admitted, before its first token and before it
    finished (-1 until then), and the sequence id it first ran in."""

    added: float = 0.0
    first_token: float = 0.0
    finished: float = 0.0
    ub_admitted: int = -1
    ub_first: int = -1
    ub_finished: int = -1
    seq_id: int = -1


@dataclass
class EngineStats(RunStats):
    """RunStats (counters, and per-ubatch records / KV occupancy when `timeline` is on) plus what only the
    text engine does: preemptions (a sequence whose KV cells are given back when the cache is full even for one
    token; it recomputes them later, bitwise identical) and the time spent sampling."""

    timeline: bool = False
    preemptions: int = 0
    sample_s: float = 0.0
    times: List[RequestTimes] = field(default_factory=list)
    n_ubatches: int = 0
    ub_tokens: int = 0                    # tokens over all ubatches (for the mean fill)
    worst_ub: int = 0                     # tokens of the emptiest ubatch
    shape_counts: Dict[str, int] = field(default_factory=Counter)

    def count_ubatches(self, ubs) -> None:
        """Counts the ubatches of one successful decode (always on, a few integers per ubatch)."""
        for ub in ubs:
            n = int(ub.n_tokens)
            self.worst_ub = n if not self.n_ubatches else min(self.worst_ub, n)
            self.n_ubatches += 1
            self.ub_tokens += n
            self.shape_counts[f"{int(ub.n_seqs)}x{int(ub.n_seq_tokens)}"] += 1

    @property
    def shapes(self) -> Dict[str, int]:
        return dict(sorted(self.shape_counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def latency_summary(self) -> dict:
        """p50 / p95 of time to first token and of the whole request, in seconds, over finished requests."""
        done = [t for t in self.times if t.finished]
        out = {}
        for name, vals in (("ttft_s", [t.first_token - t.added for t in done if t.first_token]),
                           ("latency_s", [t.finished - t.added for t in done])):
            a = np.array(vals, np.float64)
            out[name] = {"p50": float(np.percentile(a, 50)) if a.size else 0.0,
                         "p95": float(np.percentile(a, 95)) if a.size else 0.0,
                         "mean": float(a.mean()) if a.size else 0.0}
        return out

    def to_dict(self) -> dict:
        d = super().to_dict()
        nu = max(self.n_ubatches, 1)
        d.update(ubatches=self.n_ubatches, mean_fill=self.ub_tokens / (nu * self.n_ubatch) if self.n_ubatches else 0.0,
                 worst_fill=self.worst_ub / self.n_ubatch if self.n_ubatches else 0.0)
        d.update(preemptions=self.preemptions, sample_s=round(self.sample_s, 6))
        d.update(self.latency_summary())
        return d


__all__ = ["EngineStats", "RequestTimes"]
