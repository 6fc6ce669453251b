"""Planning-cost benchmark of the rows' visible-cell lists: the path the decode used before (the KV cache's
dense KQ mask in C, the cells' positions gathered, ops.visible_cells turning the mask back into lists in
C, np.repeat of the row streams, the runner's np.unique check of the placement) against the direct path
(KVCache.visible: one C call writing the lists from the cells' positions and sequence sets), per ubatch,
for n_kv 512 ... 8192.

Cases (each at n_kv = cache size, the cache filled to n_kv - 64 cells, then one ubatch applied):
  decode8    unified cache, 8 sequences interleaved, 8 rows (one token each)
  decode8x   as decode8, but the cells of each sequence out of index order (a cache whose head wrapped)
  streams4   4 per-sequence streams of n_kv cells, 4 rows (one per stream)
  prefill64  unified cache, 1 sequence, a 64-row ubatch at its end

Both paths run on the same cache state, timed alternately (old, new, old, new, ...) in one loop so the
machine's load hits both alike; the median of --reps is reported, and the ratio old / new. The two
paths' lists are checked equal first.

    python bench/bench_visible.py [--reps 200] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

try:
    import ubatch  # noqa: F401  (the installed package, or PYTHONPATH)
except ImportError:   # a source checkout built in place (make build) but not installed
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from ubatch import Batch  # noqa: E402
from ubatch.batch.allocator import BatchAllocator  # noqa: E402
from ubatch.compute import ops  # noqa: E402
from ubatch.memory.kv_cache import KVCache  # noqa: E402

N_KV = (512, 1024, 2048, 4096, 8192)


def _put(kv: KVCache, pos, sids, n_ubatch=512):
    a = BatchAllocator()
    a.init(Batch.from_arrays(tokens=np.zeros(len(pos), np.int32), pos=pos, seq_ids=sids), n_seq_max=kv.n_seq)
    plan = kv.init_batch(a, n_ubatch)
    kv.begin(plan)
    for i in range(len(plan)):
        kv.apply(plan, i)
    return plan


def _fill(kv: KVCache, seqs, per_seq, scramble=False):
    """per_seq tokens of each seq, interleaved round robin; scramble: written in two halves, the later
    positions first (each seq's cells then run against their positions)."""
    order = [(s, p) for p in range(per_seq) for s in seqs]
    if scramble:
        half = len(order) // 2
        order = order[half:] + order[:half]
        for part in (order[:len(order) - half], order[len(order) - half:]):
            for k in range(0, len(part), 512):
                chunk = sorted(part[k:k + 512], key=lambda t: (t[0], t[1]))
                plan = _put(kv, [p for _, p in chunk], [s for s, _ in chunk])
                kv.commit(plan)
        return
    for k in range(0, len(order), 512):
        chunk = order[k:k + 512]
        plan = _put(kv, [p for _, p in chunk], [s for s, _ in chunk])
        kv.commit(plan)


def case(name: str, n_kv: int) -> tuple:
    """(kv, plan) with the case's ubatch 0 applied (transaction open)."""
    if name.startswith("decode8"):
        kv = KVCache(1, n_kv)
        per = (n_kv - 64) // 8
        _fill(kv, range(8), per, scramble=name == "decode8x")
        return kv, _put(kv, [per] * 8, list(range(8)))
    if name == "streams4":
        kv = KVCache(4, n_kv)
        _fill(kv, range(4), n_kv - 64)
        return kv, _put(kv, [n_kv - 64] * 4, list(range(4)))
    kv = KVCache(1, n_kv)
    _fill(kv, [0], n_kv - 128)
    return kv, _put(kv, list(range(n_kv - 128, n_kv - 64)), [0] * 64)


def old_path(kv: KVCache, plan, cell_pos: np.ndarray, place_streams: np.ndarray, cells: np.ndarray):
    """What Context + ModelRunner did per ubatch before: mask, then lists from it, plus the runner's checks
    (the slot read-back, the same in both paths, is left out of both)."""
    mask = kv.mask(plan, 0)
    ns, per, n_kv = mask.shape
    flat = place_streams[:, None].astype(np.int64) * kv.size + cells
    if np.unique(flat).size != flat.size:
        raise AssertionError("duplicate cells")
    pos = np.ascontiguousarray(cell_pos[place_streams.astype(np.intp)][:, :n_kv])
    off, lst = ops.visible_cells(mask, pos)
    return np.repeat(place_streams, per).astype(np.int32), off, lst


def new_path(kv: KVCache, plan):
    return kv.visible(plan, 0)


def cell_positions(kv: KVCache) -> np.ndarray:
    """int32[n_stream, size]: what the runner's KV store tracks for every cell (-1 = never written)."""
    out = np.full((kv.n_stream, kv.size), -1, np.int32)
    for s in range(kv.n_stream):
        a = kv.cell_arrays(s)
        out[s, a["index"]] = a["pos"]
    return out


def run(reps: int) -> list:
    rows = []
    for name in ("decode8", "decode8x", "streams4", "prefill64"):
        for n_kv in N_KV:
            kv, plan = case(name, n_kv)
            cp = cell_positions(kv)
            pl = kv.placement(plan, 0)
            slot = (pl.streams, pl.cells)
            a, b = old_path(kv, plan, cp, *slot), new_path(kv, plan)
            for x, y in zip(a, b):
                assert np.array_equal(x, y), (name, n_kv)
            t_old, t_new = [], []
            for r in range(reps + 10):
                t0 = time.perf_counter_ns()
                old_path(kv, plan, cp, *slot)
                t1 = time.perf_counter_ns()
                new_path(kv, plan)
                t2 = time.perf_counter_ns()
                if r >= 10:
                    t_old.append((t1 - t0) / 1e3)
                    t_new.append((t2 - t1) / 1e3)
            o, n = statistics.median(t_old), statistics.median(t_new)
            rows.append({"case": name, "n_kv": n_kv, "rows": int(plan.ubatches[0].n_tokens),
                         "visible_cells": int(b[1][-1]), "old_us": o, "new_us": n, "ratio": o / n})
            print(f"{name:10s} {n_kv:6d} {rows[-1]['rows']:5d} {rows[-1]['visible_cells']:8d} "
                  f"{o:9.1f} {n:9.1f} {o / n:7.2f}x", flush=True)
            kv.rollback(plan)
            kv.close()
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    print(f"{'case':10s} {'n_kv':>6s} {'rows':>5s} {'visible':>8s} {'old µs':>9s} {'new µs':>9s} {'old/new':>8s}")
    rows = run(args.reps)
    meta = {"machine": platform.machine(), "processor": platform.processor(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "reps": args.reps, "load_avg": os.getloadavg()}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
