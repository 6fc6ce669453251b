"""`ubatch bench serve`: the OpenAI-compatible server under load, side by side with llama-cpp-python's server.

For each model and concurrency C (default 1, 8, 32): C clients at once, each sending R greedy /v1/completions
requests one after the other (prompts of the shipped set, max_tokens M, the same for both servers), streamed and
/ or not (--stream). Measured on the client: requests/s and generated tokens/s over the wall time of the round,
time to first token (first chunk with text; a non-streamed answer's latency) and request latency, p50 / p95 / p99;
beside them the server process's CPU seconds (all its threads) and the load average at the round's end. Both
servers run as separate processes on 127.0.0.1 (the client is this process) with the same model file and thread
count, started once and measured in alternation, round for round (--repeats N: each round N times, the best
tokens/s kept); `python -m llama_cpp.server` (llama-cpp-python, when installed with its server extras) decodes
one request at a time, `ubatch serve` batches them (--parallel C). `--engine` adds ubatch.LLM generating the
same C x R requests in a process of its own (the engine alone, no HTTP): what the server could at most reach.

Tokens: the servers' exact counts (`usage`; in streams stream_options.include_usage) when they give them; for
llama-cpp-python's streams, which carry no usage in its 0.3.x server, the number of chunks carrying text (one
per token, fewer when it holds text back at a stop-string or UTF-8 boundary, so its streamed tokens/s is if
anything under-counted by a few per cent).
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
    ap.add_argument("--model", default="gemma3-270m",
                    help="model name(s) or GGUF path(s), comma-separated (default gemma3-270m)")
    ap.add_argument("--clients", default="1,8,32", help="comma-separated concurrency levels")
    ap.add_argument("--requests", type=int, default=2, help="requests per client (R)")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--n-ctx", type=int, default=8192, help="ubatch's total context (shared by the sequences)")
    ap.add_argument("--stream", default="yes", choices=["yes", "no", "both"],
                    help="streamed requests (yes, the default), non-streamed (no) or both, round after round")
    ap.add_argument("--repeats", type=int, default=1, help="rounds per server and setting; the best is kept")
    ap.add_argument("--engine", action="store_true",
                    help="also ubatch.LLM generating the same requests in-process (the engine alone, no HTTP)")
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
    def __init__(self, cmd: List[str], url: Optional[str] = None, env=None, cwd: Optional[str] = None) -> None:
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                                     cwd=cwd)
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
            self._drain()
        else:
            self._drain()
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

    def _drain(self) -> None:
        """Reads the server's stderr from now on (a full pipe would block its writes)."""
        import threading
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()

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


async def _one_plain(client, url: str, model: str, prompt: str, max_tokens: int) -> Dict:
    """One non-streamed greedy completion: latency (also its time to first token), the usage count, the text."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    t0 = time.perf_counter()
    r = await client.post(url + "/v1/completions", json=body)
    if r.status_code != 200:
        raise RuntimeError(f"HTTP {r.status_code}: {r.content[:300]!r}")
    d = r.json()
    t1 = time.perf_counter() - t0
    return {"ttft": t1, "latency": t1, "tokens": int(d["usage"]["completion_tokens"]),
            "text": "".join(c.get("text") or "" for c in d.get("choices") or [])}


def _cpu_seconds(pid: Optional[int]) -> Optional[float]:
    """CPU seconds (user + system, every thread) of process `pid` so far; None where /proc is not there."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _load_average() -> float:
    try:
        return float(os.getloadavg()[0])
    except OSError:
        return float("nan")


async def _load(url: str, model: str, prompts: List[str], clients: int, requests: int, max_tokens: int,
                usage: bool, stream: bool = True, pid: Optional[int] = None) -> dict:
    import httpx
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(timeout=httpx.Timeout(900.0), limits=limits) as client:
        async def one(prompt: str, m: int) -> Dict:
            if stream:
                return await _one(client, url, model, prompt, m, usage)
            return await _one_plain(client, url, model, prompt, m)

        await one(prompts[0], 2)           # warm-up
        results: List[Dict[str, float]] = []

        async def worker(k: int) -> None:
            for r in range(requests):
                results.append(await one(prompts[(k * requests + r) % len(prompts)], max_tokens))

        cpu0, ccpu0 = _cpu_seconds(pid), time.process_time()
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(k) for k in range(clients)))
        wall = time.perf_counter() - t0
        cpu1, ccpu1 = _cpu_seconds(pid), time.process_time()
    return _row(clients, results, wall, None if cpu0 is None or cpu1 is None else cpu1 - cpu0, ccpu1 - ccpu0)


