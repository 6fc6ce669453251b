"""KV planning benchmark: µs per planning-only decode (allocator init + split + dry-run placement with
rollback + apply of every ubatch; Context(model=None)) and µs per KQ-mask build.

Cases:
  a  decode step: 64 seqs x 1 token, per-sequence cache 64 x 256 cells, half full (128 tokens per seq)
  b  the same step with a unified cache (one stream of 16384 cells, 8192 used)
  c  prefill: 8 seqs x 512 tokens into an empty 8 x 1024 per-sequence cache (n_ubatch 512)
  mask_a / mask_b / mask_c  the KQ mask of one ubatch of a / b / c alone (one C call into a reused buffer)

Each repetition restores the cache from a snapshot first (not timed). Median of --reps runs.

    python bench/bench_kv.py [--reps 300] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

import ubatch
from ubatch.engine.context import Context


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
    kv._prepare(ubs)
    kv._begin()
    for i in range(ub_index + 1):
        kv._apply(i, ubs[i])
    n_kv = kv._n_kv(ub_index)
    ub = ubs[ub_index]
    pl = kv._placement(ub_index, ub)
    buf = np.empty_like(pl.mask)
    ts = []
    for r in range(warmup + reps):
        t0 = time.perf_counter_ns()
        kv._mask(ub_index, ub, n_kv, out=buf)
        t1 = time.perf_counter_ns()
        if r >= warmup:
            ts.append((t1 - t0) / 1000)
    kv._rollback()
    kv.restore(snap)
    return ts, tuple(buf.shape)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--json", default=None)
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
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    print(json.dumps({k: round(v["us"], 2) for k, v in res.items()}))


if __name__ == "__main__":
    main()
