"""Sampler micro-benchmark: one C call (ub_sample) over n rows of a 151,936-entry vocabulary (Qwen2's).

Times lib.ub_sample itself (the arrays are built once, outside the timed region) for the chains the engine
uses: greedy, llama.cpp's defaults (top-k 40, top-p 0.95, min-p 0.05), top-p over the whole vocabulary (top-k
0) and a plain temperature draw, with 1 and 2 threads. Each figure is the median over the repetitions (up to --reps calls, at most 0.4 s
per case and round, at least 3 calls), then the median over the rounds.

--compare DIR also times the ubatch found in DIR (e.g. a copy of an older build) in child processes run
alternately with children timing this tree, round after round, so that load from other processes hits both
alike; the ratio is DIR's median / ours (above 1: this tree is faster).

usage: python bench/bench_sampling.py [--rows 1,4,32] [--threads 1,2] [--chains greedy,default,...] [--reps 30]
                                      [--rounds 3]
                                      [--compare DIR] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from typing import Dict, List

import numpy as np

N_VOCAB = 151936
BUDGET = 0.4  # seconds per case and child at most (at least 3 calls)
CHAINS = {  # name: (temperature, top_k, top_p, min_p)
    "greedy": (0.0, 40, 0.95, 0.05),
    "default": (0.8, 40, 0.95, 0.05),
    "top_p_full": (0.8, 0, 0.9, 0.0),
    "dist": (1.0, 0, 1.0, 0.0),
}


def time_case(n: int, chain: str, n_threads: int, reps: int) -> float:
    """Median seconds of one ub_sample call sampling n rows with `chain` on n_threads threads."""
    from ubatch._ffi import ffi, lib

    rng = np.random.default_rng(0)
    logits = (rng.standard_normal((n, N_VOCAB)) * 3).astype(np.float32)
    t, k, p, m = CHAINS[chain]
    row = np.arange(n, dtype=np.int32)
    temperature = np.full(n, t, np.float32)
    top_k = np.full(n, k, np.int32)
    top_p = np.full(n, p, np.float32)
    min_p = np.full(n, m, np.float32)
    penalty = np.tile(np.array([1.0, 0.0, 0.0], np.float32), n)
    pen_off = np.zeros(n + 1, np.int64)
    seed = np.arange(n, dtype=np.uint64)
    counter = np.zeros(n, np.uint64)
    out = np.zeros(n, np.int32)

    def f(a, ty):
        return ffi.from_buffer(ty, a)

    args = (f(logits, "float[]"), n, N_VOCAB, n, f(row, "int32_t[]"), f(temperature, "float[]"),
            f(top_k, "int32_t[]"), f(top_p, "float[]"), f(min_p, "float[]"), f(penalty, "float[]"),
            f(pen_off, "int64_t[]"), ffi.NULL, ffi.NULL, ffi.NULL, ffi.NULL, f(seed, "uint64_t[]"),
            f(counter, "uint64_t[]"), -1, f(out, "int32_t[]"), ffi.NULL, ffi.NULL, ffi.NULL, n_threads)
    assert lib.ub_sample(*args) == lib.UB_OK  # warm-up (and the pool's workers, when there is one)
    times: List[float] = []
    t_end = time.perf_counter() + BUDGET
    while len(times) < 3 or (len(times) < reps and time.perf_counter() < t_end):
        t0 = time.perf_counter()
        lib.ub_sample(*args)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def run_cases(rows: List[int], threads: List[int], reps: int, chains: List[str] = None) -> Dict[str, float]:
    return {f"{chain}/n{n}/t{nt}": time_case(n, chain, nt, reps)
            for chain in (chains or list(CHAINS)) for n in rows for nt in threads}


def _child(path: str, rows, threads, reps, chains) -> Dict[str, float]:
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(1, sys.argv[2]);"
            "import bench_sampling as b;"
            "print(json.dumps(b.run_cases(json.loads(sys.argv[3]), json.loads(sys.argv[4]), int(sys.argv[5]),"
            " json.loads(sys.argv[6]))))")
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    res = subprocess.run([sys.executable, "-c", code, path, os.path.dirname(os.path.abspath(__file__)),
                          json.dumps(rows), json.dumps(threads), str(reps), json.dumps(chains)],
                         capture_output=True, text=True, env=env, cwd="/", check=True)
    return json.loads(res.stdout)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,4,32")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--chains", default=",".join(CHAINS), help=f"some of {','.join(CHAINS)}")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compare", default=None, help="a directory holding another ubatch package to time alike")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    rows = [int(x) for x in a.rows.split(",")]
    threads = [int(x) for x in a.threads.split(",")]
    chains = a.chains.split(",")
    if set(chains) - set(CHAINS):
        ap.error(f"unknown chain in {a.chains!r} (known: {', '.join(CHAINS)})")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sides = {"this": here} if a.compare is None else {"this": here, "other": os.path.abspath(a.compare)}
    samples: Dict[str, Dict[str, List[float]]] = {s: {} for s in sides}
    for _ in range(a.rounds):
        for s, path in sides.items():
            for key, v in _child(path, rows, threads, a.reps, chains).items():
                samples[s].setdefault(key, []).append(v)
    result = {"cpu": cpu_name(), "load_avg": os.getloadavg()[0], "n_vocab": N_VOCAB, "reps": a.reps,
              "rounds": a.rounds, "sides": sides, "cases": {}}
    print(f"{'case':<24}{'this ms':>10}" + (f"{'other ms':>10}{'other/this':>12}" if a.compare else ""))
    for key in samples["this"]:
        this = float(np.median(samples["this"][key]))
        row = {"this_ms": this * 1e3}
        line = f"{key:<24}{this * 1e3:>10.3f}"
        if a.compare:
            other = float(np.median(samples["other"][key]))
            row.update(other_ms=other * 1e3, ratio=other / this)
            line += f"{other * 1e3:>10.3f}{other / this:>12.2f}"
        result["cases"][key] = row
        print(line)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
