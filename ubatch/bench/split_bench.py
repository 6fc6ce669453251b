"""`ubatch bench split`: planning time on the very batches llama.cpp's allocator was timed on (W1-W6),
beside llama.cpp's own C++ time for the same plans. bench/bench_split.py is a thin entry point to this.

Per workload and strategy: µs per plan = init + split_reset + the whole split loop, called from Python,
median of many repetitions after warm-up, with a mock memory attached (as llama_decode always has one):
once with a memory offering the bulk `_seq_pos_bounds` (the built-in caches' fast path), once with a plain
Python object that only has seq_pos_min / seq_pos_max (asked only about the batch's sequences, as llama.cpp),
and once with that plain memory and the whole split loop in one `split_all` call; optionally also for the
pure-Python reference allocator (ubatch.batch.reference).

llama.cpp's time: by default (--llama-cpp auto) its own llama_batch_allocr is timed live on this machine
right after each sweep (ubatch/bench/llama_live.py: needs llama-cpp-python and g++), with the same mock
memory; else (or with --llama-cpp json) its recorded times (ubatch/bench/data, another machine of the class).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Dict, List, Optional

import numpy as np

from ubatch.batch.allocator import BatchAllocator
from ubatch.batch.container import Batch
from ubatch.batch.reference import ReferenceAllocator
from ubatch.bench.llama_data import LLAMA_CPP_TIMINGS, WORKLOADS


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


class PlainMemory:
    """The plainest memory a user can pass: two Python methods, Python ints, nothing else."""

    def __init__(self, mem, n_seq_max: int) -> None:
        self.lo = [-1] * n_seq_max
        self.hi = [-1] * n_seq_max
        for s, a, b in mem or []:
            self.lo[s], self.hi[s] = a, b

    def seq_pos_min(self, s: int) -> int:
        return self.lo[s]

    def seq_pos_max(self, s: int) -> int:
        return self.hi[s]


def expand(w: dict, defaults: dict) -> dict:
    """One workload of WORKLOADS as concrete rows: segments are inclusive seq ranges laid out contiguously
    (seq by seq), interleaved (position by position) or shared (one row carrying every seq of the range)."""
    d = dict(defaults, **{k: v for k, v in w.items() if k in defaults})
    n_vocab = d["n_vocab"]
    seq_ids: List[List[int]] = []
    pos: List[int] = []
    for seg in w["segments"]:
        seqs = list(range(seg["seqs"][0], seg["seqs"][1] + 1))
        n, p0, lay = seg["n"], seg["pos0"], seg["layout"]
        if lay == "contiguous":
            rows = [([s], p0 + k) for s in seqs for k in range(n)]
        elif lay == "interleaved":
            rows = [([s], p0 + k) for k in range(n) for s in seqs]
        elif lay == "shared":
            rows = [(seqs, p0 + k) for k in range(n)]
        else:
            raise ValueError(f"unknown segment layout {lay!r} in workload {w['id']}")
        for ids, p in rows:
            seq_ids.append(ids)
            pos.append(p)
    pos_a = np.asarray(pos, np.int64)
    first = np.asarray([ids[0] for ids in seq_ids], np.int64)
    tokens = (7919 * first + 104729 * pos_a + 17) % n_vocab
    if d["output"] == "all":
        output = np.ones(len(pos), np.int8)
    else:
        last: Dict[int, int] = {}
        for i, ids in enumerate(seq_ids):
            for s in ids:
                last[s] = i
        output = np.zeros(len(pos), np.int8)
        output[sorted(set(last.values()))] = 1
    mem = None
    if "mem" in w:
        m = w["mem"]
        mem = [[s, m["pos_min"], m["pos_max"]] for s in range(m["seqs"][0], m["seqs"][1] + 1)]
    return {"id": w["id"], "desc": w.get("desc", ""), "n_seq_max": d["n_seq_max"], "n_vocab": n_vocab,
            "output_all": d["output_all"], "tokens": tokens.astype(np.int32), "pos": pos_a.astype(np.int32),
            "seq_ids": seq_ids, "output": output, "mem": mem, "n_ubatch": w["n_ubatch"], "strategies": w["strategies"]}


def strategy_label(st: dict) -> str:
    if st["strategy"] == "equal":
        return f"equal(seq={'true' if st.get('sequential') else 'false'})"
    return st["strategy"]


def plan_once(alloc, batch: Batch, w: dict, st: dict, mem, bulk: bool = False) -> int:
    """One plan: init, then the split loop from Python (bulk: the whole loop in one split_all call)."""
    alloc.init(batch, n_seq_max=w["n_seq_max"], n_vocab=w["n_vocab"], output_all=w["output_all"], memory=mem)
    n_ub, kind = w["n_ubatch"], st["strategy"]
    if bulk:
        if kind == "equal":
            return len(alloc.split_all("equal", n_ub, sequential=bool(st.get("sequential")),
                                       n_keep_tail=int(st.get("n_keep_tail", 0)), strict=False))
        return len(alloc.split_all(kind, n_ub))
    alloc.split_reset()
    count = 0
    if kind == "simple":
        while alloc.split_simple(n_ub) is not None:
            count += 1
    elif kind == "seq":
        while alloc.split_seq(n_ub) is not None:
            count += 1
    else:
        seq, tail = bool(st.get("sequential")), int(st.get("n_keep_tail", 0))
        while alloc.split_equal(n_ub, sequential=seq, n_keep_tail=tail, strict=False) is not None:
            count += 1
    return count


def time_plans(alloc, batch: Batch, w: dict, st: dict, mem, reps: int, warmup: int, bulk: bool = False) -> tuple:
    n_ub = plan_once(alloc, batch, w, st, mem, bulk)
    for _ in range(warmup):
        plan_once(alloc, batch, w, st, mem, bulk)
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        plan_once(alloc, batch, w, st, mem, bulk)
        samples.append((time.perf_counter_ns() - t0) / 1e3)
    return statistics.median(samples), n_ub


def expanded(only: Optional[List[str]] = None) -> List[dict]:
    """The workloads W1-W6 (or the ids in `only`) as concrete rows."""
    return [w for w in (expand(x, WORKLOADS["defaults"]) for x in WORKLOADS["workloads"])
            if not only or w["id"] in only]


def run(reps: int = 200, warmup: int = 20, ref_reps: int = 5, reference: bool = True,
        only: Optional[List[str]] = None, progress=None) -> List[dict]:
    """One row per (workload, strategy) of W1-W6 (or the ids in `only`)."""
    llama_us = {(r["workload"], r["strategy"]): r for r in LLAMA_CPP_TIMINGS["table"]}
    ref_cls = ReferenceAllocator if reference else None
    cells = []
    for w in (expand(x, WORKLOADS["defaults"]) for x in WORKLOADS["workloads"]):
        if only and w["id"] not in only:
            continue
        for st in w["strategies"]:
            cells.append((w, st))
    it = cells if progress is None else progress(cells, len(cells))
    rows = []
    batches: Dict[str, Batch] = {}
    for w, st in it:
        batch = batches.get(w["id"])
        if batch is None:
            batch = batches[w["id"]] = Batch.from_arrays(tokens=w["tokens"], pos=w["pos"], seq_ids=w["seq_ids"],
                                                         output=w["output"])
        mem = ArrayMemory(w["mem"], w["n_seq_max"])
        label = strategy_label(st)
        c_us, n_ub = time_plans(BatchAllocator(), batch, w, st, mem, reps, warmup)
        plain_us, _ = time_plans(BatchAllocator(), batch, w, st, PlainMemory(w["mem"], w["n_seq_max"]), reps, warmup)
        bulk_us, n_bulk = time_plans(BatchAllocator(), batch, w, st, PlainMemory(w["mem"], w["n_seq_max"]), reps,
                                     warmup, bulk=True)
        if n_bulk != n_ub:
            raise AssertionError(f"{w['id']} {label}: split_all made {n_bulk} ubatches, the loop {n_ub}")
        ref_us = None
        if ref_cls is not None:
            ref_us, _ = time_plans(ref_cls(), batch, w, st, mem, ref_reps, 1)
        ll = llama_us.get((w["id"], label), {})
        rows.append({"workload": w["id"], "strategy": label, "n_tokens": len(w["tokens"]), "n_ubatch": w["n_ubatch"],
                     "n_ubatches": n_ub, "llama_cpp_n_ubatches": ll.get("n_ubatches"), "c_us": round(c_us, 2),
                     "plain_memory_us": round(plain_us, 2),
                     "plain_ratio_to_llama_cpp": round(plain_us / ll["median_us"], 3) if ll else None,
                     "plain_bulk_us": round(bulk_us, 2),
                     "plain_bulk_ratio_to_llama_cpp": round(bulk_us / ll["median_us"], 3) if ll else None,
                     "reference_us": None if ref_us is None else round(ref_us, 1),
                     "llama_cpp_us": ll.get("median_us"),
                     "ratio_to_llama_cpp": round(c_us / ll["median_us"], 3) if ll else None,
                     "speedup_vs_reference": round(ref_us / c_us, 1) if ref_us else None})
    return rows


def combine_runs(sweeps: List[List[dict]], live: Optional[List[Dict[tuple, dict]]] = None) -> List[dict]:
    """One row per plan: µs = median of the sweeps' medians (the reference is timed in the first sweep only);
    the ratios are recomputed from it and every sweep's median is kept in run_medians_us. With `live` (one
    llama_live.time_workloads result per sweep, timed right after it), llama.cpp's figure is the median of
    its sweeps' medians on this machine, the recorded one is kept as llama_cpp_recorded_us, and each ratio is
    the median over sweeps of (ubatch's median / llama.cpp's median timed right after it)."""
    rows = []
    for parts in zip(*sweeps):
        r = dict(parts[0])
        meds = [p["c_us"] for p in parts]
        r["run_medians_us"] = meds
        r["c_us"] = round(statistics.median(meds), 2)
        r["plain_memory_us"] = round(statistics.median([p["plain_memory_us"] for p in parts]), 2)
        r["plain_bulk_us"] = round(statistics.median([p["plain_bulk_us"] for p in parts]), 2)
        r["llama_cpp_source"] = "recorded"
        r["llama_cpp_recorded_us"] = r.get("llama_cpp_us")
        got: List[dict] = []
        if live:
            key = (r["workload"], r["strategy"], "mock")
            got = [lv[key] for lv in live if key in lv]
            if got:
                r["llama_cpp_us"] = round(statistics.median([g["median_us"] for g in got]), 2)
                r["llama_cpp_run_medians_us"] = [g["median_us"] for g in got]
                r["llama_cpp_no_memory_us"] = round(statistics.median(
                    [lv[key[:2] + ("none",)]["median_us"] for lv in live if key[:2] + ("none",) in lv]), 2)
                r["llama_cpp_n_ubatches"] = got[0]["n_ubatches"]
                r["llama_cpp_source"] = "live"
        paired = r["llama_cpp_source"] == "live" and len(got) == len(parts)
        for col, ratio in (("c_us", "ratio_to_llama_cpp"), ("plain_memory_us", "plain_ratio_to_llama_cpp"),
                           ("plain_bulk_us", "plain_bulk_ratio_to_llama_cpp")):
            if paired:
                # each sweep's ubatch median over the llama.cpp median timed right after it: the machine's
                # drift between sweeps cancels; the ratio is the median of those paired ratios
                r[ratio] = round(statistics.median([p[col] / g["median_us"] for p, g in zip(parts, got)]), 3)
            elif r.get("llama_cpp_us"):
                r[ratio] = round(r[col] / r["llama_cpp_us"], 3)
        if r.get("reference_us"):
            r["speedup_vs_reference"] = round(r["reference_us"] / r["c_us"], 1)
        rows.append(r)
    return rows


def _f(v, fmt: str) -> str:
    return format(v, fmt) if v is not None else "-"


def table(rows: List[dict]) -> str:
    """C = the built-in fast memory path, split loop from Python; plain = a plain Python memory, the same
    loop; bulk = a plain Python memory and the whole loop in one split_all call. llama.cpp: live or recorded."""
    hdr = (f"{'workload':8} {'strategy':16} {'tokens':>6} {'ubatches':>8} {'llama.cpp µs':>12} {'(recorded)':>10} "
           f"{'C µs':>8} {'C/llama':>7} {'plain µs':>9} {'plain/llama':>11} {'bulk µs':>8} {'bulk/llama':>10} "
           f"{'ref µs':>9} {'ref/C':>6}")
    out = [hdr, "-" * len(hdr)]
    for r in rows:
        out.append(f"{r['workload']:8} {r['strategy']:16} {r['n_tokens']:6d} {r['n_ubatches']:8d} "
                   f"{_f(r['llama_cpp_us'], '.1f'):>12} {_f(r.get('llama_cpp_recorded_us'), '.1f'):>10} "
                   f"{r['c_us']:8.1f} {_f(r['ratio_to_llama_cpp'], '.3f'):>7} "
                   f"{_f(r.get('plain_memory_us'), '.1f'):>9} {_f(r.get('plain_ratio_to_llama_cpp'), '.3f'):>11} "
                   f"{_f(r.get('plain_bulk_us'), '.1f'):>8} {_f(r.get('plain_bulk_ratio_to_llama_cpp'), '.3f'):>10} "
                   f"{_f(r['reference_us'], '.0f'):>9} {_f(r['speedup_vs_reference'], '.0f'):>6}")
    return "\n".join(out)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--reps", type=int, default=200, help="timed repetitions per plan (default 200)")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--ref-reps", type=int, default=5, help="repetitions for the slow pure-Python reference")
    ap.add_argument("--no-reference", action="store_true", help="skip the pure-Python reference allocator")
    ap.add_argument("--workload", action="append", default=None, metavar="ID", help="only this workload (W1..W6); repeatable")
    ap.add_argument("--runs", type=int, default=3,
                    help="sweeps; µs = median of the sweeps' medians, as llama.cpp's timings (default 3)")
    ap.add_argument("--json", default=None, metavar="FILE", help="also write the rows here")
    ap.add_argument("--llama-cpp", choices=("auto", "live", "json"), default="auto",
                    help="llama.cpp's times: live = its allocator timed on this machine after each sweep "
                         "(needs llama-cpp-python and g++; the sdist's headers are fetched once), json = its "
                         "recorded times, auto = live when possible (default)")


def main_args(args, progress=None) -> int:
    if args.reps < 1 or args.warmup < 0 or args.ref_reps < 1:
        raise SystemExit("--reps and --ref-reps must be >= 1, --warmup >= 0")
    reference = not args.no_reference
    runs = max(1, getattr(args, "runs", 1))
    mode = getattr(args, "llama_cpp", "json")
    live_ok = False
    if mode != "json":
        from ubatch.bench import llama_live
        why = llama_live.available()
        if why and mode == "live":
            raise SystemExit(f"--llama-cpp live: {why}")
        if why:
            print(f"note: llama.cpp is not timed live here ({why}); its recorded times are used")
        live_ok = why is None
    sweeps, live = [], []
    for k in range(runs):
        # workload by workload, ubatch then llama.cpp right after it: both see the same machine state
        rows_k: List[dict] = []
        live_k: Dict[tuple, dict] = {}
        ws = expanded(args.workload)
        for w in (ws if progress is None else progress(ws, len(ws))):
            rows_k += run(args.reps, args.warmup, args.ref_reps, reference and k == 0, [w["id"]])
            if live_ok:
                live_k.update(llama_live.time_workloads([w], args.reps, args.warmup))
        sweeps.append(rows_k)
        live.append(live_k)
    rows = combine_runs(sweeps, live)
    print(table(rows))
    src = "live on this machine, after each sweep" if live_ok else "recorded (ubatch/bench/data)"
    print(f"llama.cpp: {src}; µs = median of {runs} sweeps' medians"
          + ("; ratios = median of the sweeps' paired ratios" if live_ok else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"what": "µs per plan (init + split_reset + split loop) from Python; median", "reps": args.reps,
                       "llama_cpp": {k: LLAMA_CPP_TIMINGS[k] for k in ("what", "llama_cpp_commit", "machine")},
                       "llama_cpp_source": "live" if live_ok else "recorded", "rows": rows}, f, indent=1)
        print(f"wrote {args.json}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap)
    return main_args(ap.parse_args(argv))
