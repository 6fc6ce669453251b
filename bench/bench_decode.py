"""Decode-loop benchmark: tokens/s of full continuous-batching steps on the embedded tiny model, and where
the time goes — planning (allocator init + split + KV placement: find_slot dry run, apply, slot read-back and
the rows' visible-cell lists) vs computing (ModelRunner.compute) vs the rest.

Each workload is a seeded stream of random-token prompts generated greedily by LLMEngine (the `ubatch run` loop,
prefix cache off).
Timing is by instrumentation only: the methods Context.decode calls (allocator.init, the memory protocol's
KVCache.init_batch (split + prepare) / apply / placement (incl. the visible lists), ModelRunner.compute / update)
and the engine's step are
wrapped on the instances with perf_counter_ns timers; the library is not modified. Columns:

  tok/s      decoded tokens (prompt + fed-back samples) / total step time
  µs/step    mean time of one scheduler step (build the batch, decode, sample, retire)
  plan %     init + init_batch (split + prepare) + apply + placement (incl. visible), share of the step time
  compute %  ModelRunner.compute (forward pass incl. C attention) share
  glue %     the rest of Context.decode (Batch/argument checks, output bookkeeping)
  serve %    outside decode: scheduling and batch building, Batch.from_arrays, sampling, detokenisation,
             statistics

One warm-up run, then --reps runs; the run with the median step time is reported.

BLAS threads: the model's matmuls go through numpy's BLAS. On a shared 2-core machine OpenBLAS's own
threads (on top of the C attention's threads) made prefill steps ~20x slower, so this benchmark pins BLAS
to --blas-threads (default 1) through OPENBLAS_NUM_THREADS / OMP_NUM_THREADS / MKL_NUM_THREADS before numpy is
imported; --blas-threads 0 leaves the environment alone.

usage: python bench/bench_decode.py [--reps 3] [--threads N] [--blas-threads 1] [--json PATH] [--quick]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
import sys
from collections import defaultdict

BLAS_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")

WORKLOADS = [
    # name, requests, parallel, prompt, gen, n_ctx, n_batch, n_ubatch, unified
    ("default (ubatch run)", 32, 4, (8, 48), (8, 32), 1024, 64, 32, False),
    ("default, unified KV", 32, 4, (8, 48), (8, 32), 512, 64, 32, True),
    ("16 seqs, streams", 64, 16, (8, 48), (16, 64), 4096, 128, 64, False),
    ("16 seqs, unified", 64, 16, (8, 48), (16, 64), 2048, 128, 64, True),
    ("decode-heavy 32 seqs", 48, 32, (4, 8), (64, 128), 8192, 256, 64, True),
    ("prefill-heavy 8 seqs", 32, 8, (96, 200), (2, 4), 2048, 256, 128, False),
]

PLAN = ("init", "init_batch", "kv_apply", "placement")


class Timers:
    def __init__(self) -> None:
        self.ns = defaultdict(int)
        self.calls = defaultdict(int)

    def wrap(self, obj, name: str, key: str) -> None:
        orig = getattr(obj, name)
        ns, calls = self.ns, self.calls

        def timed(*a, **k):
            t = time.perf_counter_ns()
            try:
                return orig(*a, **k)
            finally:
                ns[key] += time.perf_counter_ns() - t
                calls[key] += 1

        setattr(obj, name, timed)


def instrument(ctx, engine) -> Timers:
    T = Timers()
    kv = ctx.memory
    T.wrap(ctx, "decode", "decode")
    T.wrap(kv, "init_batch", "init_batch")      # the memory's split + dry run
    T.wrap(kv, "prepare", "kv_prepare")         # inside init_batch
    T.wrap(kv, "apply", "kv_apply")
    T.wrap(kv, "placement", "placement")
    T.wrap(ctx._runner, "compute", "compute")
    T.wrap(ctx._runner, "update", "update")
    T.wrap(engine, "step", "step")
    make_alloc = ctx._allocator
    done = set()

    def allocator(batch):
        a = make_alloc(batch)
        if id(a) not in done:
            done.add(id(a))
            T.wrap(a, "init", "init")
        return a

    ctx._allocator = allocator
    return T


def requests(n: int, prompt_len, gen_len, n_vocab: int, seed: int = 0):
    """n (prompt token ids, generation length) pairs, lengths uniform in the inclusive ranges, from one seeded
    generator (the stream this benchmark has always used)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        lp = int(rng.integers(prompt_len[0], prompt_len[1] + 1))
        lg = int(rng.integers(gen_len[0], gen_len[1] + 1))
        out.append((rng.integers(0, n_vocab, lp).astype(np.int32), lg))
    return out


