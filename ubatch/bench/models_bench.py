"""Real-model throughput beside llama.cpp: prefill of 512 tokens and continuous decode of B = 1, 4, 16, 32
sequences (128-token prompts, 32 timed steps of one token per sequence), per-sequence and unified KV,
n_threads 2, f32 K/V — the workloads and the "f32" preset of llama.cpp's recorded decode benchmark
(ubatch/bench/data/realmodel_llama_cpp_decode.json, package data). llama.cpp is run in the same process through llama-cpp-python's
low-level API when it is installed (--llama-cpp live, the default when importable), else its recorded figures
are used. tokens/s = tokens processed / median wall time over --reps; ratio = ubatch / llama.cpp.

usage: python bench/bench_models.py [--models gemma3-270m,qwen2.5-0.5b] [--reps 3] [--batches 1,4,16,32]
                                    [--llama-cpp auto|live|json] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Dict, List, Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REF_JSON = os.path.join(HERE, "data", "realmodel_llama_cpp_decode.json")
FILES = {"gemma3-270m": "gemma-3-270m-q4_k_m.gguf", "qwen2.5-0.5b": "qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf"}
PROMPT, STEPS, PREFILL = 128, 32, 512
THREADS = 2   # both sides (--threads)


def _ctx_for(B: int, unified: bool) -> dict:
    """The llama.cpp recording's contexts: n_ctx 256 per sequence, n_batch 512 (256 for B = 1)."""
    n_ctx = 256 * B
    nb = 256 if B == 1 else 512
    return dict(n_ctx=n_ctx, n_batch=nb, n_ubatch=nb, n_seq_max=B, kv_unified=unified)


