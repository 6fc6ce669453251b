"""Ray Serve scale-out on one machine: 2 replicas x 1 CPU against 1 replica x 2 CPUs (docs/scale-out.md).

Runs inside a loopback-only network namespace (root):
    unshare --net sh -c 'ip link set lo up && exec python bench/bench_ray.py --model gemma3-270m'
A local Ray cluster with 2 CPUs; each configuration deployed in turn (alternating, --rounds times, so that the
shared machine's load hits both alike), `--requests` /v1/completions sent `--concurrency` at a time through Serve's
proxy; generated tokens per second of wall time reported per round and as the median."""
import argparse
import concurrent.futures as cf
import json
import shutil
import statistics
import tempfile
import time

import httpx


def one(url, model, i, max_tokens):
    r = httpx.post(url + "/v1/completions", timeout=300, json=dict(
        model=model, prompt=f"Request {i}: write a short story about the number {i}.", max_tokens=max_tokens,
        temperature=0.0))
    r.raise_for_status()
    return r.json()["usage"]["completion_tokens"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gemma3-270m")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    import ray
    from ray import serve

    import ubatch.ray as ubray
    tmp = tempfile.mkdtemp(prefix="ubatch-raybench-")
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", _temp_dir=tmp,
             logging_level="ERROR", log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": 8000})
    url = "http://127.0.0.1:8000"
    configs = {"2 replicas x 1 CPU": (2, 1.0), "1 replica x 2 CPUs": (1, 2.0)}
    res = {k: [] for k in configs}
    try:
        for rnd in range(a.rounds):
            for name, (n, cpus) in configs.items():
                serve.run(ubray.build_app(a.model, n, replica_cpus=cpus, parallel=8, n_ctx=4096),
                          name="ubatch", route_prefix="/")
                one(url, a.model, -1, 4)             # warm
                t0 = time.perf_counter()
                with cf.ThreadPoolExecutor(a.concurrency) as pool:
                    toks = sum(pool.map(lambda i: one(url, a.model, i, a.max_tokens), range(a.requests)))
                dt = time.perf_counter() - t0
                res[name].append(toks / dt)
                print(f"round {rnd} {name}: {toks} tokens in {dt:.2f} s = {toks / dt:.1f} tok/s", flush=True)
                serve.delete("ubatch")
    finally:
        serve.shutdown()
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps({k: {"median_tok_s": round(statistics.median(v), 1), "rounds": [round(x, 1) for x in v]}
                      for k, v in res.items()}))


if __name__ == "__main__":
    main()
