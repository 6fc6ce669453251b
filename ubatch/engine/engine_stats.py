"""What the generation engine counts while it runs (`LLMEngine.stats()`, the `ubatch run` report and timeline)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

import numpy as np


@dataclass
class UbatchRecord:
    """One computed ubatch, for the report and the timeline."""

    call: int                              # decode call index
    t: float                               # seconds since the start of the run (end of its decode call)
    n_tokens: int
    shape: Tuple[int, int]                 # (n_seqs, n_seq_tokens)
    seq_tokens: Dict[int, Tuple[int, int]]  # seq id -> (prompt tokens, decode tokens)


def ubatch_records(ubs, seq: np.ndarray, prompt: np.ndarray, call: int, t: float) -> List[UbatchRecord]:
    """One UbatchRecord per ubatch of a decode call; seq[i] / prompt[i]: the sequence of batch row i and
    whether it was a prompt token (vectorised per ubatch: one bincount each)."""
    out = []
    for ub in ubs:
        rows = np.asarray(ub.batch_idxs)
        s = seq[rows]
        n_all = np.bincount(s)
        n_p = np.bincount(s, weights=prompt[rows], minlength=len(n_all)).astype(np.int64)
        ids = np.flatnonzero(n_all)
        out.append(UbatchRecord(call, t, int(ub.n_tokens), (int(ub.n_seqs), int(ub.n_seq_tokens)),
                                dict(zip(ids.tolist(), zip(n_p[ids].tolist(), (n_all[ids] - n_p[ids]).tolist())))))
    return out


@dataclass
class RunStats:
    """Everything `ubatch run` reports."""

    n_ubatch: int
    n_stream: int
    kv_size: int
    requests: int = 0
    finished: int = 0
    evicted: int = 0
    rejected: int = 0
    prompt_tokens: int = 0          # prompt tokens decoded
    decode_tokens: int = 0          # sampled tokens fed back and decoded
    generated_tokens: int = 0       # tokens sampled
    wall_s: float = 0.0
    decode_s: float = 0.0           # time inside Context.decode (successful and failed calls)
    steps: int = 0
    decode_calls: int = 0
    failed_calls: int = 0
    retries: int = 0                # n_batch halvings after KVCacheFullError
    errors: int = 0                 # other decode failures (their requests evicted)
    ubatches: List[UbatchRecord] = field(default_factory=list)
    kv_used: List[Tuple[float, List[int]]] = field(default_factory=list)   # after each successful call
    peak_kv_cells: List[int] = field(default_factory=list)
    events: List[Tuple[int, str, str]] = field(default_factory=list)        # (ubatch index, kind, message)

    @property
    def fills(self) -> np.ndarray:
        return np.array([u.n_tokens / self.n_ubatch for u in self.ubatches], np.float64)

    @property
    def shapes(self) -> Dict[str, int]:
        c = Counter(f"{u.shape[0]}x{u.shape[1]}" for u in self.ubatches)
        return dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))

    def to_dict(self) -> dict:
        wall = max(self.wall_s, 1e-12)
        f = self.fills
        return {
            "requests": self.requests, "finished": self.finished, "evicted": self.evicted, "rejected": self.rejected,
            "prompt_tokens": self.prompt_tokens, "generated_tokens": self.generated_tokens,
            "decoded_tokens": self.prompt_tokens + self.decode_tokens,
            "wall_s": round(self.wall_s, 6), "decode_s": round(self.decode_s, 6),
            "tokens_per_s": {"prompt": self.prompt_tokens / wall, "generation": self.generated_tokens / wall,
                             "total": (self.prompt_tokens + self.decode_tokens) / wall},
            "steps": self.steps, "decode_calls": self.decode_calls, "failed_decode_calls": self.failed_calls,
            "ubatches": len(self.ubatches), "n_ubatch": self.n_ubatch,
            "mean_fill": float(f.mean()) if f.size else 0.0, "worst_fill": float(f.min()) if f.size else 0.0,
            "shapes": self.shapes, "n_stream": self.n_stream, "kv_cells_per_stream": self.kv_size,
            "peak_kv_cells": list(self.peak_kv_cells), "retries": self.retries, "errors": self.errors,
            "messages": [m for _, _, m in self.events if m],
        }


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

    def event(self, kind: str, message: str = "") -> None:
        """Records an event (retry, preemption) at the current ubatch count."""
        self.events.append((self.n_ubatches, kind, message))

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


__all__ = ["EngineStats", "RequestTimes", "RunStats", "UbatchRecord", "ubatch_records"]
