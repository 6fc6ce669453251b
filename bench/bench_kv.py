"""KV planning benchmark: µs per planning-only decode (allocator init + split + dry-run placement with
rollback + apply of every ubatch; Context(model=None)) and µs per KQ-mask build.

Cases:
  a  decode step: 64 seqs x 1 token, per-sequence cache 64 x 256 cells, half full (128 tokens per seq)
  b  the same step with a unified cache (one stream of 16384 cells, 8192 used)
  c  prefill: 8 seqs x 512 tokens into an empty 8 x 1024 per-sequence cache (n_ubatch 512)
  mask_a / mask_b / mask_c  the KQ mask of one ubatch of a / b / c alone (one C call into a reused buffer)
  sweep  the n_ctx sweep: the same 64 seqs x 1 token planning-only step at n_ctx 4,096 ... 262,144, unified
         (one stream of n_ctx cells) and per-sequence (64 streams of n_ctx / 64 cells), each sequence holding
         32 tokens; between repetitions the step's tokens are removed again with seq_rm (not timed), so
         every step sees the same cache, as a decode loop that rewinds would. The planning cost must
         follow the batch, not the cache: the ratio to n_ctx 4,096 is printed.

Cases a-c restore the cache from a snapshot before each repetition (not timed). Median of --reps runs.

    python bench/bench_kv.py [--reps 300] [--json out.json] [--no-sweep]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import os
import sys

import numpy as np

try:
    import ubatch  # the installed package, or PYTHONPATH
except ImportError:   # a source checkout built in place (make build) but not installed
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import ubatch
from ubatch.engine.context import Context  # noqa: E402


def _batch(seqs, n, start):
    pos, sids, out = [], [], []
    for k in range(n):                          # interleaved: one token of every seq per position
        for s in seqs:
            pos.append(start + k); sids.append(s); out.append(1 if k == n - 1 else 0)
    toks = [(7919 * s + 104729 * p + 17) % 32000 for s, p in zip(sids, pos)]
    return ubatch.Batch.from_arrays(tokens=toks, pos=pos, seq_ids=sids, output=out)


def _contiguous(seqs, n, start):
    pos, sids, out = [], [], []
    for s in seqs:
        pos += list(range(start, start + n)); sids += [s] * n; out += [0] * (n - 1) + [1]
    toks = [(7919 * s + 104729 * p + 17) % 32000 for s, p in zip(sids, pos)]
    return ubatch.Batch.from_arrays(tokens=toks, pos=pos, seq_ids=sids, output=out)


def time_decode(ctx, batch, reps, warmup=20):
    kv = ctx.memory
    snap = kv.snapshot()
    ts = []
    for r in range(warmup + reps):
        kv.restore(snap)
        t0 = time.perf_counter_ns()
        ctx.decode(batch)
        t1 = time.perf_counter_ns()
        if r >= warmup:
            ts.append((t1 - t0) / 1000)
    kv.restore(snap)
    return ts


def time_mask(ctx, batch, reps, ub_index=0, warmup=20):
    """Places the batch, then re-builds the mask of ubatch `ub_index` (as applied) reps times."""
    kv = ctx.memory
    snap = kv.snapshot()
    ctx.decode(batch)
    ubs = ctx.last_ubatches
    kv.restore(snap)
    plan = kv.prepare(ubs)    # the memory protocol, driven by hand on the batch's own ubatches
    kv.begin(plan)
    for i in range(ub_index + 1):
        kv.apply(plan, i)
    buf = kv.mask(plan, ub_index)
    ts = []
    for r in range(warmup + reps):
        t0 = time.perf_counter_ns()
        kv.mask(plan, ub_index, out=buf)
        t1 = time.perf_counter_ns()
        if r >= warmup:
            ts.append((t1 - t0) / 1000)
    kv.rollback(plan)
    kv.restore(snap)
    return ts, tuple(buf.shape)


SWEEP_N_CTX = (4096, 16384, 65536, 262144)


def time_step_rewound(ctx, step, n_seq, start, reps, warmup=20):
    """µs per planning-only decode of `step`, its tokens removed again (seq_rm, not timed) after each."""
    kv = ctx.memory
    ts = []
    for r in range(warmup + reps):
        t0 = time.perf_counter_ns()
        ctx.decode(step)
        t1 = time.perf_counter_ns()
        for s in range(n_seq):
            kv.seq_rm(s, start, -1)
        if r >= warmup:
            ts.append((t1 - t0) / 1000)
    return ts


def sweep(reps: int) -> dict:
    """The n_ctx sweep (see the module docstring): {"unified" | "per_seq": {n_ctx: µs}}."""
    out = {}
    for kind, unified in (("unified", True), ("per_seq", False)):
        row = {}
        for n_ctx in SWEEP_N_CTX:
            c = Context(n_ctx=n_ctx, n_batch=8192, n_ubatch=512, n_seq_max=64, kv_unified=unified)
            c.decode(_contiguous(range(64), 32, 0))
            row[n_ctx] = statistics.median(time_step_rewound(c, _batch(range(64), 1, 32), 64, 32, reps))
            c.close()
        out[kind] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--json", default=None)
    ap.add_argument("--no-sweep", action="store_true", help="skip the n_ctx sweep")
    args = ap.parse_args()
    res = {}

    # (a) per-sequence streams
    ca = Context(n_ctx=64 * 256, n_batch=8192, n_ubatch=512, n_seq_max=64)
    ca.decode(_contiguous(range(64), 128, 0))
    step = _batch(range(64), 1, 128)
    res["a_decode_64x1_streams"] = {"us": statistics.median(time_decode(ca, step, args.reps)),
                                    "ubatches": len(ca.last_ubatches)}
    ts, shape = time_mask(ca, step, args.reps)
    res["mask_a"] = {"us": statistics.median(ts), "shape": shape}

    # (b) unified
    cb = Context(n_ctx=64 * 256, n_batch=8192, n_ubatch=512, n_seq_max=64, kv_unified=True)
    cb.decode(_contiguous(range(64), 128, 0))
    res["b_decode_64x1_unified"] = {"us": statistics.median(time_decode(cb, step, args.reps)),
                                    "ubatches": len(cb.last_ubatches)}
    ts, shape = time_mask(cb, step, args.reps)
    res["mask_b"] = {"us": statistics.median(ts), "shape": shape}

    # (c) prefill 8 x 512
    cc = Context(n_ctx=8 * 1024, n_batch=4096, n_ubatch=512, n_seq_max=8)
    pre = _contiguous(range(8), 512, 0)
    reps_c = max(20, args.reps // 5)
    res["c_prefill_8x512_streams"] = {"us": statistics.median(time_decode(cc, pre, reps_c)),
                                      "ubatches": len(cc.last_ubatches)}
    ts, shape = time_mask(cc, pre, reps_c, ub_index=7)
    res["mask_c"] = {"us": statistics.median(ts), "shape": shape}

    print(f"{'case':28s} {'median µs':>10s}  detail")
    for k, v in res.items():
        detail = f"{v['ubatches']} ubatch(es)" if "ubatches" in v else f"mask {v['shape']}"
        print(f"{k:28s} {v['us']:10.1f}  {detail}")
    summary = {k: round(v["us"], 2) for k, v in res.items()}
    if not args.no_sweep:
        sw = sweep(max(50, args.reps // 3))
        print("\nn_ctx sweep: 64 seqs x 1 token planning-only step (µs, median; ratio to n_ctx 4096)")
        print(f"{'cache':10s} " + " ".join(f"{n:>16d}" for n in SWEEP_N_CTX))
        for kind, row in sw.items():
            base = row[SWEEP_N_CTX[0]]
            print(f"{kind:10s} " + " ".join(f"{row[n]:9.1f} ({row[n] / base:4.2f}x)" for n in SWEEP_N_CTX))
        res["sweep"] = {k: {str(n): round(v, 2) for n, v in row.items()} for k, row in sw.items()}
        summary["sweep"] = res["sweep"]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
