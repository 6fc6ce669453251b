"""Mixture-of-experts throughput beside llama.cpp on a synthetic qwen3moe (no download): the tiny_arch writer
(tests/tiny_arch.py) with larger sizes — n_embd 768, 12 heads (4 KV) of 64, 6 layers, 32 experts of width 256,
top-4, normalised weights, Q4_0 or Q8_0 matrices, the 260-token vocabulary — written once into
~/.cache/ubatch/bench_moe/. Workloads of bench_models.py (ubatch/bench/models_bench.py): prefill of 512
tokens, decode of B sequences after 128-token prompts (32 timed steps), per-sequence KV, 2 threads, f32 K/V,
no flash attention. Paired: each repetition times ubatch then llama.cpp (llama-cpp-python 0.3.36 in the same
process); tokens/s from the medians, ratio = ubatch / llama.cpp.

usage: python bench/bench_moe.py [--type q4_0|q8_0] [--reps 3] [--batches 1,16] [--json OUT]"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

SIZES = dict(n_embd=768, n_head=12, n_head_kv=4, head_dim=64, n_layer=6, n_ff=1024, n_expert=32, n_used=4,
             n_ff_exp=256)


def model_path(wtype: str) -> str:
    import tiny_arch
    d = os.path.join(os.path.expanduser("~/.cache/ubatch"), "bench_moe")
    os.makedirs(d, exist_ok=True)
    p = os.path.join(d, f"qwen3moe-bench-{wtype}.gguf")
    if not os.path.exists(p):
        tmp = p + ".part"
        tiny_arch.write("qwen3moe-f32", tmp, wtype=wtype, **SIZES)
        os.replace(tmp, p)
    return p


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--type", default="q4_0", choices=("q4_0", "q8_0"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    from ubatch.bench import models_bench as mb
    from ubatch.model.model import Model
    path = model_path(a.type)
    m = Model.from_gguf(path)
    lc = mb.LlamaCpp(path)
    work = [("prefill 512", lambda: mb.ubatch_prefill(m, 1), lambda: lc.prefill(1))]
    for B in (int(x) for x in a.batches.split(",")):
        work.append((f"decode B={B}", lambda B=B: mb.ubatch_decode(m, B, False, 1),
                     lambda B=B: lc.decode(B, False, 1)))
    rows = []
    print(f"model {os.path.basename(path)} ({os.path.getsize(path) / 2**20:.1f} MiB), {a.reps} paired reps, "
          f"CPU {mb.cpu_info().get('model', '?')}")
    print("| workload | ubatch tok/s | llama.cpp tok/s | ubatch / llama.cpp |\n|---|---:|---:|---:|")
    for name, ub, ll in work:
        u, l = [], []
        for _ in range(a.reps):
            u.append(ub())
            l.append(ll())
        mu, ml = statistics.median(u), statistics.median(l)
        rows.append(dict(workload=name, ubatch=mu, llama_cpp=ml, ratio=mu / ml, ubatch_all=u, llama_cpp_all=l))
        print(f"| {name} | {mu:.1f} | {ml:.1f} | {mu / ml:.2f} |", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(model=os.path.basename(path), sizes=SIZES, type=a.type, reps=a.reps,
                           cpu=mb.cpu_info(), time=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                           rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
