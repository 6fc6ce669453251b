"""The sweep: every workload x n_ubatch x strategy is planned once for its metrics (untimed), then
re-planned `reps` times for the planning time. A plan = init + split_reset + the whole split loop."""
from __future__ import annotations

import math
import statistics
import time
from collections import Counter
from typing import Callable, Dict, Iterable, List, Optional

from ubatch.batch.allocator import BatchAllocator
from ubatch.bench.families import Workload
from ubatch.bench.strategies import Strategy
from ubatch.common.errors import UbatchError

# what every row field means (copied into the JSON output and printed under the table)
DEFINITIONS: Dict[str, str] = {
    "plan_us": "median µs of one plan = BatchAllocator.init + split_reset + split loop until None, from Python",
    "plan_us_p90": "90th percentile of the same samples",
    "n_ubatches": "ubatches the strategy cut the batch into",
    "simple_ubatches": "ceil(n_tokens / n_ubatch): split_simple's count, the fewest ubatches possible",
    "extra_ubatches": "n_ubatches - simple_ubatches: ubatches (graph launches) paid beyond the simple split",
    "mean_fill": "mean over ubatches of n_tokens_u / n_ubatch (1.0 = every ubatch full; > 1 only with the "
                 "llama.cpp-exact n_ubatch + 1 overflow)",
    "min_fill": "smallest n_tokens_u / n_ubatch",
    "max_tokens": "largest ubatch (n_ubatch + 1 marks llama.cpp's overflow)",
    "overflow_ubatches": "ubatches with more than n_ubatch tokens",
    "empty_slots": "sum over ubatches of max(0, n_ubatch - n_tokens_u): token slots left empty when every "
                   "ubatch runs in a graph sized for n_ubatch tokens (as llama.cpp reserves its graphs)",
    "waste_pct": "100 * empty_slots / (n_ubatches * n_ubatch)",
    "excess_waste_pct": "the waste the strategy adds over split_simple on the same batch and n_ubatch: "
                        "100 * (empty_slots - simple_empty_slots) / (n_ubatches * n_ubatch), where "
                        "simple_empty_slots = simple_ubatches * n_ubatch - n_tokens (slots any split must leave "
                        "empty). 0 = no worse than simple; negative only when llama.cpp's n_ubatch + 1 overflow "
                        "saves a ubatch",
    "shapes": "distinct ubatch shapes 'n_seqs x n_seq_tokens' with their counts (split_simple's ubatches "
              "are n_tokens x 1 by llama.cpp's convention)",
    "n_shapes": "number of distinct shapes",
    "error": "the strategy cannot plan this batch (e.g. sequential split_equal with coupled sequences)",
}


def plan_count(alloc: BatchAllocator, w: Workload, split, n_ubatch: int) -> int:
    alloc.init(w.batch, n_seq_max=w.n_seq_max, n_vocab=w.n_vocab, output_all=w.output_all)
    alloc.split_reset()
    count = 0
    while split(alloc, n_ubatch) is not None:
        count += 1
    return count


def plan_metrics(alloc: BatchAllocator, w: Workload, split, n_ubatch: int) -> Dict[str, object]:
    alloc.init(w.batch, n_seq_max=w.n_seq_max, n_vocab=w.n_vocab, output_all=w.output_all)
    alloc.split_reset()
    sizes: List[int] = []
    shapes: Counter = Counter()
    while True:
        ub = split(alloc, n_ubatch)
        if ub is None:
            break
        sizes.append(ub.n_tokens)
        shapes[f"{ub.n_seqs}x{ub.n_seq_tokens}"] += 1
    if alloc.n_used != w.n_tokens:
        raise UbatchError(f"the split placed {alloc.n_used} of {w.n_tokens} tokens")
    n_ub = len(sizes)
    simple = math.ceil(w.n_tokens / n_ubatch)
    empty = sum(max(0, n_ubatch - s) for s in sizes)
    return {
        "n_ubatches": n_ub,
        "simple_ubatches": simple,
        "extra_ubatches": n_ub - simple,
        "mean_fill": round(sum(sizes) / (n_ub * n_ubatch), 4),
        "min_fill": round(min(sizes) / n_ubatch, 4),
        "max_tokens": max(sizes),
        "overflow_ubatches": sum(1 for s in sizes if s > n_ubatch),
        "empty_slots": empty,
        "waste_pct": round(100.0 * empty / (n_ub * n_ubatch), 2),
        "excess_waste_pct": round(100.0 * (empty - (simple * n_ubatch - w.n_tokens)) / (n_ub * n_ubatch), 2),
        "shapes": dict(shapes.most_common()),
        "n_shapes": len(shapes),
    }


def time_plan(alloc: BatchAllocator, w: Workload, split, n_ubatch: int, reps: int, warmup: int) -> Dict[str, float]:
    for _ in range(warmup):
        plan_count(alloc, w, split, n_ubatch)
    samples = []
    clock = time.perf_counter_ns
    for _ in range(reps):
        t0 = clock()
        plan_count(alloc, w, split, n_ubatch)
        samples.append((clock() - t0) / 1e3)
    samples.sort()
    return {"plan_us": round(statistics.median(samples), 2),
            "plan_us_p90": round(samples[min(len(samples) - 1, int(0.9 * len(samples)))], 2)}


def measure(w: Workload, strategy: Strategy, n_ubatch: int, reps: int, warmup: int) -> Dict[str, object]:
    """One cell of the sweep: metrics and planning time, or an `error` when the strategy refuses the batch."""
    row: Dict[str, object] = {"family": w.family, "n_ubatch": n_ubatch, "strategy": strategy.name,
                              "n_tokens": w.n_tokens}
    alloc = BatchAllocator(n_pos_per_embd=w.n_pos_per_embd)
    try:
        row.update(plan_metrics(alloc, w, strategy.split, n_ubatch))
    except UbatchError as e:
        row["error"] = f"{type(e).__name__}: {e}"
        return row
    row.update(time_plan(alloc, w, strategy.split, n_ubatch, reps, warmup))
    return row


def run(workloads: List[Workload], strategies: List[Strategy], n_ubatches: Iterable[int], *, reps: int,
        warmup: int = 3, progress: Optional[Callable] = None) -> List[Dict[str, object]]:
    """Every cell, in (family, n_ubatch, strategy) order. `progress(iterable, total)` wraps the cell loop
    (a tqdm bar in the CLI)."""
    cells = [(w, n, s) for w in workloads for n in n_ubatches for s in strategies]
    it = cells if progress is None else progress(cells, len(cells))
    return [measure(w, s, n, reps, warmup) for w, n, s in it]
