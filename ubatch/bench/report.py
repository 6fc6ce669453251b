"""The suite's outputs: a terminal table, a JSON document, a short per-family summary."""
from __future__ import annotations

import json
import os
import platform
from typing import Dict, List

from ubatch.bench.families import Workload
from ubatch.bench.strategies import Strategy
from ubatch.bench.sweep import DEFINITIONS

_COLS = [("strategy", "strategy", 15, "s"), ("n_ubatch", "n_ubatch", 8, "d"), ("plan_us", "plan µs", 9, ".1f"),
         ("n_ubatches", "ubatches", 8, "d"), ("extra_ubatches", "extra", 5, "d"), ("mean_fill", "fill", 6, ".3f"),
         ("max_tokens", "max", 5, "d"), ("waste_pct", "waste%", 6, ".1f"),
         ("excess_waste_pct", "excess%", 7, ".1f"), ("n_shapes", "#shp", 4, "d")]


def _shape_text(shapes: Dict[str, int], limit: int = 3) -> str:
    items = [f"{k}" + (f"·{v}" if v > 1 else "") for k, v in list(shapes.items())[:limit]]
    more = len(shapes) - limit
    return " ".join(items) + (f" +{more}" if more > 0 else "")


def table(rows: List[Dict[str, object]], workloads: List[Workload]) -> str:
    """One block per family: a header naming the batch, then a row per (n_ubatch, strategy)."""
    by_family = {w.family: w for w in workloads}
    head = " ".join(f"{t:>{w}}" if f != "s" else f"{t:<{w}}" for _, t, w, f in _COLS) + "  shapes (n_seqs x n_seq_tokens, ·count)"
    out: List[str] = []
    for fam in dict.fromkeys(r["family"] for r in rows):
        w = by_family.get(fam)
        out.append("")
        out.append(f"== {fam}: {w.desc if w else ''} ({w.n_tokens if w else '?'} tokens)")
        out.append(head)
        out.append("-" * len(head))
        last_n = None
        for r in (r for r in rows if r["family"] == fam):
            if last_n is not None and r["n_ubatch"] != last_n:
                out.append("")
            last_n = r["n_ubatch"]
            if "error" in r:
                out.append(f"{r['strategy']:<15} {r['n_ubatch']:>8} {'n/a':>9}  {r['error']}")
                continue
            cells = []
            for key, _, width, fmt in _COLS:
                cells.append(f"{r[key]:<{width}}" if fmt == "s" else f"{r[key]:>{width}{fmt}}")
            out.append(" ".join(cells) + "  " + _shape_text(r["shapes"]))
    return "\n".join(out)


def legend() -> str:
    keys = ["plan_us", "extra_ubatches", "mean_fill", "max_tokens", "empty_slots", "waste_pct", "excess_waste_pct",
            "n_shapes", "shapes"]
    names = {"plan_us": "plan µs", "extra_ubatches": "extra", "mean_fill": "fill", "max_tokens": "max",
             "empty_slots": "empty slots", "waste_pct": "waste%", "excess_waste_pct": "excess%", "n_shapes": "#shp",
             "shapes": "shapes"}
    return "\n".join(f"  {names[k]:<11} {DEFINITIONS[k]}" for k in keys)


def document(rows: List[Dict[str, object]], workloads: List[Workload], strategies: List[Strategy], *,
             quick: bool, reps: int, warmup: int, seed: int, n_ubatches: List[int]) -> Dict[str, object]:
    import numpy
    import ubatch
    return {
        "suite": "ubatch split-strategy benchmark",
        "ubatch_version": getattr(ubatch, "__version__", None),
        "quick": quick, "reps": reps, "warmup": warmup, "seed": seed, "n_ubatch": n_ubatches,
        "machine": {"python": platform.python_version(), "numpy": numpy.__version__, "platform": platform.platform(),
                    "processor": platform.processor() or platform.machine(), "cpus": os.cpu_count()},
        "definitions": DEFINITIONS,
        "families": {w.family: w.describe() for w in workloads},
        "strategies": {s.name: s.desc for s in strategies},
        "rows": rows,
    }


def write_json(doc: Dict[str, object], path: str) -> None:
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
