"""Decode speed of a model re-quantised to another weight type (ubatch.bench.quantised: IQ4_XS, IQ3_S, ...)
beside llama.cpp, made for a loaded machine: B sequences share one 128-token prompt (seq_cp), then STEPS timed
steps of one token per sequence (f32 K/V, per-sequence KV, the workload of ubatch.bench.models_bench with
--shared-prompt); ubatch and llama.cpp are timed ALTERNATELY rep by rep in one process, and each side's figure is
its best rep, by wall time and by process CPU time (with --threads 1 the CPU time is the side's own work, what the
wall time would be on an idle core: other processes' load does not enter it, llama.cpp's spinning thread barrier
has nothing to wait for).

usage: python -m ubatch.bench.types_bench [--models qwen2.5-0.5b,gemma3-270m] [--quant IQ4_XS] [--batches 1,32]
                                          [--reps 3] [--threads 1] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Dict, List, Optional

import numpy as np

from ubatch.bench import models_bench as mb

STEPS = 16


def _ub_decode(m, B: int, steps: int) -> tuple:
    import ubatch
    prompt = mb._prompts(m.n_vocab, 1, mb.PROMPT)[0]
    ctx = ubatch.Context(m, n_threads=mb.THREADS, **mb._ctx_for(B, False))
    ctx.decode(ubatch.Batch.from_arrays(tokens=prompt, pos=list(range(mb.PROMPT)), seq_ids=[0] * mb.PROMPT,
                                        output=[0] * (mb.PROMPT - 1) + [1]))
    for s in range(1, B):
        ctx.memory.seq_cp(0, s, -1, -1)
    last = [0] * B
    w0, c0 = time.perf_counter(), time.process_time()
    for step in range(steps):
        b = ubatch.Batch.from_arrays(tokens=last, pos=[mb.PROMPT + step] * B, seq_ids=list(range(B)), output=[1] * B)
        assert ctx.decode(b) == 0
        last = [int(np.argmax(ctx.get_logits_ith(i))) for i in range(B)]
    return time.perf_counter() - w0, time.process_time() - c0


def _lc_decode(lc, B: int, steps: int) -> tuple:
    L = lc.L
    prompt = mb._prompts(lc.n_vocab, 1, mb.PROMPT)[0]
    c = mb._ctx_for(B, False)
    ctx = lc._ctx(c["n_ctx"], c["n_batch"], c["n_ubatch"], B, False)
    b = lc._batch(prompt, range(mb.PROMPT), [0] * mb.PROMPT, [0] * (mb.PROMPT - 1) + [1])
    assert L.llama_decode(ctx, b) == 0
    L.llama_batch_free(b)
    mem = L.llama_get_memory(ctx)
    for s in range(1, B):
        L.llama_memory_seq_cp(mem, 0, s, -1, -1)
    last = [0] * B
    w0, c0 = time.perf_counter(), time.process_time()
    for step in range(steps):
        b = lc._batch(last, [mb.PROMPT + step] * B, list(range(B)), [1] * B)
        assert L.llama_decode(ctx, b) == 0
        for i in range(B):
            last[i] = int(np.argmax(np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), shape=(lc.n_vocab,))))
        L.llama_batch_free(b)
    out = time.perf_counter() - w0, time.process_time() - c0
    L.llama_free(ctx)
    return out


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ubatch.bench.types_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="qwen2.5-0.5b,gemma3-270m")
    ap.add_argument("--quant", default="IQ4_XS", help="the file type, or none: the original file (a baseline)")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    mb.THREADS = a.threads
    from ubatch.bench import quantised
    from ubatch.model.model import Model
    cpu = mb.cpu_info()
    print(f"CPU: {cpu['model']} ({cpu['count']} CPUs; {', '.join(cpu['flags'])}); back-end {cpu['backend']}; "
          f"threads {a.threads}; load {os.getloadavg()[0]:.1f}")
    print(f"{'model':24s} {'B':>3s} {'ubatch tok/s':>12s} {'llama.cpp':>10s} {'ratio':>6s} | {'cpu: ubatch':>11s} "
          f"{'llama.cpp':>10s} {'ratio':>6s}")
    rows: List[Dict] = []
    for name in a.models.split(","):
        if a.quant in ("", "none"):              # the original file (a baseline for the ratios)
            from ubatch.model import fetch
            path = str(fetch.path(name))
        else:
            path = str(quantised.path(name, a.quant))
        m = Model.from_gguf(path)
        lc = mb.LlamaCpp(path)
        for B in map(int, a.batches.split(",")):
            ub, ll = [], []
            for _ in range(a.reps):          # alternately, rep by rep
                ub.append(_ub_decode(m, B, STEPS))
                ll.append(_lc_decode(lc, B, STEPS))
            n = B * STEPS
            uw, uc = n / min(w for w, _ in ub), n / min(c for _, c in ub)
            lw, lcpu = n / min(w for w, _ in ll), n / min(c for _, c in ll)
            rows.append(dict(model=f"{name} {a.quant}", B=B, ubatch_tok_s=round(uw, 2), llama_cpp_tok_s=round(lw, 2),
                             ratio=round(uw / lw, 3), ubatch_cpu_tok_s=round(uc, 2), llama_cpp_cpu_tok_s=round(lcpu, 2),
                             cpu_ratio=round(uc / lcpu, 3)))
            print(f"{name + ' ' + a.quant:24s} {B:3d} {uw:12.1f} {lw:10.1f} {uw / lw:6.2f} | {uc:11.1f} {lcpu:10.1f} "
                  f"{uc / lcpu:6.2f}", flush=True)
        lc.L.llama_model_free(lc.model)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "args": vars(a), "cpu": cpu, "load_avg": os.getloadavg(),
                       "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
