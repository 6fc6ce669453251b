"""Server metrics in the Prometheus text format (exposition format 0.0.4), without a client library.

Counters and the histogram are updated from the event loop (requests) and the engine thread (steps); a
lock keeps each update whole. Gauges (queue depth, active sequences, KV cells used) are read from the
engine thread's last published stats when /metrics is scraped."""
from __future__ import annotations

import bisect
import threading
from collections import defaultdict
from typing import Dict, List, Sequence, Tuple

STEP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Histogram:
    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(buckets)
        self.counts = [0] * (len(self.buckets) + 1)   # last: +Inf
        self.sum = 0.0
        self.n = 0

    def observe(self, v: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, v)] += 1
        self.sum += v
        self.n += 1

    def lines(self, name: str) -> List[str]:
        out, acc = [], 0
        for b, c in zip(self.buckets, self.counts):
            acc += c
            out.append(f'{name}_bucket{{le="{b:g}"}} {acc}')
        out.append(f'{name}_bucket{{le="+Inf"}} {self.n}')
        out.append(f"{name}_sum {self.sum:.9g}")
        out.append(f"{name}_count {self.n}")
        return out


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Dict[Tuple[str, int], int] = defaultdict(int)   # (endpoint, status) -> count
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.steps = 0
        self.step_failures = 0
        self.cancelled = 0
        self.max_step_sequences = 0
        self.step_seconds = Histogram(STEP_BUCKETS)
        self.step_sequences = Histogram(BATCH_BUCKETS)

    def request_done(self, endpoint: str, status: int) -> None:
        with self._lock:
            self.requests[(endpoint, int(status))] += 1

    def tokens(self, prompt: int = 0, generated: int = 0) -> None:
        with self._lock:
            self.prompt_tokens += prompt
            self.generation_tokens += generated

    def step(self, seconds: float, sequences: int) -> None:
        with self._lock:
            self.steps += 1
            self.step_seconds.observe(seconds)
            self.step_sequences.observe(sequences)
            self.max_step_sequences = max(self.max_step_sequences, sequences)

    def event(self, what: str) -> None:
        with self._lock:
            setattr(self, what, getattr(self, what) + 1)

    def render(self, gauges: Dict[str, float]) -> str:
        L: List[str] = []

        def head(name: str, kind: str, help_: str) -> None:
            L.append(f"# HELP {name} {help_}")
            L.append(f"# TYPE {name} {kind}")

        with self._lock:
            head("ubatch_requests_total", "counter", "HTTP requests answered, by endpoint and status code")
            for (ep, st), c in sorted(self.requests.items()):
                L.append(f'ubatch_requests_total{{endpoint="{ep}",status="{st}"}} {c}')
            head("ubatch_prompt_tokens_total", "counter", "prompt tokens of accepted generation requests")
            L.append(f"ubatch_prompt_tokens_total {self.prompt_tokens}")
            head("ubatch_generation_tokens_total", "counter", "tokens generated")
            L.append(f"ubatch_generation_tokens_total {self.generation_tokens}")
            head("ubatch_steps_total", "counter", "engine steps (one decode each)")
            L.append(f"ubatch_steps_total {self.steps}")
            head("ubatch_step_failures_total", "counter", "engine steps that raised (their requests failed)")
            L.append(f"ubatch_step_failures_total {self.step_failures}")
            head("ubatch_cancelled_total", "counter", "requests cancelled because the client went away")
            L.append(f"ubatch_cancelled_total {self.cancelled}")
            head("ubatch_step_max_sequences", "gauge", "most sequences decoded together in one step so far")
            L.append(f"ubatch_step_max_sequences {self.max_step_sequences}")
            head("ubatch_step_seconds", "histogram", "wall time of one engine step")
            L.extend(self.step_seconds.lines("ubatch_step_seconds"))
            head("ubatch_step_sequences", "histogram", "sequences progressed by one engine step")
            L.extend(self.step_sequences.lines("ubatch_step_sequences"))
        for name, (help_, value) in sorted(gauges.items()):
            head(name, "gauge", help_)
            L.append(f"{name} {value:g}")
        return "\n".join(L) + "\n"


def parse_text(text: str) -> Dict[str, float]:
    """The samples of a Prometheus text page as {'name{labels}': value} (for tests and the benchmark)."""
    out: Dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, val = line.rpartition(" ")
            out[key] = float(val)
    return out
