"""`ubatch bench generate`: text generation throughput and latency of ubatch.LLM (continuous batching) for 1, 8
and 32 concurrent prompts, side by side with llama-cpp-python's `Llama.create_completion` called once per
prompt, one after the other (what its users do today), when llama-cpp-python is installed.

Per model and concurrency C: C prompts of the shipped set, all queued at t = 0, greedy, max_tokens M (ubatch with
ignore_eos so every request generates M tokens; llama-cpp-python stops at its end-of-generation token, so its
tokens/s counts the tokens it really generated). Reported: wall time, generated tokens/s, time to first token
(p50) and request latency (p50 / p95) measured from t = 0, ubatch's share of time spent sampling, and the ratio
ubatch / llama-cpp-python of tokens/s. Also the sampler alone on 32 rows of the vocabulary (32 x 262,144 for
Gemma) next to the time of one decode step with 32 sequences.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from typing import List, Optional

import numpy as np

DEFAULT_MODELS = ["gemma3-270m", "qwen2.5-0.5b"]


def _percentile(a, q) -> float:
    return float(np.percentile(np.asarray(a, np.float64), q)) if len(a) else 0.0


def _prompts(n: int, seed: int) -> List[str]:
    from ubatch.engine.prompts import make_workload
    return [w.prompt for w in make_workload(n, seed=seed, gen_len=(1, 1))]


def run_ubatch(model, prompts: List[str], max_tokens: int, *, n_threads: Optional[int], kv_unified: bool,
               n_batch: int) -> dict:
    from ubatch.engine.llm_engine import LLMEngine, SamplingParams
    c = len(prompts)
    eng = LLMEngine(model, n_ctx=256 * c if not kv_unified else max(256 * c, 512), n_batch=n_batch, n_ubatch=n_batch,
                    n_seq_max=c, kv_unified=kv_unified, n_threads=n_threads)
    p = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    eng.add_request(prompts[0], SamplingParams(max_tokens=2, temperature=0.0))      # warm-up
    while eng.has_unfinished_requests():
        eng.step()
    st0 = dict(eng.stats())
    s0 = eng.statistics.sample_s
    t0 = time.perf_counter()
    rids = [eng.add_request(x, p) for x in prompts]
    first, done, ntok = {}, {}, 0
    n_steps = 0
    while eng.has_unfinished_requests():
        outs = eng.step()
        n_steps += 1
        now = time.perf_counter() - t0
        for o in outs:
            if o.outputs[0].token_ids_delta and o.request_id not in first:
                first[o.request_id] = now
            if o.finished:
                done[o.request_id] = now
                ntok += len(o.outputs[0].token_ids)
    wall = time.perf_counter() - t0
    st = eng.stats()
    eng.close()
    return {"wall_s": wall, "generated_tokens": ntok, "tok_s": ntok / wall,
            "ttft_p50_s": _percentile([first[r] for r in rids], 50),
            "latency_p50_s": _percentile([done[r] for r in rids], 50),
            "latency_p95_s": _percentile([done[r] for r in rids], 95),
            "decode_calls": st["decode_calls"] - st0["decode_calls"], "steps": n_steps,
            "sample_share": (eng.statistics.sample_s - s0) / wall}


def run_llama_cpp(path: str, prompts: List[str], max_tokens: int, *, n_threads: int) -> dict:
    from llama_cpp import Llama
    llm = Llama(model_path=path, n_ctx=512, n_batch=512, n_threads=n_threads, n_threads_batch=n_threads,
                verbose=False)
    llm.create_completion(prompts[0], max_tokens=2, temperature=0.0)                # warm-up
    t0 = time.perf_counter()
    first, done, ntok = [], [], 0
    for x in prompts:
        got_first = False
        for chunk in llm.create_completion(x, max_tokens=max_tokens, temperature=0.0, stream=True):
            if not got_first:
                first.append(time.perf_counter() - t0)
                got_first = True
            ntok += 1
        done.append(time.perf_counter() - t0)
    wall = time.perf_counter() - t0
    del llm
    return {"wall_s": wall, "generated_tokens": ntok, "tok_s": ntok / wall, "ttft_p50_s": _percentile(first, 50),
            "latency_p50_s": _percentile(done, 50), "latency_p95_s": _percentile(done, 95)}


def sampler_timing(n_vocab: int, rows: int = 32, reps: int = 5) -> dict:
    """Median seconds of one C sampler call on rows x n_vocab random logits: greedy, and the default sampling
    chain (repeat penalty over 64 tokens, top-k 40, top-p 0.95, min-p 0.05, temperature 0.8)."""
    from ubatch.engine.sampling import SampleBatch, SamplingParams, sample
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal((rows, n_vocab)) * 3).astype(np.float32)
    out = {}
    for name, p in (("greedy", SamplingParams()),
                    ("top_k_top_p", SamplingParams(temperature=0.8, repeat_penalty=1.1))):
        sb = SampleBatch()
        for i in range(rows):
            sb.add(i, p.validated(), i, 0, rng.integers(0, n_vocab, 64).astype(np.int32))
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            sample(logits, sb)
            ts.append(time.perf_counter() - t)
        out[name] = float(np.median(ts))
    return out


def _model_path(name: str) -> Optional[str]:
    if os.path.isfile(name):
        return name
    try:
        from ubatch.model import fetch
        return str(fetch.path(name))
    except Exception:
        return None


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="ubatch bench generate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS),
                    help=f"comma-separated model names or GGUF paths (default {','.join(DEFAULT_MODELS)})")
    ap.add_argument("--concurrency", default="1,8,32", help="prompts at once, comma-separated (default 1,8,32)")
    ap.add_argument("--max-tokens", type=int, default=32, help="tokens generated per prompt (default 32)")
    ap.add_argument("--n-batch", type=int, default=512, help="ubatch n_batch = n_ubatch (default 512)")
    ap.add_argument("--kv-unified", action="store_true", help="ubatch with one shared KV stream")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="threads for both (default: all cores)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the prompt draw")
    ap.add_argument("--no-llama-cpp", action="store_true", help="ubatch only")
    ap.add_argument("--json", metavar="FILE", default=None, help="write the results as JSON")
    a = ap.parse_args(argv)
    try:
        concs = [int(x) for x in a.concurrency.split(",") if x.strip()]
    except ValueError:
        print(f"--concurrency: expected integers, got {a.concurrency!r}", file=sys.stderr)
        return 2
    if not concs or min(concs) < 1 or a.max_tokens < 1:
        print("--concurrency values and --max-tokens must be >= 1", file=sys.stderr)
        return 2
    have_lcpp = not a.no_llama_cpp and importlib.util.find_spec("llama_cpp") is not None
    from ubatch.engine.llm import load_model
    results = []
    print(f"ubatch bench generate: greedy, {a.max_tokens} tokens per prompt, {a.threads} threads, "
          f"{'unified' if a.kv_unified else 'per-sequence'} KV; llama-cpp-python: "
          f"{'create_completion, one prompt after the other' if have_lcpp else 'not installed (ubatch only)'}")
    print("(all prompts queued at t = 0; TTFT and latency from t = 0; the machine is shared: expect noise)\n")
    hdr = (f"{'model':14} {'C':>3} | {'ubatch tok/s':>12} {'TTFT p50':>9} {'lat p50':>8} {'lat p95':>8} "
           f"{'sampling':>8} | {'llama.cpp tok/s':>15} {'TTFT p50':>9} {'lat p50':>8} {'lat p95':>8} | {'ratio':>6}")
    print(hdr)
    print("-" * len(hdr))
    for name in [m for m in a.models.split(",") if m.strip()]:
        try:
            model = load_model(name)
        except Exception as e:                       # a model that cannot be loaded here: said, not fatal
            print(f"{name:14} skipped: {e}")
            continue
        path = _model_path(name) if have_lcpp else None
        for c in concs:
            prompts = _prompts(c, a.seed)
            u = run_ubatch(model, prompts, a.max_tokens, n_threads=a.threads, kv_unified=a.kv_unified,
                           n_batch=a.n_batch)
            row = {"model": name, "concurrency": c, "ubatch": u}
            line = (f"{name:14} {c:>3} | {u['tok_s']:>12.1f} {u['ttft_p50_s']:>8.2f}s {u['latency_p50_s']:>7.2f}s "
                    f"{u['latency_p95_s']:>7.2f}s {100 * u['sample_share']:>7.1f}% |")
            if path is not None:
                lc = run_llama_cpp(path, prompts, a.max_tokens, n_threads=a.threads)
                row["llama_cpp"] = lc
                row["ratio_tok_s"] = u["tok_s"] / lc["tok_s"]
                line += (f" {lc['tok_s']:>15.1f} {lc['ttft_p50_s']:>8.2f}s {lc['latency_p50_s']:>7.2f}s "
                         f"{lc['latency_p95_s']:>7.2f}s | {row['ratio_tok_s']:>5.2f}x")
            else:
                line += f" {'-':>15} {'-':>9} {'-':>8} {'-':>8} | {'-':>6}"
            print(line, flush=True)
            results.append(row)
        st = sampler_timing(int(model.n_vocab))
        print(f"{'':14}     sampler, 32 x {model.n_vocab} logits: greedy {1e3 * st['greedy']:.2f} ms, top-k/top-p "
              f"{1e3 * st['top_k_top_p']:.2f} ms per call")
        results.append({"model": name, "sampler_32_rows_s": st})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"max_tokens": a.max_tokens, "threads": a.threads, "kv_unified": a.kv_unified,
                       "results": results}, f, indent=1)
        print(f"\nwrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
