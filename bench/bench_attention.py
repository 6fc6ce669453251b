"""Attention kernel benchmark: ubatch's C kernel vs a numpy reference vs torch SDPA (CPU, when importable).

Decode shapes: n_seq_tokens = 1, n_seqs groups each attending its own stream of n_kv cells (kv_unified =
false layout), GQA 4:1 (32 query heads / 8 kv heads), head_dim 64/128, f32 K/V, full visibility mask.
Prefill shape: one group of 512 tokens over 512 cells with a causal mask. Same inputs for every
implementation; each figure is the best of several repetitions. Prints a table and writes JSON.

usage: python bench/bench_attention.py [--threads N] [--json PATH] [--quick]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np

from ubatch import kernels

try:  # optional comparison only; never a dependency
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    torch = None

N_HEAD, N_HEAD_KV = 32, 8


def best_time(fn, min_reps: int = 3, budget: float = 0.3) -> float:
    fn()  # warm-up
    times = []
    t_end = time.perf_counter() + budget
    while len(times) < min_reps or (time.perf_counter() < t_end and len(times) < 50):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


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


def run_case(rng, ns, per, n_kv, hd, causal, threads, with_numpy):
    q = rng.standard_normal((ns, per, N_HEAD, hd), dtype=np.float32)
    k = rng.standard_normal((ns, n_kv, N_HEAD_KV, hd), dtype=np.float32)
    v = rng.standard_normal((ns, n_kv, N_HEAD_KV, hd), dtype=np.float32)
    mask = np.zeros((ns, per, n_kv), np.float32)
    if causal:
        mask[:] = np.triu(np.full((per, n_kv), -np.inf, np.float32), k=1 + n_kv - per)
    streams = np.arange(ns, dtype=np.int32)
    scale = 1.0 / np.sqrt(hd)
    out = np.empty_like(q)
    flops = 4.0 * ns * per * N_HEAD * n_kv * hd
    row = {"n_seqs": ns, "n_seq_tokens": per, "n_kv": n_kv, "head_dim": hd, "n_head": N_HEAD,
           "n_head_kv": N_HEAD_KV, "causal": causal, "flops": flops}
    t = best_time(lambda: kernels.attention(q, k, v, streams, mask, scale=scale, n_threads=threads, out=out))
    row["ubatch_us"] = t * 1e6
    ref = None
    if with_numpy:
        row["numpy_us"] = best_time(lambda: numpy_attention(q, k, v, mask, scale), min_reps=1, budget=0.2) * 1e6
        ref = numpy_attention(q, k, v, mask, scale)
        row["max_abs_diff_vs_numpy"] = float(np.abs(ref - out).max())
    if torch is not None:
        tq = torch.from_numpy(q).permute(0, 2, 1, 3).contiguous()          # [ns, H, per, d]
        tk = torch.from_numpy(k).permute(0, 2, 1, 3).contiguous()          # [ns, Hkv, n_kv, d]
        tv = torch.from_numpy(v).permute(0, 2, 1, 3).contiguous()
        tm = torch.from_numpy(mask)[:, None]                               # [ns, 1, per, n_kv]
        with torch.inference_mode():
            f_mask = lambda: F.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm, scale=scale, enable_gqa=True)
            row["torch_us"] = best_time(f_mask) * 1e6
            if not causal:  # torch's best case: no mask tensor at all
                f_nomask = lambda: F.scaled_dot_product_attention(tq, tk, tv, scale=scale, enable_gqa=True)
                row["torch_nomask_us"] = best_time(f_nomask) * 1e6
            else:
                f_causal = lambda: F.scaled_dot_product_attention(tq, tk, tv, is_causal=True, scale=scale,
                                                                  enable_gqa=True)
                row["torch_nomask_us"] = best_time(f_causal) * 1e6
            row["max_abs_diff_vs_torch"] = float(np.abs(f_mask().permute(0, 2, 1, 3).numpy() - out).max())
    for key in ("ubatch", "numpy", "torch", "torch_nomask"):
        if key + "_us" in row:
            row[key + "_gflops"] = flops / (row[key + "_us"] * 1e-6) / 1e9
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "results_attention.json"))
    ap.add_argument("--quick", action="store_true", help="a few small shapes only")
    args = ap.parse_args()
    if torch is not None:
        torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    cases = []
    seqs = (1, 8) if args.quick else (1, 4, 16, 64)
    kvs = (256, 1024) if args.quick else (256, 1024, 4096)
    for hd in (64, 128):
        for ns in seqs:
            for n_kv in kvs:
                cases.append((ns, 1, n_kv, hd, False))
    cases.append((1, 512, 512, 128, True))
    if not args.quick:
        cases.append((1, 512, 512, 64, True))
    rows = []
    hdr = (f"{'shape':<34}{'ubatch µs':>11}{'GF/s':>7}{'numpy µs':>11}{'x np':>7}{'torch µs':>11}"
           f"{'x torch':>8}{'torch nomask':>13}")
    print(f"threads={args.threads} torch={'none' if torch is None else torch.__version__} "
          f"numpy={np.__version__} cpu={platform.processor() or platform.machine()}")
    print(hdr)
    for ns, per, n_kv, hd, causal in cases:
        big = ns * n_kv * N_HEAD * hd * 4 > 2**30  # numpy would materialise >1 GiB of repeated K
        r = run_case(rng, ns, per, n_kv, hd, causal, args.threads, with_numpy=not big)
        rows.append(r)
        shape = f"{'prefill' if causal else 'decode'} s={ns} t={per} kv={n_kv} d={hd}"
        np_us = r.get("numpy_us", float("nan"))
        t_us = r.get("torch_us", float("nan"))
        t2 = r.get("torch_nomask_us", float("nan"))
        print(f"{shape:<34}{r['ubatch_us']:>11.1f}{r['ubatch_gflops']:>7.1f}{np_us:>11.1f}"
              f"{np_us / r['ubatch_us']:>7.1f}{t_us:>11.1f}{t_us / r['ubatch_us']:>8.2f}{t2:>13.1f}", flush=True)
    meta = {"threads": args.threads, "torch": None if torch is None else torch.__version__,
            "numpy": np.__version__, "machine": platform.machine(), "processor": platform.processor(),
            "n_head": N_HEAD, "n_head_kv": N_HEAD_KV, "kv_type": "f32"}
    with open(args.json, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
