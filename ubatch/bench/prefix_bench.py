"""`ubatch bench prefix`: automatic prefix caching, measured on the HTTP server beside llama-cpp-python's server.

Two workloads, each run against `ubatch serve` (prefix cache on, its default), `ubatch serve --no-prefix-cache` and
`python -m llama_cpp.server` (llama-cpp-python 0.3.36: one sequence, which reuses the longest common prefix of the
previous request's tokens — its prompt caching; its `--cache True` LlamaRAMCache is left off: each saved state holds
the scores of every prompt token, 1 GB per 1,000-token prompt with Gemma's 262,144-entry vocabulary, and its RSS
passed 14 GB within minutes here), one server process at a time, the same model file and thread count, in
alternating rounds (--rounds; --servers picks a subset):

* system: C clients at once (default 32), each sending one streamed greedy /v1/completions request made of the
  same system prompt (~--system-tokens tokens of text, default 1,000) and a short question of its own;
* chat: K conversations at once (default 8), each replaying T turns (default 4) one after the other: turn t sends
  the whole conversation so far (the system prompt, every earlier question and the reply the server gave) plus a
  new question.

Measured on the client: time to first token (first chunk with text) p50 / p95 and generated tokens/s over the wall
time of the workload. Ratios: ubatch with the cache against ubatch without it (the issue's targets: TTFT p50 ≥ 5x
lower, throughput ≥ 2x), and against llama-cpp-python.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Dict, List, Optional, Tuple

from ubatch.bench.serve_bench import _one, _have_llama_server, _model_path, _pct, _Proc, _free_port


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--model", default="gemma3-270m", help="model name or GGUF path (default gemma3-270m)")
    ap.add_argument("--clients", type=int, default=32, help="system workload: concurrent clients (default 32)")
    ap.add_argument("--system-tokens", type=int, default=1000, help="system prompt length in tokens (default 1000)")
    ap.add_argument("--conversations", type=int, default=8, help="chat workload: concurrent conversations")
    ap.add_argument("--turns", type=int, default=4, help="chat workload: turns per conversation")
    ap.add_argument("--max-tokens", type=int, default=16, help="tokens generated per request (default 16)")
    ap.add_argument("--parallel", type=int, default=32, help="ubatch serve --parallel (default 32: every client decodes at once)")
    ap.add_argument("--n-ctx", type=int, default=36864, help="ubatch serve --n-ctx (default 36864: room for 32 x 1,100 tokens without the cache)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--rounds", type=int, default=1, help="alternating rounds of the three servers (default 1)")
    ap.add_argument("--workloads", default="system,chat", help="comma-separated: system, chat")
    ap.add_argument("--no-llama-cpp", action="store_true", help="only ubatch's server (with and without cache)")
    ap.add_argument("--servers", default="cache,nocache,llama",
                    help="comma-separated subset of cache (ubatch serve), nocache (--no-prefix-cache), llama")
    ap.add_argument("--json", default=None, help="write the results here")


def _texts(model: str, system_tokens: int) -> Tuple[str, List[str]]:
    """A system prompt of about system_tokens tokens (the model's tokenizer counts) and the questions, both made
    of the shipped prompt set."""
    from ubatch.engine.prompts import load_prompts
    import ubatch
    prompts = [r["prompt"] for r in load_prompts()]
    try:
        tok = ubatch.models.load(model).tokenizer
    except Exception:            # a GGUF without a vocabulary (the tiny model reads bytes)
        tok = None
    parts, n, i = ["You are a helpful assistant. Here are notes you may use:\n"], 0, 0
    while n < system_tokens:
        parts.append(f"- {prompts[i % len(prompts)]}\n")
        i += 1
        text = "".join(parts)
        n = len(text.encode()) if tok is None else len(tok.encode(text, add_special=True, parse_special=False))
    return "".join(parts), [f"Question {k}: {p}\nAnswer:" for k, p in enumerate(prompts)]



async def _workload(kind: str, url: str, model: str, system: str, questions: List[str], args, usage: bool) -> dict:
    import httpx
    n = args.clients if kind == "system" else args.conversations
    limits = httpx.Limits(max_connections=n + 4, max_keepalive_connections=n + 4)
    results: List[Dict] = []
    async with httpx.AsyncClient(timeout=httpx.Timeout(1800.0), limits=limits) as client:
        await _one(client, url, model, "Hello", 2, usage)                       # warm-up (no shared prefix)

        async def system_client(k: int) -> None:
            results.append(await _one(client, url, model, system + questions[k % len(questions)], args.max_tokens,
                                      usage))

        async def conversation(k: int) -> None:
            conv = system
            for t in range(args.turns):
                conv += "\n" + questions[(k * args.turns + t) % len(questions)]
                r = await _one(client, url, model, conv, args.max_tokens, usage)
                results.append(r)
                conv += r["text"]

        t0 = time.perf_counter()
        await asyncio.gather(*((system_client if kind == "system" else conversation)(k) for k in range(n)))
        wall = time.perf_counter() - t0
    ttft = [x["ttft"] for x in results]
    tok = sum(x["tokens"] for x in results)
    return {"workload": kind, "requests": len(results), "wall_s": wall, "tok_s": tok / wall, "tokens": tok,
            "ttft_p50": _pct(ttft, 50), "ttft_p95": _pct(ttft, 95), "lat_p50": _pct([x["latency"] for x in results], 50)}


def _ubatch(args, cache: bool) -> _Proc:
    cmd = [sys.executable, "-m", "ubatch", "serve", "--model", args.model, "--port", "0", "--parallel",
           str(args.parallel), "--n-ctx", str(args.n_ctx), "--threads", str(args.threads), "--max-queue", "256"]
    if not cache:
        cmd.append("--no-prefix-cache")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return _Proc(cmd, env=env)


def _llama(path: str, args) -> _Proc:
    port = _free_port()
    n_ctx = max(2048, args.system_tokens + args.turns * (64 + args.max_tokens) + 512)
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", path, "--host", "127.0.0.1", "--port", str(port),
           "--n_ctx", str(n_ctx), "--n_threads", str(args.threads), "--n_threads_batch", str(args.threads),
           "--verbose", "False", "--interrupt_requests", "False"]
    return _Proc(cmd, url=f"http://127.0.0.1:{port}")


def _table(rows: List[dict]) -> str:
    head = f"{'server':<32}{'workload':<9}{'req':>5}{'wall s':>9}{'tok/s':>8}{'TTFT p50':>10}{'p95':>8}{'lat p50':>9}"
    out = [head, "-" * len(head)]
    for r in rows:
        out.append(f"{r['server']:<32}{r['workload']:<9}{r['requests']:>5}{r['wall_s']:>9.2f}{r['tok_s']:>8.2f}"
                   f"{r['ttft_p50']:>10.3f}{r['ttft_p95']:>8.3f}{r['lat_p50']:>9.3f}")
    return "\n".join(out)


SERVERS = ("ubatch serve (prefix cache)", "ubatch serve --no-prefix-cache", "llama_cpp.server")


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="ubatch bench prefix", description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    args = ap.parse_args(argv)
    kinds = [k.strip() for k in args.workloads.split(",") if k.strip()]
    if not kinds or any(k not in ("system", "chat") for k in kinds):
        ap.error(f"--workloads: system and/or chat, got {args.workloads!r}")
    for name in ("clients", "system_tokens", "conversations", "turns", "max_tokens", "parallel", "rounds"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    system, questions = _texts(args.model, args.system_tokens)
    path = _model_path(args.model)
    want = {k.strip() for k in args.servers.split(",") if k.strip()}
    if not want or want - {"cache", "nocache", "llama"}:
        ap.error(f"--servers: a subset of cache, nocache, llama, got {args.servers!r}")
    servers = [s for s, k in zip(SERVERS[:2], ("cache", "nocache")) if k in want]
    if not args.no_llama_cpp and "llama" in want:
        if _have_llama_server():
            servers.append(SERVERS[2])
        else:
            print("note: llama-cpp-python with its server extras is not installed: ubatch only", file=sys.stderr)
    rows: List[dict] = []
    for rnd in range(args.rounds):
        for name in servers:
            proc = _ubatch(args, name == SERVERS[0]) if name.startswith("ubatch") else _llama(path, args)
            try:
                try:
                    url = proc.wait_ready()
                except RuntimeError as e:
                    print(f"{name}: {e}", file=sys.stderr)
                    continue
                model_id = args.model if name.startswith("ubatch") else path
                for kind in kinds:
                    try:
                        r = asyncio.run(_workload(kind, url, model_id, system, questions, args,
                                                  usage=name.startswith("ubatch")))
                    except Exception as e:   # a server that failed: report, go on
                        print(f"{name}: {kind} failed: {type(e).__name__}: {e}", file=sys.stderr)
                        continue
                    r.update(server=name, round=rnd)
                    rows.append(r)
                    print(_table([r]).splitlines()[-1], file=sys.stderr, flush=True)
            finally:
                proc.stop()
    print(f"ubatch bench prefix: {args.model}, {args.threads} threads, system prompt ~{args.system_tokens} tokens, "
          f"max_tokens {args.max_tokens}, ubatch --parallel {args.parallel} --n-ctx {args.n_ctx} (unified KV)")
    print(_table(rows))
    summary = {}
    for kind in kinds:
        def med(server: str, key: str) -> Optional[float]:
            v = sorted(r[key] for r in rows if r["server"] == server and r["workload"] == kind)
            return v[len(v) // 2] if v else None
        on, off, lc = (dict(ttft=med(s, "ttft_p50"), tok=med(s, "tok_s")) for s in SERVERS)
        if on["ttft"] and off["ttft"]:
            s = {"ttft_p50_ratio_vs_no_cache": off["ttft"] / on["ttft"], "tok_s_ratio_vs_no_cache": on["tok"] / off["tok"]}
            line = (f"{kind}: prefix cache vs none: TTFT p50 {off['ttft'] / on['ttft']:.2f}x lower "
                    f"(target >= 5x), tokens/s x{on['tok'] / off['tok']:.2f} (target >= 2x)")
            if lc["ttft"]:
                s.update(ttft_p50_ratio_vs_llama_cpp=lc["ttft"] / on["ttft"], tok_s_ratio_vs_llama_cpp=on["tok"] / lc["tok"])
                line += (f"; vs llama-cpp-python: TTFT p50 {lc['ttft'] / on['ttft']:.2f}x lower, "
                         f"tokens/s x{on['tok'] / lc['tok']:.2f}")
            summary[kind] = s
            print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": vars(args), "rows": rows, "summary": summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