def _row(clients: int, results: List[Dict], wall: float, cpu: Optional[float], client_cpu: Optional[float]) -> dict:
    ttft = [x["ttft"] for x in results]
    lat = [x["latency"] for x in results]
    tok = sum(x["tokens"] for x in results)
    return {"clients": clients, "requests": len(results), "wall_s": wall, "req_s": len(results) / wall,
            "tok_s": tok / wall, "tokens": tok, "server_cpu_s": cpu, "client_cpu_s": client_cpu,
            "load": _load_average(),
            **{f"ttft_p{q}": _pct(ttft, q) for q in (50, 95, 99)},
            **{f"lat_p{q}": _pct(lat, q) for q in (50, 95, 99)}}


def engine_reference(model: str, prompts: List[str], clients: int, requests: int, max_tokens: int, n_ctx: int,
                     threads: int) -> dict:
    """ubatch.LLM with the server's engine settings (C sequences, unified KV of n_ctx cells, the same threads)
    generating the C x R requests of a round in one generate() call (continuous batching: a finished sequence's
    slot takes the next prompt): the engine alone, without HTTP. Latencies are not per request (one call)."""
    import ubatch
    llm = ubatch.LLM(model, n_ctx=n_ctx, n_seq_max=clients, kv_unified=True, n_threads=threads)
    try:
        greedy = dict(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0)
        llm.generate([prompts[0]], max_tokens=2, **greedy)        # warm-up
        todo = [prompts[i % len(prompts)] for i in range(clients * requests)]
        cpu0, t0 = time.process_time(), time.perf_counter()
        out = llm.generate(todo, max_tokens=max_tokens, **greedy)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    finally:
        llm.close()
    res = [{"ttft": wall, "latency": wall, "tokens": len(c.tokens)} for c in out]   # as the server's usage
    return _row(clients, res, wall, cpu, None)