def _prompts(n_vocab: int, B: int, n: int, seed: int = 0) -> List[List[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(100, min(n_vocab, 20000), size=n).tolist() for _ in range(B)]


# ---- ubatch -------------------------------------------------------------------------------------------
def ubatch_prefill(m, reps: int) -> float:
    import ubatch
    toks = _prompts(m.n_vocab, 1, PREFILL)[0]
    times = []
    for _ in range(reps):
        ctx = ubatch.Context(m, n_ctx=PREFILL, n_batch=PREFILL, n_ubatch=PREFILL, n_threads=THREADS)
        b = ubatch.Batch.from_arrays(tokens=toks, pos=list(range(PREFILL)), seq_ids=[0] * PREFILL,
                                     output=[0] * (PREFILL - 1) + [1])
        t = time.perf_counter()
        ctx.decode(b)
        times.append(time.perf_counter() - t)
    return PREFILL / statistics.median(times)


def ubatch_decode(m, B: int, unified: bool, reps: int, shared: bool = False) -> float:
    import ubatch
    prompts = _prompts(m.n_vocab, B, PROMPT)
    times = []
    for _ in range(reps):
        ctx = ubatch.Context(m, n_threads=THREADS, **_ctx_for(B, unified))
        for s, p in enumerate(prompts[:1] if shared else prompts):   # prompts untimed, one call per sequence
            ctx.decode(ubatch.Batch.from_arrays(tokens=p, pos=list(range(PROMPT)), seq_ids=[s] * PROMPT,
                                                output=[0] * (PROMPT - 1) + [1]))
        if shared:
            for s in range(1, B):
                ctx.memory.seq_cp(0, s)
        last = [int(np.argmax(ctx.get_logits_ith(-1)))] * B
        t = time.perf_counter()
        for step in range(STEPS):
            b = ubatch.Batch.from_arrays(tokens=last, pos=[PROMPT + step] * B, seq_ids=list(range(B)),
                                         output=[1] * B)
            ctx.decode(b)
            last = [int(x) for x in np.argmax(ctx.get_logits(), axis=1)]
        times.append(time.perf_counter() - t)
    return B * STEPS / statistics.median(times)


# ---- llama.cpp through llama-cpp-python's low-level API --------------------------------------------------
class LlamaCpp:
    def __init__(self, path: str) -> None:
        import ctypes
        import llama_cpp as L
        self.L = L
        self._quiet = L.llama_log_callback(lambda level, text, user: None)   # kept alive: llama.cpp calls it
        L.llama_log_set(self._quiet, ctypes.c_void_p(0))
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        self.model = L.llama_model_load_from_file(path.encode(), mp)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))

    def _ctx(self, n_ctx: int, n_batch: int, n_ubatch: int, n_seq_max: int, kv_unified: bool):
        L = self.L
        cp = L.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = n_ctx, n_batch, n_ubatch, n_seq_max
        cp.n_threads = cp.n_threads_batch = THREADS
        cp.type_k = cp.type_v = L.GGML_TYPE_F32
        cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        cp.kv_unified = kv_unified
        cp.no_perf = True
        ctx = L.llama_init_from_model(self.model, cp)
        if not ctx:
            raise RuntimeError("llama.cpp could not create the context")
        return ctx

    def _batch(self, toks, pos, seqs, outs):
        L = self.L
        b = L.llama_batch_init(len(toks), 0, 1)
        for i, (t, p, s, o) in enumerate(zip(toks, pos, seqs, outs)):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = t, p, 1, o
            b.seq_id[i][0] = s
        b.n_tokens = len(toks)
        return b

    def prefill(self, reps: int) -> float:
        L = self.L
        toks = _prompts(self.n_vocab, 1, PREFILL)[0]
        times = []
        for _ in range(reps):
            ctx = self._ctx(PREFILL, PREFILL, PREFILL, 1, False)
            b = self._batch(toks, range(PREFILL), [0] * PREFILL, [0] * (PREFILL - 1) + [1])
            t = time.perf_counter()
            rc = L.llama_decode(ctx, b)
            times.append(time.perf_counter() - t)
            L.llama_batch_free(b)
            L.llama_free(ctx)
            assert rc == 0, rc
        return PREFILL / statistics.median(times)

    def decode(self, B: int, unified: bool, reps: int, shared: bool = False) -> float:
        L = self.L
        prompts = _prompts(self.n_vocab, B, PROMPT)
        times = []
        for _ in range(reps):
            c = _ctx_for(B, unified)
            ctx = self._ctx(c["n_ctx"], c["n_batch"], c["n_ubatch"], B, unified)
            for s, p in enumerate(prompts[:1] if shared else prompts):
                b = self._batch(p, range(PROMPT), [s] * PROMPT, [0] * (PROMPT - 1) + [1])
                assert L.llama_decode(ctx, b) == 0
                L.llama_batch_free(b)
            if shared:
                mem = L.llama_get_memory(ctx)
                for s in range(1, B):
                    L.llama_memory_seq_cp(mem, 0, s, -1, -1)
            last = [0] * B
            t = time.perf_counter()
            for step in range(STEPS):
                b = self._batch(last, [PROMPT + step] * B, list(range(B)), [1] * B)
                assert L.llama_decode(ctx, b) == 0
                for i in range(B):
                    row = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), shape=(self.n_vocab,))
                    last[i] = int(np.argmax(row))
                L.llama_batch_free(b)
            times.append(time.perf_counter() - t)
            L.llama_free(ctx)
        return B * STEPS / statistics.median(times)


def recorded(model_name: str) -> Optional[dict]:
    """llama.cpp's recorded f32-preset figures for a model: {'prefill': tok/s, (B, unified): tok/s}."""
    path = REF_JSON
    if not os.path.exists(path):
        return None
    with open(path) as f:
        d = json.load(f)
    for r in d["results"]:
        if r["model"] == FILES[model_name] and r["preset"] == "f32":
            out = {"prefill": r["prefill"]["tok_s"]}
            for x in r["decode"]:
                out[(x["B"], x["kv_unified"])] = x["tok_s"]
            return out
    return None


