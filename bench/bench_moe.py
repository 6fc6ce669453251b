"""Mixture-of-experts throughput beside llama.cpp on a synthetic qwen3moe (no download): the tiny_arch writer
(tests/model/tiny_arch.py) with larger sizes — n_embd 768, 12 heads (4 KV) of 64, 6 layers, 32 experts of width 256,
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
sys.path.insert(0, os.path.join(ROOT, "tests", "model"))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))

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


def agreement(m, lc, n_prompts: int = 4, n: int = 64) -> dict:
    """Per-row max |Δlogit| and argmax agreement over n_prompts x n rows: ubatch (n_ubatch 128) against
    llama.cpp (n_ubatch 128), beside llama.cpp's own n_ubatch 1 against its n_ubatch 128."""
    import numpy as np
    import ubatch
    L = lc.L

    def llama(toks, nu):
        cp = L.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = 128, 128, nu, 1
        cp.n_threads = cp.n_threads_batch = 2
        cp.type_k = cp.type_v = L.GGML_TYPE_F32
        cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        c = L.llama_init_from_model(lc.model, cp)
        b = lc._batch(toks, range(n), [0] * n, [1] * n)
        assert L.llama_decode(c, b) == 0
        r = np.stack([np.ctypeslib.as_array(L.llama_get_logits_ith(c, i), shape=(lc.n_vocab,)).copy()
                      for i in range(n)])
        L.llama_batch_free(b)
        L.llama_free(c)
        return r

    d_ub, d_lc, eq_ub, eq_lc = [], [], 0, 0
    for s in range(n_prompts):
        toks = np.random.default_rng(100 + s).integers(0, m.n_vocab, n).tolist()
        ctx = ubatch.Context(m, n_ctx=128, n_ubatch=128, n_threads=2)
        ctx.decode(ubatch.Batch.from_arrays(tokens=toks, pos=list(range(n)), seq_ids=[0] * n, output=[1] * n))
        ub = np.stack([ctx.get_logits_ith(i) for i in range(n)])
        a, b = llama(toks, 128), llama(toks, 1)
        d_ub += np.abs(ub - a).max(axis=1).tolist()
        d_lc += np.abs(b - a).max(axis=1).tolist()
        eq_ub += int((ub.argmax(1) == a.argmax(1)).sum())
        eq_lc += int((b.argmax(1) == a.argmax(1)).sum())
    q = lambda d: dict(p50=float(np.median(d)), p90=float(np.quantile(d, 0.9)), max=float(np.max(d)))  # noqa: E731
    return dict(rows=len(d_ub), ubatch_vs_llama=q(d_ub), llama_u1_vs_u128=q(d_lc), argmax_equal_ubatch=eq_ub,
                argmax_equal_llama_u1=eq_lc)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--type", default="q4_0", choices=("q4_0", "q8_0"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--json", default=None)
    ap.add_argument("--agreement-only", action="store_true")
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
    if a.agreement_only:
        work = []
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
    agree = agreement(m, lc)
    print(f"agreement over {agree['rows']} rows (per-row max |dlogit| p50 / p90 / max; argmax equal): ubatch vs "
          f"llama.cpp {agree['ubatch_vs_llama']['p50']:.3f} / {agree['ubatch_vs_llama']['p90']:.3f} / "
          f"{agree['ubatch_vs_llama']['max']:.3f}, {agree['argmax_equal_ubatch']}; llama.cpp n_ubatch 1 vs 128 "
          f"{agree['llama_u1_vs_u128']['p50']:.3f} / {agree['llama_u1_vs_u128']['p90']:.3f} / "
          f"{agree['llama_u1_vs_u128']['max']:.3f}, {agree['argmax_equal_llama_u1']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(model=os.path.basename(path), sizes=SIZES, type=a.type, reps=a.reps,
                           cpu=mb.cpu_info(), time=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                           rows=rows, agreement=agree), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