def _child_root_env():
    """The folder holding the imported ubatch package and an environment that puts it first: a child started
    there (`python -m` puts its cwd first, ahead of PYTHONPATH) runs this ubatch, not a source tree the caller
    happens to stand in (whose ubatch may have no built extension)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return root, dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _engine_round(model: str, clients: int, requests: int, max_tokens: int, n_ctx: int, threads: int) -> dict:
    """engine_reference in a process of its own (its own CPU time, the model loaded there only)."""
    code = ("import json, sys; from ubatch.bench import serve_bench as b; "
            "from ubatch.engine.prompts import load_prompts; "
            "print(json.dumps(b.engine_reference(sys.argv[1], [r['prompt'] for r in load_prompts()], "
            "*map(int, sys.argv[2:]))))")
    root, env = _child_root_env()
    model = os.path.abspath(model) if os.path.exists(model) else model   # the child runs in root
    out = subprocess.run([sys.executable, "-c", code, model, str(clients), str(requests), str(max_tokens),
                          str(n_ctx), str(threads)], capture_output=True, text=True, env=env, cwd=root, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "exit status "
                           f"{out.returncode}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _ubatch_server(model: str, parallel: int, n_ctx: int, threads: int) -> _Proc:
    cmd = [sys.executable, "-m", "ubatch", "serve", "--model", model, "--port", "0", "--parallel", str(parallel),
           "--n-ctx", str(n_ctx), "--threads", str(threads), "--max-queue", "256"]
    root, env = _child_root_env()
    return _Proc([os.path.abspath(c) if c == model and os.path.exists(c) else c for c in cmd], env=env, cwd=root)


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
    head = (f"{'server':<18}{'model':<14}{'mode':<7}{'C':>4}{'req':>5}{'req/s':>7}{'tok/s':>8}{'TTFT p50':>9}"
            f"{'p95':>8}{'p99':>8}{'lat p50':>8}{'p95':>8}{'p99':>8}{'cpu s':>7}{'load':>6}")
    out = [head, "-" * len(head)]
    for r in rows:
        cpu = r.get("server_cpu_s")
        out.append(f"{r['server']:<18}{r['model'][:13]:<14}{r['mode']:<7}{r['clients']:>4}{r['requests']:>5}"
                   f"{r['req_s']:>7.2f}{r['tok_s']:>8.1f}{r['ttft_p50']:>9.3f}{r['ttft_p95']:>8.3f}"
                   f"{r['ttft_p99']:>8.3f}{r['lat_p50']:>8.3f}{r['lat_p95']:>8.3f}{r['lat_p99']:>8.3f}"
                   f"{'' if cpu is None else f'{cpu:.1f}':>7}{r['load']:>6.1f}")
    return "\n".join(out)


def _ratios(rows: List[dict], models: List[str], modes: List[str], levels: List[int]) -> List[str]:
    by = {(r["server"], r["model"], r["mode"], r["clients"]): r for r in rows}
    lines = []
    for m in models:
        for mode in modes:
            for c in levels:
                u, l = by.get(("ubatch serve", m, mode, c)), by.get(("llama_cpp.server", m, mode, c))
                e = by.get(("ubatch.LLM", m, "engine", c))
                parts = []
                if u and l:
                    parts.append(f"ubatch / llama-cpp-python tokens/s x{u['tok_s'] / l['tok_s']:.2f}, p95 TTFT "
                                 f"{u['ttft_p95']:.3f} s vs {l['ttft_p95']:.3f} s")
                    if u.get("server_cpu_s") and l.get("server_cpu_s"):   # load-robust with --threads 1
                        parts.append(f"tokens per server CPU second x{_per_cpu(u) / _per_cpu(l):.2f}")
                if u and e:
                    parts.append(f"server / engine alone tokens/s {u['tok_s'] / e['tok_s']:.2f}")
                if parts:
                    lines.append(f"{m} {mode} C={c}: " + "; ".join(parts) + f" (load {u['load']:.1f})")
    return lines


def _per_cpu(r: dict) -> float:
    return r["tokens"] / r["server_cpu_s"]


def _best(old: Optional[dict], new: dict) -> dict:
    return new if old is None or new["tok_s"] > old["tok_s"] else old


def _bench_model(args, model: str, levels: List[int], modes: List[str], prompts: List[str]) -> List[dict]:
    """Both servers up at once, measured in alternation (per level and mode: ubatch, llama, ubatch, ...);
    the best of --repeats rounds per server and setting."""
    path = _model_path(model)
    procs: Dict[str, _Proc] = {"ubatch serve": _ubatch_server(model, max(levels), args.n_ctx, args.threads)}
    if not args.no_llama_cpp:
        if _have_llama_server():
            procs["llama_cpp.server"] = _llama_server(path, args.threads)
        else:
            print("note: llama-cpp-python with its server extras is not installed: ubatch only", file=sys.stderr)
    best: Dict[tuple, dict] = {}
    try:
        urls = {}
        for name, proc in procs.items():
            try:
                urls[name] = proc.wait_ready()
            except RuntimeError as e:
                print(f"{name} ({model}): {e}", file=sys.stderr)
        broken = set()
        for c in levels:
            for mode in modes:
                for _ in range(args.repeats):
                    for name, url in urls.items():
                        if name in broken:
                            continue
                        model_id = model if name == "ubatch serve" else path
                        try:
                            r = asyncio.run(_load(url, model_id, prompts, c, args.requests, args.max_tokens,
                                                  usage=name == "ubatch serve", stream=mode == "stream",
                                                  pid=procs[name].proc.pid))
                        except Exception as e:   # e.g. a server that died on this model: report, go on
                            print(f"{name} ({model}): C={c} failed: {type(e).__name__}: {e}", file=sys.stderr)
                            broken.add(name)
                            continue
                        r.update(server=name, model=model, mode=mode)
                        best[(name, mode, c)] = _best(best.get((name, mode, c)), r)
                        print(_table([r]).splitlines()[-1], file=sys.stderr, flush=True)
    finally:
        for proc in procs.values():
            proc.stop()
    if args.engine:
        for c in levels:
            for _ in range(args.repeats):
                try:
                    r = _engine_round(model, c, args.requests, args.max_tokens, args.n_ctx, args.threads)
                except (RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
                    print(f"ubatch.LLM ({model}): C={c} failed: {e}", file=sys.stderr)
                    break
                r.update(server="ubatch.LLM", model=model, mode="engine")
                best[("ubatch.LLM", "engine", c)] = _best(best.get(("ubatch.LLM", "engine", c)), r)
                print(_table([r]).splitlines()[-1], file=sys.stderr, flush=True)
    return list(best.values())


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="ubatch bench serve", description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    args = ap.parse_args(argv)
    try:
        levels = [int(x) for x in args.clients.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--clients: expected comma-separated integers, got {args.clients!r}")
    if not levels or min(levels) < 1 or args.requests < 1 or args.max_tokens < 1 or args.repeats < 1:
        ap.error("--clients, --requests, --max-tokens and --repeats must be >= 1")
    models = [m.strip() for m in args.model.split(",") if m.strip()]
    if not models:
        ap.error("--model: give at least one model")
    modes = {"yes": ["stream"], "no": ["plain"], "both": ["stream", "plain"]}[args.stream]
    from ubatch.engine.prompts import load_prompts
    prompts = [r["prompt"] for r in load_prompts()]
    print(f"cpu: {os.cpu_count()} logical, threads {args.threads}, load average {_load_average():.1f} at the start",
          file=sys.stderr)
    rows: List[dict] = []
    for model in models:
        rows += _bench_model(args, model, levels, modes, prompts)
    order = {"ubatch serve": 0, "llama_cpp.server": 1, "ubatch.LLM": 2}
    rows.sort(key=lambda r: (models.index(r["model"]), r["clients"], order[r["server"]], r["mode"]))
    print(_table(rows))
    for line in _ratios(rows, models, modes, levels):
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"models": models, "threads": args.threads, "max_tokens": args.max_tokens,
                       "requests_per_client": args.requests, "repeats": args.repeats, "n_ctx": args.n_ctx,
                       "cpu_count": os.cpu_count(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
