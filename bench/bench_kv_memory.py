"""Memory of the K/V cache types: ubatch against llama.cpp (llama-cpp-python) in the same run, on Qwen2.5-Coder
0.5B Q4_K_M (24 layers, 2 kv heads x 64) with n_ctx 8192, for type_k / type_v = f32, f16, q8_0, q4_0 (--types).

Each measurement is a fresh process (RSS is per process), the two libraries alternating per type. A process
loads the model, reads its RSS, makes the context (n_ctx 8192, one sequence, n_batch = n_ubatch = 512, flash
attention on: llama.cpp needs it for a quantised V), reads its RSS, decodes --prompt random tokens (the same
ids for both), and reports: the K/V bytes as the library states them (ubatch: the K/V arrays it allocated;
llama.cpp: its "llama_kv_cache: size = ... MiB" log line), VmRSS after the model, after the context and after
the decode, and VmHWM (the peak).

    python bench/bench_kv_memory.py [--prompt 512] [--types f32,f16,q8_0,q4_0] [--json bench/results_kv_memory.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time

N_CTX = 8192
MODEL = "qwen2.5-0.5b"


def _status() -> dict:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0]) / 1024.0        # MiB
    return out


def _tokens(n: int, n_vocab: int) -> list:
    import numpy as np
    return np.random.default_rng(8192).integers(100, min(n_vocab, 30000), n).tolist()


def child_ubatch(t: str, n_prompt: int) -> dict:
    import ubatch
    from ubatch import Batch
    from ubatch.model import fetch
    m = ubatch.Model.from_gguf(fetch.path(MODEL))
    r0 = _status()["VmRSS"]
    ctx = ubatch.Context(m, n_ctx=N_CTX, n_batch=512, n_ubatch=512, type_k=t, type_v=t, flash_attn=1)
    r1 = _status()["VmRSS"]
    toks = _tokens(n_prompt, m.n_vocab)
    t0 = time.perf_counter()
    for s in range(0, n_prompt, 512):
        part = toks[s:s + 512]
        out = [0] * len(part)
        out[-1] = int(s + len(part) == n_prompt)
        ctx.decode(Batch.from_arrays(tokens=part, pos=list(range(s, s + len(part))), seq_ids=[[0]] * len(part),
                                     output=out))
    dt = time.perf_counter() - t0
    st = _status()
    kv = sum(a.nbytes for store in ctx._runner.stores for a in list(store.k.values()) + list(store.v.values()))
    return {"kv_mib": kv / 2**20, "rss_model": r0, "rss_ctx": r1, "rss_decode": st["VmRSS"], "hwm": st["VmHWM"],
            "decode_s": dt}


LLAMA_IDS = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "bf16": 30}


def child_llama(t: str, n_prompt: int) -> dict:
    import ctypes
    import llama_cpp as L
    from ubatch.model import fetch
    logs = []

    @L.llama_log_callback
    def on_log(level, text, user):
        logs.append(text.decode("utf-8", "replace"))
    L.llama_log_set(on_log, ctypes.c_void_p())
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    model = L.llama_model_load_from_file(str(fetch.path(MODEL)).encode(), mp)
    r0 = _status()["VmRSS"]
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = N_CTX, 512, 512, 1
    cp.n_threads = cp.n_threads_batch = os.cpu_count() or 1
    cp.type_k = cp.type_v = LLAMA_IDS[t]
    cp.flash_attn_type = 1
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        raise SystemExit(f"llama.cpp refused type {t}")
    r1 = _status()["VmRSS"]
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    toks = _tokens(n_prompt, n_vocab)
    t0 = time.perf_counter()
    for s in range(0, n_prompt, 512):
        part = toks[s:s + 512]
        b = L.llama_batch_init(len(part), 0, 1)
        b.n_tokens = len(part)
        for i, tok in enumerate(part):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = tok, s + i, 1, s + i == n_prompt - 1
            b.seq_id[i][0] = 0
        if L.llama_decode(ctx, b) != 0:
            raise SystemExit("llama_decode failed")
        L.llama_batch_free(b)
    dt = time.perf_counter() - t0
    st = _status()
    text = "".join(logs)
    m = re.search(r"llama_kv_cache: size = +([0-9.]+) MiB", text)
    return {"kv_mib": float(m.group(1)) if m else None, "rss_model": r0, "rss_ctx": r1, "rss_decode": st["VmRSS"],
            "hwm": st["VmHWM"], "decode_s": dt}


def run_child(lib: str, t: str, n_prompt: int) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.pathsep + \
        env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", lib, t, str(n_prompt)],
                       capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{lib} {t} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompt", type=int, default=512, help="tokens decoded into the 8192-cell cache (default 512)")
    ap.add_argument("--types", default="f32,f16,q8_0,q4_0")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--child", nargs=3, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        lib, t, n = a.child
        print(json.dumps((child_ubatch if lib == "ubatch" else child_llama)(t, int(n))))
        return
    load = os.getloadavg()
    rows = []
    for t in a.types.split(","):
        for lib in ("ubatch", "llama.cpp"):
            r = run_child(lib, t, a.prompt)
            r.update(lib=lib, type_k=t, type_v=t)
            rows.append(r)
            print(f"{t:6s} {lib:9s} K/V {r['kv_mib']:7.1f} MiB | RSS model {r['rss_model']:6.0f}  ctx {r['rss_ctx']:6.0f}  "
                  f"after {a.prompt} tokens {r['rss_decode']:6.0f}  peak {r['hwm']:6.0f} MiB | decode {r['decode_s']:.1f} s",
                  flush=True)
    doc = {"model": MODEL, "n_ctx": N_CTX, "n_prompt": a.prompt, "cpu": platform.processor() or platform.machine(),
           "loadavg_before": load, "loadavg_after": os.getloadavg(), "rows": rows,
           "made_by": "python bench/bench_kv_memory.py --prompt %d --types %s" % (a.prompt, a.types)}
    print(f"load average before {load[0]:.2f}, after {doc['loadavg_after'][0]:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
