"""Attention kernel benchmark: ubatch's C visible-cell attention (ops.attention_visible, the kernel the model
runs) vs a numpy reference vs torch SDPA (CPU, when importable).

Decode shapes: n_seq_tokens = 1, n_seqs groups each attending its own stream of n_kv cells (kv_unified =
false layout), GQA 4:1 (32 query heads / 8 kv heads), head_dim 64/128, f32 K/V (f16 K/V rows too, ubatch
only: torch's CPU SDPA has no mixed f16-cache/f32-query path), full visibility mask. Prefill shape: one
group of 512 tokens over 512 cells with a causal mask. Same inputs for every implementation (torch gets
the same arrays permuted to its [batch, heads, tokens, dim] layout outside the timed region; ubatch gets the
mask as per-row visible-cell lists, built outside the timed region too, as the KV cache hands them over).

Measurements are interleaved (ubatch, torch, ubatch, torch, ...) so that load from other processes hits
both sides alike (torch runs with OMP_WAIT_POLICY=PASSIVE unless set: see below); each figure is the MEDIAN over the repetitions, and the spread (p75 - p25) / median is
reported as the noise. Ratios: "x np" = numpy time / ubatch time, "x torch" = torch (same mask tensor) time /
ubatch time; above 1 means ubatch is faster. Prints a table per thread count and writes JSON.

usage: python bench/bench_attention.py [--threads 1,2] [--json PATH] [--quick] [--budget SECONDS]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
from typing import Callable, Dict, List

import numpy as np

from ubatch.compute import ops

# torch's OpenMP workers busy-wait after each parallel region by default; on a shared (oversubscribed) machine
# that makes its 2-thread runs ~100x slower and steals the CPU from whatever runs next. Passive waiting keeps
# both sides' figures meaningful; set OMP_WAIT_POLICY yourself to override.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
try:  # optional comparison only; never a dependency
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    torch = None

N_HEAD, N_HEAD_KV = 32, 8


def interleaved(fns: Dict[str, Callable[[], object]], budget: float, min_reps: int = 7,
                max_reps: int = 400, slow: Dict[str, int] = None) -> Dict[str, List[float]]:
    """Run every fn once per round, in turn, until the time budget is spent (at least min_reps rounds).
    slow[name] = n runs that fn only every n-th round (for the numpy reference). Returns the times."""
    slow = slow or {}
    for fn in fns.values():
        fn()  # warm-up
    times: Dict[str, List[float]] = {name: [] for name in fns}
    t_end = time.perf_counter() + budget
    rnd = 0
    while rnd < min_reps or (time.perf_counter() < t_end and rnd < max_reps):
        for name, fn in fns.items():
            if rnd % slow.get(name, 1):
                continue
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
        rnd += 1
    return times


def summary(ts: List[float]) -> Dict[str, float]:
    a = np.asarray(ts) * 1e6
    med = float(np.median(a))
    p25, p75 = np.percentile(a, [25, 75])
    return {"us": med, "noise": float((p75 - p25) / med), "reps": int(a.size), "min_us": float(a.min())}


def numpy_attention(q, k, v, mask, scale):
    """Plain numpy: materialised scores per group, GQA by repeating kv heads. q [ns, per, H, d]."""
    r = q.shape[2] // k.shape[2]
    kk = np.repeat(k.transpose(0, 2, 1, 3), r, axis=1)           # [ns, H, n_kv, d]
    vv = np.repeat(v.transpose(0, 2, 1, 3), r, axis=1)
    s = np.matmul(q.transpose(0, 2, 1, 3), kk.transpose(0, 1, 3, 2)) * scale + mask[:, None]
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    return np.matmul(s, vv).transpose(0, 2, 1, 3)


def make_inputs(rng, ns, per, n_kv, hd, causal):
    q = rng.standard_normal((ns, per, N_HEAD, hd), dtype=np.float32)
    k = rng.standard_normal((ns, n_kv, N_HEAD_KV, hd), dtype=np.float32)
    v = rng.standard_normal((ns, n_kv, N_HEAD_KV, hd), dtype=np.float32)
    mask = np.zeros((ns, per, n_kv), np.float32)
    if causal:
        mask[:] = np.triu(np.full((per, n_kv), -np.inf, np.float32), k=1 + n_kv - per)
    return q, k, v, mask


def run_case(inputs, causal, threads, with_numpy, with_f16, budget):
    q, k, v, mask = inputs
    ns, per, _, hd = q.shape
    n_kv = k.shape[1]
    streams = np.arange(ns, dtype=np.int32)
    scale = 1.0 / np.sqrt(hd)
    qr = q.reshape(ns * per, N_HEAD, hd)
    rs = np.repeat(streams, per).astype(np.int32)
    off, cells = ops.visible_cells(mask, np.tile(np.arange(n_kv, dtype=np.int32), (ns, 1)))
    out = np.empty_like(qr)
    flops = 4.0 * ns * per * N_HEAD * n_kv * hd
    row = {"threads": threads, "n_seqs": ns, "n_seq_tokens": per, "n_kv": n_kv, "head_dim": hd,
           "n_head": N_HEAD, "n_head_kv": N_HEAD_KV, "causal": causal, "flops": flops}
    fns = {"ubatch": lambda: ops.attention_visible(qr, k, v, rs, off, cells, scale=scale, n_threads=threads,
                                                   out=out)}
    if with_f16:
        k16, v16 = k.astype(np.float16), v.astype(np.float16)
        out16 = np.empty_like(qr)
        fns["ubatch_f16"] = lambda: ops.attention_visible(qr, k16, v16, rs, off, cells, scale=scale,
                                                          n_threads=threads, out=out16)
    if torch is not None:
        torch.set_num_threads(threads)
        tq = torch.from_numpy(q).permute(0, 2, 1, 3).contiguous()          # [ns, H, per, d]
        tk = torch.from_numpy(k).permute(0, 2, 1, 3).contiguous()          # [ns, Hkv, n_kv, d]
        tv = torch.from_numpy(v).permute(0, 2, 1, 3).contiguous()
        tm = torch.from_numpy(mask)[:, None]                               # [ns, 1, per, n_kv]

        def t_mask():
            with torch.inference_mode():
                return F.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm, scale=scale, enable_gqa=True)

        def t_nomask():  # torch's best case: no mask tensor (or its own causal path)
            with torch.inference_mode():
                return F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal, scale=scale, enable_gqa=True)

        fns["torch"] = t_mask
        fns["torch_nomask"] = t_nomask
    slow = {}
    if with_numpy:
        fns["numpy"] = lambda: numpy_attention(q, k, v, mask, scale)
        slow["numpy"] = 8
    times = interleaved(fns, budget, slow=slow)
    for name, ts in times.items():
        s = summary(ts)
        row[name + "_us"] = s["us"]
        row[name + "_noise"] = s["noise"]
        row[name + "_reps"] = s["reps"]
        row[name + "_gflops"] = flops / (s["us"] * 1e-6) / 1e9
    out = out.reshape(q.shape)
    if with_numpy:
        row["max_abs_diff_vs_numpy"] = float(np.abs(numpy_attention(q, k, v, mask, scale) - out).max())
    if torch is not None:
        row["max_abs_diff_vs_torch"] = float(np.abs(t_mask().permute(0, 2, 1, 3).numpy() - out).max())
    if with_f16:
        row["max_abs_diff_f16_vs_f32"] = float(np.abs(out16.reshape(q.shape) - out).max())
    return row


def fmt_row(r: dict) -> str:
    shape = f"{'prefill' if r['causal'] else 'decode'} s={r['n_seqs']} t={r['n_seq_tokens']} kv={r['n_kv']} " \
            f"d={r['head_dim']}"
    nan = float("nan")
    u = r["ubatch_us"]
    np_us, t_us, t2 = r.get("numpy_us", nan), r.get("torch_us", nan), r.get("torch_nomask_us", nan)
    f16 = r.get("ubatch_f16_us", nan)
    return (f"{shape:<32}{u:>10.1f}{100 * r['ubatch_noise']:>5.0f}%{r['ubatch_gflops']:>6.1f}{f16:>10.1f}"
            f"{np_us:>11.1f}{np_us / u:>7.1f}{t_us:>10.1f}{100 * r.get('torch_noise', nan):>5.0f}%"
            f"{t_us / u:>8.2f}{t2:>10.1f}{t2 / u:>8.2f}")


HEADER = (f"{'shape':<32}{'ubatch µs':>10}{'noise':>6}{'GF/s':>6}{'f16 µs':>10}{'numpy µs':>11}{'x np':>7}"
          f"{'torch µs':>10}{'noise':>6}{'x torch':>8}{'t-nomask':>10}{'x t-nm':>8}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--json", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "results_attention.json"))
    ap.add_argument("--quick", action="store_true", help="a few small shapes only")
    ap.add_argument("--budget", type=float, default=1.5, help="seconds of interleaved timing per case")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    cases = []
    seqs = (1, 8) if args.quick else (1, 4, 16, 64)
    kvs = (256, 1024) if args.quick else (256, 1024, 4096)
    for hd in (64, 128):
        for ns in seqs:
            for n_kv in kvs:
                if ns * n_kv * N_HEAD_KV * hd * 4 > 2**28:  # K alone > 256 MiB: too big for a shared box
                    continue
                cases.append((ns, 1, n_kv, hd, False))
    cases.append((1, 512, 512, 128, True))
    if not args.quick:
        cases.append((1, 512, 512, 64, True))
    print(f"torch={'none' if torch is None else torch.__version__} numpy={np.__version__} "
          f"cpu={platform.processor() or platform.machine()} load={os.getloadavg()[0]:.1f} "
          f"median of interleaved reps; x = other/ubatch (>1: ubatch faster); noise = IQR/median", flush=True)
    rows = []
    rng = np.random.default_rng(0)
    by_threads: Dict[int, List[str]] = {t: [] for t in threads}
    for ns, per, n_kv, hd, causal in cases:
        inputs = make_inputs(rng, ns, per, n_kv, hd, causal)
        big = ns * n_kv * N_HEAD * hd * 4 > 2**28  # numpy would materialise >256 MiB of repeated K
        for t in threads:
            r = run_case(inputs, causal, t, with_numpy=not big, with_f16=not causal, budget=args.budget)
            rows.append(r)
            line = fmt_row(r)
            by_threads[t].append(line)
            print(f"[{t} thr] {line}", flush=True)
    for t in threads:
        print(f"\nthreads={t}")
        print(HEADER)
        print("\n".join(by_threads[t]))
    meta = {"threads": threads, "torch": None if torch is None else torch.__version__,
            "numpy": np.__version__, "machine": platform.machine(), "processor": platform.processor(),
            "cpu_count": os.cpu_count(), "n_head": N_HEAD, "n_head_kv": N_HEAD_KV, "kv_type": "f32",
            "statistic": "median of interleaved repetitions; *_noise = (p75 - p25) / median",
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
            "load_avg_end": os.getloadavg()[0]}
    with open(args.json, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