def run_once(model, wl, threads):
    from ubatch.engine.llm_engine import LLMEngine, SamplingParams

    name, n_req, par, pl, gl, n_ctx, n_batch, n_ubatch, unified = wl
    eng = LLMEngine(model, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_ubatch, n_seq_max=par, kv_unified=unified,
                    n_threads=threads, enable_prefix_caching=False)    # random prompts share no prefix anyway
    ctx = eng.ctx
    for prompt, gen in requests(n_req, pl, gl, model.n_vocab):
        eng.add_request(prompt, SamplingParams(max_tokens=gen, temperature=0.0, ignore_eos=True))
    T = instrument(ctx, eng)
    while eng.has_unfinished_requests():
        eng.step()
    st = eng.statistics
    ns = dict(T.ns)
    step = ns.get("step", 0)
    dec = ns.get("decode", 0)
    plan = sum(ns.get(k, 0) for k in PLAN)
    inside = plan + ns.get("compute", 0) + ns.get("update", 0)
    tokens = st.prompt_tokens + st.decode_tokens
    return {
        "workload": name, "requests": n_req, "parallel": par, "prompt_len": list(pl), "gen_len": list(gl),
        "n_ctx": ctx.n_ctx, "n_batch": ctx.n_batch, "n_ubatch": ctx.n_ubatch, "kv_unified": unified,
        "steps": st.steps, "decode_calls": st.decode_calls, "ubatches": st.n_ubatches,
        "retries": st.retries, "preemptions": st.preemptions, "prompt_tokens": st.prompt_tokens,
        "decoded_tokens": tokens, "generated_tokens": st.generated_tokens,
        "mean_fill": st.to_dict()["mean_fill"],
        "step_s": step / 1e9, "tokens_per_s": tokens / (step / 1e9), "us_per_step": step / 1e3 / max(st.steps, 1),
        "us_per_ubatch_plan": plan / 1e3 / max(st.n_ubatches, 1),
        "us_per_ubatch_compute": ns.get("compute", 0) / 1e3 / max(st.n_ubatches, 1),
        "time_us": {k: v / 1e3 for k, v in sorted(ns.items())},
        "share": {"plan": plan / step, "compute": ns.get("compute", 0) / step, "kv_update": ns.get("update", 0) / step,
                  "decode_glue": (dec - inside) / step, "serve": (step - dec) / step,
                  **{f"plan.{k}": ns.get(k, 0) / step for k in PLAN}},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench_decode.py", description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="attention threads (default: all cores)")
    ap.add_argument("--json", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results_decode.json"))
    ap.add_argument("--blas-threads", type=int, default=1,
                    help="BLAS threads for the matmuls (default 1; 0 = leave the environment alone)")
    ap.add_argument("--quick", action="store_true", help="the first two workloads, one repetition")
    args = ap.parse_args(argv)
    if "numpy" in sys.modules and args.blas_threads > 0 and any(os.environ.get(v) != str(args.blas_threads)
                                                                 for v in BLAS_VARS[:1]):
        print(f"warning: numpy is already loaded, so BLAS threads cannot be pinned to {args.blas_threads} here; "
              f"set OPENBLAS_NUM_THREADS={args.blas_threads} in the environment (or run python bench/bench_decode.py)",
              file=sys.stderr)
    if args.blas_threads > 0:
        for var in BLAS_VARS:
            os.environ[var] = str(args.blas_threads)
    try:
        import ubatch  # noqa: F401
    except ImportError:   # a source checkout that was built in place but not installed
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from ubatch.models import tiny_llama
    model = tiny_llama()
    wls = WORKLOADS[:2] if args.quick else WORKLOADS
    reps = 1 if args.quick else max(1, args.reps)
    rows = []
    hdr = (f"{'workload':24s} {'par':>3s} {'uni':>3s} {'steps':>5s} {'ubs':>5s} {'tokens':>6s} {'tok/s':>8s} "
           f"{'us/step':>8s} {'plan%':>6s} {'comp%':>6s} {'glue%':>6s} {'serve%':>6s}  plan: init/init_batch/apply/place %")
    print(hdr)
    print("-" * len(hdr))
    for wl in wls:
        run_once(model, wl, args.threads)                      # warm-up
        runs = sorted((run_once(model, wl, args.threads) for _ in range(reps)), key=lambda r: r["step_s"])
        r = runs[len(runs) // 2]
        r["step_s_all"] = [x["step_s"] for x in runs]
        rows.append(r)
        s = r["share"]
        parts = "/".join(f"{100 * s['plan.' + k]:.1f}" for k in PLAN)
        print(f"{r['workload']:24s} {r['parallel']:3d} {'yes' if r['kv_unified'] else 'no':>3s} {r['steps']:5d} "
              f"{r['ubatches']:5d} {r['decoded_tokens']:6d} {r['tokens_per_s']:8.0f} {r['us_per_step']:8.0f} "
              f"{100 * s['plan']:6.1f} {100 * s['compute']:6.1f} {100 * s['decode_glue']:6.1f} {100 * s['serve']:6.1f}"
              f"  {parts}")
    meta = {"machine": platform.machine(), "python": platform.python_version(), "cpus": os.cpu_count(),
            "threads": args.threads, "blas_threads": {v: os.environ.get(v) for v in BLAS_VARS}, "reps": reps, "load_avg": os.getloadavg(),
            "model": "tiny-llama-f32.gguf (embedded)",
            "note": "median-time run of reps after one warm-up; shares are of the total scheduler-step time"}
    with open(args.json, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
