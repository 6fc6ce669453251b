"""`ubatch bench serve`: the OpenAI-compatible server under load, side by side with llama-cpp-python's server.

For each concurrency C (default 1, 8, 32): C clients at once, each sending R streamed, greedy /v1/completions
requests one after the other (prompts of the shipped set, max_tokens M, the same for both servers). Measured
on the client: requests/s and generated tokens/s over the wall time of the run, time to first token (first
chunk with text) and request latency, p50 / p95 / p99. Both servers run as separate processes on 127.0.0.1 with
the same model file and thread count; `python -m llama_cpp.server` (llama-cpp-python, when installed with its
server extras) decodes one request at a time, `ubatch serve` batches them (--parallel C).

Tokens: for ubatch the server's exact count (stream_options.include_usage); for llama-cpp-python, whose 0.3.x
server has no usage in streams, the number of chunks carrying text (one per token, fewer when it holds text
back at a stop-string or UTF-8 boundary, so its tokens/s is if anything under-counted by a few per cent).
"""
from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import time
from typing import Dict, List, Optional

import numpy as np

_LISTEN = re.compile(r"listening on (http://[\d.]+:\d+)")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--model", default="gemma3-270m", help="model name or GGUF path (default gemma3-270m)")
    ap.add_argument("--clients", default="1,8,32", help="comma-separated concurrency levels")
    ap.add_argument("--requests", type=int, default=2, help="requests per client (R)")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--n-ctx", type=int, default=8192, help="ubatch's total context (shared by the sequences)")
    ap.add_argument("--no-llama-cpp", action="store_true", help="only ubatch's server")
    ap.add_argument("--json", default=None, help="write the results here")


def _pct(a: List[float], q: float) -> float:
    return float(np.percentile(np.asarray(a, np.float64), q)) if a else float("nan")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model_path(name: str) -> str:
    if os.path.exists(name):
        return name
    if name in ("tiny-llama", "tiny_llama"):
        from ubatch.models import TINY_LLAMA_PATH
        return TINY_LLAMA_PATH
    from ubatch.model import fetch
    return str(fetch.path(name))