def cpu_info() -> dict:
    """The CPU model name, its SIMD flags that pick a kernel back-end, and the back-end ubatch runs."""
    from ubatch.compute import backends as kb
    model, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model == "unknown CPU":
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    keep = ["avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512_vnni"]
    return {"model": model, "count": os.cpu_count(), "flags": [f for f in keep if f in flags],
            "backend": kb.active_backend(), "backends": kb.backends()}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="ubatch bench models", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="gemma3-270m,qwen2.5-0.5b")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batches", default="1,4,16,32")
    ap.add_argument("--llama-cpp", choices=("auto", "live", "json"), default="auto")
    ap.add_argument("--json", default=None, help="write the rows here")
    ap.add_argument("--quant", default=None, help="time a copy of each model re-quantised by llama.cpp to this file "
                    "type (IQ4_XS, IQ3_S, ...: ubatch.bench.quantised) instead of the file itself")
    ap.add_argument("--threads", type=int, default=2, help="threads of both sides (default 2; 1 on a machine "
                    "whose cores are oversubscribed: llama.cpp's spinning thread barrier collapses there)")
    ap.add_argument("--shared-prompt", action="store_true",
                    help="decode one 128-token prompt and seq_cp it to the B sequences (both sides): the same "
                         "decode work per step with per-seq KV (each stream holds its copy), less attention work "
                         "with unified KV (shared cells); saves the B x 128 prompt tokens on a busy machine")
    a = ap.parse_args(argv)
    global THREADS
    THREADS = a.threads
    from ubatch.model import fetch
    from ubatch.model.model import Model
    live_ok = False
    if a.llama_cpp != "json":
        try:
            import llama_cpp  # noqa: F401
            live_ok = True
        except ImportError:
            if a.llama_cpp == "live":
                print("llama-cpp-python is not installed", file=sys.stderr)
                return 2
    rows: List[Dict] = []
    cpu = cpu_info()
    print(f"CPU: {cpu['model']} ({cpu['count']} CPUs; {', '.join(cpu['flags']) or 'no AVX-512 / VNNI flags'}); "
          f"kernel back-end {cpu['backend']}")
    print(f"{'model':14s} {'workload':24s} {'ubatch tok/s':>12s} {'llama.cpp tok/s':>15s} {'ratio':>6s}  source")
    for name in a.models.split(","):
        if a.quant:
            from ubatch.bench import quantised
            path = quantised.path(name, a.quant)
        else:
            path = fetch.path(name)
        m = Model.from_gguf(path)
        ref = {} if a.quant else (recorded(name) or {})
        lc = LlamaCpp(str(path)) if live_ok else None
        work = [("prefill 512", None, None)] + [(f"decode B={B} {'unified' if u else 'per-seq'}", B, u)
                                               for u in (False, True) for B in map(int, a.batches.split(","))]
        for label, B, u in work:
            ours = ubatch_prefill(m, a.reps) if B is None else ubatch_decode(m, B, u, a.reps, a.shared_prompt)
            if lc is not None:
                theirs, src = (lc.prefill(a.reps) if B is None else lc.decode(B, u, a.reps, a.shared_prompt)), "live"
            else:
                theirs, src = ref.get("prefill" if B is None else (B, u)), "json"
            ratio = ours / theirs if theirs else float("nan")
            rows.append(dict(model=name + (f" {a.quant}" if a.quant else ""), workload=label, ubatch_tok_s=round(ours, 2),
                             llama_cpp_tok_s=None if theirs is None else round(theirs, 2), ratio=round(ratio, 3),
                             source=src, recorded_llama_cpp_tok_s=ref.get("prefill" if B is None else (B, u))))
            print(f"{name:14s} {label:24s} {ours:12.1f} {theirs or float('nan'):15.1f} {ratio:6.2f}  {src}",
                  flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "load_avg": os.getloadavg(), "args": vars(a), "cpu": cpu,
                       "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
