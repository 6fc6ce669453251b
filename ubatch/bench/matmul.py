"""Matmul kernel benchmark on the real models' weight shapes and types (`ubatch bench matmul`).

For each distinct (type, n_rows, n_cols) weight of Qwen2.5-Coder-0.5B Q4_K_M and Gemma-3-270M Q4_K_M (the
real tensors, read from the cached GGUF files; random blocks of the same type when a file is missing) and
each row count n (1 = decode step, 32 = a 32-sequence decode step, 512 = prefill), times ``matmul`` on the
back-ends this CPU has (avx512, avxvnni, avx2, generic) with 1 and 2 threads, beside numpy's float32 BLAS matmul of the dequantised
weight (numpy's own thread count). Reports the median wall time and the median CPU time of the process
over the repetitions, weight GB/s (weight bytes / wall time: B=1 is bound by memory bandwidth), GFLOP/s
(2 n rows cols / wall time) and the "x np" ratio (numpy time / ubatch time). Then the matmul time of a
whole decode token (sum over every matmul of the model at n=1 and n=32) and the tok/s bound it implies, and
the B = 1 step as a percentage of the machine's read bandwidth (a STREAM-like read kernel in C,
ub_mem_read, over 512 MB with the same thread count): a B = 1 step reads every weight byte once.

The machine is shared: wall times are noisy (the CPU-time column shows how much of the wall time the
process actually ran); compare ratios measured in one run.

usage: python bench/bench_matmul.py [--quick] [--threads 1,2] [--n 1,32,512] [--json PATH] [--no-numpy]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import statistics
import sys
import time
from typing import Dict, List, Optional

import numpy as np

from ubatch._ffi import ffi, lib
from ubatch.compute import backends as kb
from ubatch.compute import matmul as mm

MODELS = {"qwen2.5-0.5b": "Qwen2.5-Coder-0.5B Q4_K_M", "gemma3-270m": "Gemma-3-270M Q4_K_M"}


def _model_weights(name: str) -> Optional[List[dict]]:
    """[{type, n_rows, n_cols, count, data}] of every 2-D weight of the model (lm head included once, as
    output.weight or the tied token_embd), or None when the file is not available."""
    try:
        from ubatch.bench.gguf_tensors import read_tensors
        from ubatch.model import fetch
        tensors = read_tensors(fetch.path(name))
    except Exception as e:  # pragma: no cover - environment dependent
        print(f"note: {name}: {e}; using random blocks", file=sys.stderr)
        return None
    groups: Dict[tuple, dict] = collections.OrderedDict()
    for t in tensors.values():
        if len(t.ne) != 2:
            continue
        if t.name == "token_embd.weight" and "output.weight" in tensors:
            continue  # looked up by get_rows only; the lm head is output.weight
        n_cols, n_rows = int(t.ne[0]), int(t.ne[1])
        key = (t.ggml_type, n_rows, n_cols)
        g = groups.setdefault(key, {"type": key[0], "n_rows": n_rows, "n_cols": n_cols, "count": 0,
                                    "data": t.data, "names": set()})
        g["count"] += 1
        g["names"].add(t.name.split(".")[-2] if t.name.startswith("blk.") else t.name.replace(".weight", ""))
    return list(groups.values())


def _time(fn, reps: int):
    fn()
    wall, cpu = [], []
    for _ in range(reps):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def read_bandwidth(n_threads: int, mb: int = 512, reps: int = 5) -> float:
    """GB/s of the C read kernel (ub_mem_read) over an mb-MB buffer on n_threads threads (best of reps)."""
    buf = np.ones(mb << 20, np.uint8)
    p, out = ffi.from_buffer("uint8_t[]", buf), ffi.new("uint64_t *")
    best = float("inf")
    for _ in range(reps + 1):
        t0 = time.perf_counter()
        if lib.ub_mem_read(p, buf.nbytes, n_threads, out) != lib.UB_OK:
            raise RuntimeError("ub_mem_read failed")
        best = min(best, time.perf_counter() - t0)
    if out[0] != (buf.nbytes // 8) * 0x0101010101010101 % (1 << 64):  # every byte read, exactly once
        raise RuntimeError("ub_mem_read: wrong checksum")
    return buf.nbytes / best / 1e9


def _reps(n: int, nbytes: int, quick: bool) -> int:
    work = n * nbytes
    r = int(max(3, min(40, 2e8 / max(work, 1))))
    return max(3, r // 3) if quick else r


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="ubatch bench matmul", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, n = 1 and 32 only")
    ap.add_argument("--threads", default="1,2", help="thread counts (default 1,2)")
    ap.add_argument("--n", default=None, help="row counts (default 1,32,512; quick 1,32)")
    ap.add_argument("--models", default=",".join(MODELS), help="models (default both)")
    ap.add_argument("--backends", default=None, help="back-ends (default: every one this CPU has; generic only at "
                    "the decode shapes)")
    ap.add_argument("--no-numpy", action="store_true", help="skip numpy's f32 BLAS comparison")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    bad = [m for m in args.models.split(",") if m not in MODELS]
    if bad:
        print(f"ubatch bench matmul: unknown model(s) {', '.join(bad)} (choose from {', '.join(MODELS)})",
              file=sys.stderr)
        return 2
    threads = [int(x) for x in args.threads.split(",")]
    ns = [int(x) for x in (args.n or ("1,32" if args.quick else "1,32,512")).split(",")]
    backends = args.backends.split(",") if args.backends else kb.backends()[::-1]
    bad = [b for b in backends if b not in kb.backends()]
    if bad:
        print(f"ubatch bench matmul: back-end(s) {', '.join(bad)} not available on this CPU (it has: "
              f"{', '.join(kb.backends())})", file=sys.stderr)
        return 2
    rng = np.random.default_rng(0)
    results = []
    print(f"{'model':14} {'weight':22} {'type':5} {'rows x cols':>13} {'n':>4} {'backend':8} {'thr':>3} "
          f"{'wall ms':>9} {'cpu ms':>8} {'GB/s':>7} {'GFLOP/s':>8} {'x np':>6}")
    for model in args.models.split(","):
        groups = _model_weights(model)
        if groups is None:
            sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests"))
            from matmul_ref import random_weight  # noqa: E402  (source checkout only)
            from gguf import GGMLQuantizationType as T
            shapes = {"qwen2.5-0.5b": [(T.Q5_0, 4864, 896), (T.Q4_K, 896, 4864), (T.Q8_0, 151936, 896)],
                      "gemma3-270m": [(T.Q5_0, 2048, 640), (T.Q4_K, 640, 2048), (T.Q8_0, 262144, 640)]}[model]
            groups = [{"type": int(t), "n_rows": r, "n_cols": c, "count": 1, "names": {"random"},
                       "data": random_weight(t, r, c, rng)} for t, r, c in shapes]
        for g in groups:
            w = mm.QWeight(g["type"], g["n_rows"], g["n_cols"], g["data"])
            wf = None
            lm_head = bool(g["names"] & {"output", "token_embd"})
            for n in ns:
                if lm_head and n > 32:
                    continue  # prefill computes the lm head for its output rows only
                x = rng.standard_normal((n, w.n_cols)).astype(np.float32)
                reps = _reps(n, w.nbytes, args.quick)
                np_t = None
                if not args.no_numpy and n > 1:
                    if wf is None:
                        wf = np.ascontiguousarray(mm.get_rows(w, np.arange(w.n_rows, dtype=np.int32)).T)
                    np_t, _ = _time(lambda: x @ wf, reps)
                for be in backends:
                    if be == "generic" and n > 1 and not args.quick and n != ns[1 if len(ns) > 1 else 0]:
                        continue  # generic: decode shapes only (it is the slow reference path)
                    mm.set_backend(be)
                    for nt in threads:
                        wall, cpu = _time(lambda: mm.matmul(x, w, n_threads=nt), reps)
                        row = {"model": model, "weight": "/".join(sorted(g["names"])), "count": g["count"],
                               "type": mm.TYPE_NAMES[g["type"]], "n_rows": w.n_rows, "n_cols": w.n_cols, "n": n,
                               "backend": be, "threads": nt, "wall_s": wall, "cpu_s": cpu,
                               "weight_gb_s": w.nbytes / wall / 1e9, "gflop_s": 2 * n * w.n_rows * w.n_cols / wall / 1e9,
                               "numpy_s": np_t, "x_numpy": (np_t / wall) if np_t else None}
                        results.append(row)
                        print(f"{model:14} {row['weight'][:22]:22} {row['type']:5} {w.n_rows:>6}x{w.n_cols:<6} {n:>4} "
                              f"{be:8} {nt:>3} {wall * 1e3:9.3f} {cpu * 1e3:8.3f} {row['weight_gb_s']:7.2f} "
                              f"{row['gflop_s']:8.2f} {row['x_numpy'] or float('nan'):6.2f}", flush=True)
    mm.set_backend("auto")
    src = np.ones(1 << 26, np.float32)
    dst = np.empty_like(src)
    cp, _ = _time(lambda: np.copyto(dst, src), 5)
    membw = 2 * src.nbytes / cp / 1e9
    print(f"\nmemory: numpy copy of 256 MB, one thread: {membw:.1f} GB/s (read + write)")
    readbw = {nt: read_bandwidth(nt) for nt in threads}
    print("memory: C read kernel over 512 MB: " + ", ".join(f"{readbw[nt]:.1f} GB/s on {nt} thread(s)" for nt in threads))
    print("\nmatmul time of one decode step (all of the model's matmuls, lm head once per row):")
    summary = []
    for model in args.models.split(","):
        for be in backends:
            for nt in threads:
                for n in (1, 32):
                    rows = [r for r in results if r["model"] == model and r["backend"] == be and r["threads"] == nt
                            and r["n"] == n]
                    if not rows or n not in ns:
                        continue
                    t = sum(r["wall_s"] * r["count"] for r in rows)
                    c = sum(r["cpu_s"] * r["count"] for r in rows) / nt  # the wall time of an idle machine
                    s = {"model": model, "backend": be, "threads": nt, "n": n, "step_s": t, "step_cpu_s": c,
                         "tok_s_bound": n / t, "tok_s_bound_cpu": n / c}
                    one = next((x for x in summary if x["model"] == model and x["backend"] == be
                                and x["threads"] == nt and x["n"] == 1), None)
                    summary.append(s)
                    rel = f"  ({c / one['step_cpu_s']:4.1f}x the B=1 step)" if n > 1 and one else ""
                    if n == 1:
                        step_bytes = sum(r["n_rows"] * (r["n_cols"] // mm.type_info(getattr(mm, r["type"]))[0])
                                         * mm.type_info(getattr(mm, r["type"]))[1] * r["count"] for r in rows)
                        s["weight_bytes"] = step_bytes
                        s["read_gb_s"] = readbw[nt]
                        s["pct_of_read_bw"] = 100 * step_bytes / t / 1e9 / readbw[nt]
                        rel = (f"  {step_bytes / t / 1e9:5.1f} GB/s = {s['pct_of_read_bw']:4.0f}% of the read "
                               f"bandwidth ({readbw[nt]:.1f} GB/s, {nt} thr)")
                    print(f"  {model:14} {be:8} threads={nt} B={n:<3} wall {t * 1e3:8.2f} ms/step ({n / t:7.1f} tok/s)"
                          f"  cpu/threads {c * 1e3:8.2f} ms/step ({n / c:7.1f} tok/s){rel}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
                       "memcpy_gb_s": membw, "read_gb_s": readbw,
                       "backend_auto": kb.active_backend(), "backends_cpu": kb.backends(), "results": results, "decode_step": summary}, f, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
