"""`ubatch bench ramcache`: time to first token of a `Llama.set_cache(LlamaRAMCache())` user (the drop-in,
single sequence) whose prompts share a long prefix, beside llama-cpp-python 0.3.36 with its LlamaRAMCache.

Two users take turns on one Llama, each with its own system prompt (~--prefix-tokens tokens) and a short question
per turn (U0 q0, U1 q0, U0 q1, U1 q1, ...): the context always holds the other user's conversation, so only the
cache can bring a prompt's prefix back (llama-cpp-python's own reuse of the previous call finds nothing). Timed,
per turn and alternately (paired: the machine is shared), a streamed greedy completion's first chunk with:

* `held`: ubatch with LlamaRAMCache (its entries served from the KV cells the Llama still holds, _cache_holders.py);
* `restore`: ubatch with LlamaRAMCache and Llama(prefix_cache=False) (every hit is a load_state, as before);
* `none`: ubatch without a cache (the whole prompt is computed);
* `lcpp`: llama-cpp-python with LlamaRAMCache (its load_state of the saved state).

Each user's first turn is a miss for everyone and is not counted. The completions of the three ubatch runs are
checked identical. Reported: TTFT p50 per configuration and the per-turn paired ratios' medians.

    ubatch bench ramcache [--model qwen2.5-0.5b] [--prefix-tokens 1000] [--turns 4] [--json out.json]
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from typing import Dict, List


def _prompts(tok_len, n_tokens: int, turns: int) -> List[List[str]]:
    from ubatch.engine.prompts import load_prompts
    notes = [r["prompt"] for r in load_prompts()]
    users = []
    for u in range(2):
        parts, i = [f"You are assistant number {u}. Notes for this user:\n"], u
        while tok_len("".join(parts)) < n_tokens:
            parts.append(f"- {notes[i % len(notes)]}\n")
            i += 2
        system = "".join(parts)
        users.append([f"{system}Question {t}: {notes[(7 * t + u) % len(notes)][:60]}\nAnswer:" for t in range(turns)])
    return users


def _ttft(llm, prompt: str, max_tokens: int):
    t0 = time.perf_counter()
    first, text = None, []
    for ch in llm.create_completion(prompt, max_tokens=max_tokens, temperature=0.0, stream=True):
        if first is None:
            first = time.perf_counter() - t0
        text.append(ch["choices"][0]["text"])
    return first, "".join(text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="ubatch bench ramcache", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-0.5b")
    ap.add_argument("--prefix-tokens", type=int, default=1000)
    ap.add_argument("--turns", type=int, default=4, help="turns per user (the first one is not counted)")
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--capacity-gb", type=float, default=2.0, help="LlamaRAMCache capacity_bytes (default 2 GB)")
    ap.add_argument("--configs", default="held,restore,none,lcpp")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    from ubatch.model import fetch
    import ubatch.llama_cpp as U
    path = str(fetch.path(a.model))
    configs = [c.strip() for c in a.configs.split(",") if c.strip()]
    if "lcpp" in configs:
        try:
            import llama_cpp as LC
        except ImportError:
            print("ubatch bench ramcache: llama-cpp-python is not installed; lcpp left out", file=sys.stderr)
            configs.remove("lcpp")
    cap = int(a.capacity_gb * (1 << 30))
    kw = dict(n_ctx=a.n_ctx, n_threads=a.threads, n_threads_batch=a.threads, verbose=False)
    llms: Dict[str, object] = {}
    for c in configs:
        if c == "lcpp":
            llms[c] = LC.Llama(path, **kw)
        else:
            llms[c] = U.Llama(path, prefix_cache=(c != "restore"), **kw)
        if c != "none":
            llms[c].set_cache((LC if c == "lcpp" else U).LlamaRAMCache(capacity_bytes=cap))
    tok = next(iter(llms.values()))
    users = _prompts(lambda s: len(tok.tokenize(s.encode(), add_bos=True, special=False)), a.prefix_tokens, a.turns)
    n_prompt = [len(tok.tokenize(users[u][0].encode())) for u in range(2)]
    ttft: Dict[str, List[float]] = {c: [] for c in configs}
    ratios: Dict[str, List[float]] = {c: [] for c in configs if c != "held"}
    for t in range(a.turns):
        for u in range(2):
            got = {}
            order = configs if (2 * t + u) % 2 == 0 else configs[::-1]
            for c in order:
                gc.collect()
                got[c] = _ttft(llms[c], users[u][t], a.max_tokens)
            texts = {got[c][1] for c in configs if c != "lcpp"}
            if len(texts) != 1:
                raise SystemExit(f"turn {t} user {u}: ubatch completions differ: {texts}")
            print(f"turn {t} user {u}: " + "  ".join(f"{c} {got[c][0] * 1e3:8.1f} ms" for c in configs), flush=True)
            if t == 0:
                continue
            for c in configs:
                ttft[c].append(got[c][0])
            if "held" in got:
                for c in ratios:
                    ratios[c].append(got[c][0] / got["held"][0])
    hold = getattr(llms.get("held"), "_holders", None)
    rows = {c: {"ttft_p50_ms": statistics.median(v) * 1e3, "n": len(v)} for c, v in ttft.items()}
    for c, v in ratios.items():
        rows[c]["vs_held"] = statistics.median(v)
    print(f"\n{a.model}: prompts of {n_prompt} tokens, {a.turns - 1} warm turns per user, {a.threads} threads")
    print(f"{'config':8} {'TTFT p50 ms':>12} {'/ held (paired median)':>24}")
    for c in configs:
        r = rows[c]
        print(f"{c:8} {r['ttft_p50_ms']:12.1f} {r.get('vs_held', 1.0):24.2f}")
    if hold is not None:
        print(f"held: {hold.hits} hits, {hold.tokens_saved} tokens not recomputed, {hold.evictions} holder evictions")
    if a.json:
        from ubatch.bench.grammar_bench import _cpu
        with open(a.json, "w") as f:
            json.dump({"cpu": _cpu(), "model": a.model, "prompt_tokens": n_prompt, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