class _Proc:
    def __init__(self, cmd: List[str], url: Optional[str] = None, env=None) -> None:
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        self.url = url

    def wait_ready(self, timeout: float = 300.0) -> str:
        import httpx
        deadline = time.monotonic() + timeout
        if self.url is None:   # ubatch prints its address
            while self.url is None:
                line = self.proc.stderr.readline()
                if not line and self.proc.poll() is not None:
                    raise RuntimeError("the server exited before listening")
                m = _LISTEN.search(line or "")
                if m:
                    self.url = m.group(1)
                if time.monotonic() > deadline:
                    raise RuntimeError("the server did not start in time")
        else:
            import threading
            threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()
            while True:
                try:
                    if httpx.get(self.url + "/v1/models", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("llama_cpp.server did not start")
                time.sleep(0.5)
        return self.url

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


async def _one(client, url: str, model: str, prompt: str, max_tokens: int, usage: bool) -> Dict:
    """One streamed greedy completion: time to first text chunk, latency, tokens (the usage count when asked
    for, else the text chunks) and the text."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    if usage:
        body["stream_options"] = {"include_usage": True}
    t0 = time.perf_counter()
    ttft, chunks, exact, text = None, 0, None, []
    async with client.stream("POST", url + "/v1/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread())[:300]!r}")
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            d = json.loads(line[6:])
            if d.get("usage"):
                exact = d["usage"]["completion_tokens"]
            for c in d.get("choices") or []:
                if c.get("text"):
                    chunks += 1
                    text.append(c["text"])
                    if ttft is None:
                        ttft = time.perf_counter() - t0
    t1 = time.perf_counter() - t0
    return {"ttft": ttft if ttft is not None else t1, "latency": t1,
            "tokens": exact if exact is not None else chunks, "text": "".join(text)}


async def _load(url: str, model: str, prompts: List[str], clients: int, requests: int, max_tokens: int,
                usage: bool) -> dict:
    import httpx
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(timeout=httpx.Timeout(900.0), limits=limits) as client:
        await _one(client, url, model, prompts[0], 2, usage)           # warm-up
        results: List[Dict[str, float]] = []

        async def worker(k: int) -> None:
            for r in range(requests):
                results.append(await _one(client, url, model, prompts[(k * requests + r) % len(prompts)],
                                          max_tokens, usage))

        t0 = time.perf_counter()
        await asyncio.gather(*(worker(k) for k in range(clients)))
        wall = time.perf_counter() - t0
    ttft = [x["ttft"] for x in results]
    lat = [x["latency"] for x in results]
    tok = sum(x["tokens"] for x in results)
    return {"clients": clients, "requests": len(results), "wall_s": wall, "req_s": len(results) / wall,
            "tok_s": tok / wall, "tokens": tok,
            **{f"ttft_p{q}": _pct(ttft, q) for q in (50, 95, 99)},
            **{f"lat_p{q}": _pct(lat, q) for q in (50, 95, 99)}}


def _ubatch_server(model: str, parallel: int, n_ctx: int, threads: int) -> _Proc:
    cmd = [sys.executable, "-m", "ubatch", "serve", "--model", model, "--port", "0", "--parallel", str(parallel),
           "--n-ctx", str(n_ctx), "--threads", str(threads), "--max-queue", "256"]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return _Proc(cmd, env=env)


def _llama_server(path: str, threads: int) -> _Proc:
    port = _free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", path, "--host", "127.0.0.1", "--port", str(port),
           "--n_ctx", "2048", "--n_threads", str(threads), "--n_threads_batch", str(threads), "--verbose", "False",
           "--interrupt_requests", "False"]   # its default cancels the stream in flight when another request arrives
    return _Proc(cmd, url=f"http://127.0.0.1:{port}")


def _have_llama_server() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("llama_cpp", "sse_starlette", "starlette_context",
                                                                  "pydantic_settings"))


def _table(rows: List[dict]) -> str:
    head = (f"{'server':<22}{'C':>4}{'req':>5}{'req/s':>8}{'tok/s':>9}{'TTFT p50':>10}{'p95':>8}{'p99':>8}"
            f"{'lat p50':>9}{'p95':>8}{'p99':>8}")
    out = [head, "-" * len(head)]
    for r in rows:
        out.append(f"{r['server']:<22}{r['clients']:>4}{r['requests']:>5}{r['req_s']:>8.2f}{r['tok_s']:>9.1f}"
                   f"{r['ttft_p50']:>10.3f}{r['ttft_p95']:>8.3f}{r['ttft_p99']:>8.3f}"
                   f"{r['lat_p50']:>9.3f}{r['lat_p95']:>8.3f}{r['lat_p99']:>8.3f}")
    return "\n".join(out)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="ubatch bench serve", description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    args = ap.parse_args(argv)
    try:
        levels = [int(x) for x in args.clients.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--clients: expected comma-separated integers, got {args.clients!r}")
    if not levels or min(levels) < 1 or args.requests < 1 or args.max_tokens < 1:
        ap.error("--clients, --requests and --max-tokens must be >= 1")
    from ubatch.engine.prompts import load_prompts
    prompts = [r["prompt"] for r in load_prompts()]
    path = _model_path(args.model)
    rows: List[dict] = []
    servers = [("ubatch serve", None)]
    if not args.no_llama_cpp:
        if _have_llama_server():
            servers.append(("llama_cpp.server", path))
        else:
            print("note: llama-cpp-python with its server extras is not installed: ubatch only", file=sys.stderr)
    for name, _ in servers:
        proc = (_ubatch_server(args.model, max(levels), args.n_ctx, args.threads) if name == "ubatch serve"
                else _llama_server(path, args.threads))
        try:
            try:
                url = proc.wait_ready()
            except RuntimeError as e:
                print(f"{name}: {e}", file=sys.stderr)
                continue
            model_id = args.model if name == "ubatch serve" else path
            for c in levels:
                try:
                    r = asyncio.run(_load(url, model_id, prompts, c, args.requests, args.max_tokens,
                                          usage=name == "ubatch serve"))
                except Exception as e:   # e.g. a server that died on this model: report, go on
                    print(f"{name}: C={c} failed: {type(e).__name__}: {e}", file=sys.stderr)
                    break
                r["server"] = name
                rows.append(r)
                print(_table([r]).splitlines()[-1], file=sys.stderr, flush=True)
        finally:
            proc.stop()
    print(_table(rows))
    by = {(r["server"], r["clients"]): r for r in rows}
    for c in levels:
        u, l = by.get(("ubatch serve", c)), by.get(("llama_cpp.server", c))
        if u and l:
            print(f"C={c}: ubatch / llama-cpp-python tokens/s x{u['tok_s'] / l['tok_s']:.2f}, "
                  f"p95 TTFT {u['ttft_p95']:.3f} s vs {l['ttft_p95']:.3f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "threads": args.threads, "max_tokens": args.max_tokens,
                       "requests_per_client": args.requests, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
