"""Split-planning benchmark on the very workloads llama.cpp's allocator was timed on (W1–W6).

Per workload and strategy: µs per plan = init + split_reset + the whole split loop, called from Python,
median of many repetitions after warm-up, for the C path and for the pure-Python reference; beside
llama.cpp's own C++ time for the same plans (bench/data/llama_cpp_split_timings.json, memory attached).

    python bench/bench_split.py [--reps 200] [--json out.json] [--no-reference]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "data"))
import workloads as wl  # noqa: E402  (bench/data/workloads.py, copied from llama.cpp's benchmark)

import ubatch  # noqa: E402


class ArrayMemory:
    """A mock memory answering seq_pos_min/max from arrays (like llama.cpp's benchmark mock)."""

    def __init__(self, mem, n_seq_max: int) -> None:
        self.lo = np.full(n_seq_max, -1, np.int32)
        self.hi = np.full(n_seq_max, -1, np.int32)
        for s, a, b in mem or []:
            self.lo[s], self.hi[s] = a, b

    def seq_pos_min(self, s: int) -> int:
        return int(self.lo[s])

    def seq_pos_max(self, s: int) -> int:
        return int(self.hi[s])

    def _seq_pos_bounds(self, n: int):
        return self.lo[:n], self.hi[:n]


def strategy_label(st: dict) -> str:
    if st["strategy"] == "equal":
        return f"equal(seq={'true' if st.get('sequential') else 'false'})"
    return st["strategy"]


def plan_once(alloc, batch, w, st, mem, strict: bool) -> int:
    alloc.init(batch, n_seq_max=w["n_seq_max"], n_vocab=w["n_vocab"], output_all=w["output_all"], memory=mem)
    alloc.split_reset()
    n_ub, kind = w["n_ubatch"], st["strategy"]
    count = 0
    if kind == "simple":
        while alloc.split_simple(n_ub) is not None:
            count += 1
    elif kind == "seq":
        while alloc.split_seq(n_ub) is not None:
            count += 1
    else:
        seq, tail = bool(st.get("sequential")), int(st.get("n_keep_tail", 0))
        while alloc.split_equal(n_ub, sequential=seq, n_keep_tail=tail, strict=strict) is not None:
            count += 1
    return count


def time_plans(alloc, batch, w, st, mem, reps: int, warmup: int) -> tuple:
    for _ in range(warmup):
        n_ub = plan_once(alloc, batch, w, st, mem, strict=False)
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        plan_once(alloc, batch, w, st, mem, strict=False)
        samples.append((time.perf_counter_ns() - t0) / 1e3)
    return statistics.median(samples), n_ub


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--ref-reps", type=int, default=5, help="repetitions for the slow pure-Python reference")
    ap.add_argument("--no-reference", action="store_true")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)

    spec = json.load(open(os.path.join(HERE, "data", "workloads.json")))
    llama = json.load(open(os.path.join(HERE, "data", "llama_cpp_split_timings.json")))
    llama_us = {(r["workload"], r["strategy"]): r for r in llama["table"]}
    ref_cls = None
    if not args.no_reference:
        from ubatch.reference import ReferenceAllocator as ref_cls

    rows = []
    for w in wl.expand_all(spec):
        batch = ubatch.Batch.from_arrays(tokens=w["tokens"], pos=w["pos"], seq_ids=w["seq_ids"], output=w["output"])
        mem = ArrayMemory(w["mem"], w["n_seq_max"])
        for st in w["strategies"]:
            label = strategy_label(st)
            c_us, n_ub = time_plans(ubatch.BatchAllocator(), batch, w, st, mem, args.reps, args.warmup)
            ref_us = None
            if ref_cls is not None:
                ref_us, _ = time_plans(ref_cls(), batch, w, st, mem, args.ref_reps, 1)
            ll = llama_us.get((w["id"], label), {})
            rows.append({"workload": w["id"], "strategy": label, "n_tokens": len(w["tokens"]), "n_ubatch": w["n_ubatch"],
                         "n_ubatches": n_ub, "c_us": round(c_us, 2), "reference_us": None if ref_us is None else round(ref_us, 1),
                         "llama_cpp_us": ll.get("median_us"),
                         "ratio_to_llama_cpp": round(c_us / ll["median_us"], 3) if ll else None,
                         "speedup_vs_reference": round(ref_us / c_us, 1) if ref_us else None})

    hdr = f"{'workload':8} {'strategy':16} {'tokens':>6} {'ubatches':>8} {'C µs':>9} {'llama.cpp µs':>12} {'C/llama':>8} {'ref µs':>10} {'ref/C':>7}"
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        print(f"{r['workload']:8} {r['strategy']:16} {r['n_tokens']:6d} {r['n_ubatches']:8d} {r['c_us']:9.1f} "
              f"{r['llama_cpp_us'] or float('nan'):12.1f} {r['ratio_to_llama_cpp'] or float('nan'):8.3f} "
              f"{r['reference_us'] or float('nan'):10.0f} {r['speedup_vs_reference'] or float('nan'):7.0f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"what": "µs per plan (init + split_reset + split loop) from Python; median", "reps": args.reps,
                       "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
