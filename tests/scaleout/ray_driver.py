"""The Ray side of tests/scaleout/test_ray.py, run in a fresh network namespace whose only interface is `lo` (the test
starts it with `unshare --net`): a local Ray cluster (2 CPUs, node address 127.0.0.1, its own temp dir, shut down
and removed at the end), `ubatch.ray.build_app` with 2 replicas behind Serve's proxy on 127.0.0.1, a replica
killed (SIGKILL) and replaced, then a Ray Data job with LLMPredictor. Prints one JSON object (the observations);
the test compares them with `ubatch serve` and ubatch.LLM outside the namespace.

usage: python ray_driver.py SPEC_JSON  (spec: prompts, data_prompts, sampling, port)"""
import concurrent.futures as cf
import ipaddress
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import time

import subprocess

import httpx


def listening_sockets():
    """(address, port) of every TCP socket in LISTEN state in this network namespace (/proc/net/tcp{,6})."""
    out = []
    for name, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        with open(name) as f:
            next(f)
            for line in f:
                cols = line.split()
                if cols[3] != "0A":       # TCP_LISTEN
                    continue
                hexaddr, hexport = cols[1].split(":")
                raw = bytes.fromhex(hexaddr)
                # the kernel prints each 32-bit word in host (little-endian) order
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                addr = ipaddress.IPv6Address(raw) if v6 else ipaddress.IPv4Address(raw)
                out.append((str(addr), int(hexport, 16)))
    return out


def netns_pids(netns: str):
    """Every process (but this one) in the network namespace `netns` (a /proc/PID/ns/net link text)."""
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid():
            try:
                if os.readlink(f"/proc/{d}/ns/net") == netns:
                    pids.append(int(d))
            except OSError:
                pass
    return pids


def sweep(netns: str) -> int:
    """SIGKILLs what Ray left in this namespace after ray.shutdown (only processes this test started live here)."""
    left = netns_pids(netns)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return len(left)


def replica_pids():
    """This cluster's Serve replica processes: those of this network namespace only (another Ray cluster on the
    machine, e.g. a second test run, has replicas with the same command line)."""
    netns = os.readlink("/proc/self/ns/net")
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{d}/ns/net") != netns:
                continue
        except OSError:
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if cmd.startswith(b"ray::ServeReplica:ubatch"):
            pids.append(int(d))
    return pids


def complete(url, prompt, sampling, timeout=60.0):
    r = httpx.post(url + "/v1/completions", json=dict(model="tiny-llama", prompt=prompt, **sampling),
                   timeout=timeout)
    return {"status": r.status_code, "replica": r.headers.get("x-ubatch-replica"),
            "text": r.json()["choices"][0]["text"] if r.status_code == 200 else None}


def wait_replicas(url, prompt, sampling, want, exclude=(), timeout=60.0):
    """Sends requests until `want` distinct replicas outside `exclude` answered 200."""
    seen, deadline = set(), time.monotonic() + timeout
    with cf.ThreadPoolExecutor(4) as pool:
        while time.monotonic() < deadline:
            for r in pool.map(lambda _: complete(url, prompt, sampling, 20.0), range(8)):
                if r["status"] == 200 and r["replica"] not in exclude:
                    seen.add(r["replica"])
            if len(seen) >= want:
                return sorted(seen)
            time.sleep(0.2)
    return sorted(seen)


def main():
    spec = json.loads(sys.argv[1])
    import ray

    import ubatch.ray as ubray
    obs = {"interfaces": sorted(n for _, n in socket.if_nameindex())}
    tmp = tempfile.mkdtemp(prefix="ubatch-ray-")
    url = f"http://127.0.0.1:{spec['port']}"
    t0 = time.monotonic()
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", _temp_dir=tmp,
             logging_level="ERROR", log_to_driver=False)
    cli = None
    try:
        # `ubatch serve --ray` joins this cluster (--ray-address) and deploys build_app(...) behind Serve's proxy
        cli = subprocess.Popen([sys.executable, "-m", "ubatch", "serve", "--model", "tiny-llama", "--ray",
                                "--ray-address", ray.get_runtime_context().gcs_address, "--replicas", "2",
                                "--replica-cpus", "1", "--parallel", "4", "--n-ctx", "1024", "--max-queue", "16",
                                "--host", "127.0.0.1", "--port", str(spec["port"])],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        log = []
        for line in cli.stderr:
            log.append(line)
            if "listening on http://127.0.0.1:" in line:
                break
        else:
            raise RuntimeError("ubatch serve --ray did not start:\n" + "".join(log))
        import threading
        threading.Thread(target=lambda: [log.append(x) for x in cli.stderr], daemon=True).start()
        obs["deploy_s"] = round(time.monotonic() - t0, 1)
        sampling = spec["sampling"]
        with cf.ThreadPoolExecutor(8) as pool:
            obs["answers"] = list(pool.map(lambda p: complete(url, p, sampling), spec["prompts"]))
        obs["replicas"] = wait_replicas(url, spec["prompts"][0], sampling, 2)
        m = httpx.get(url + "/metrics", timeout=10)
        obs["metrics"] = {"status": m.status_code, "replica": m.headers.get("x-ubatch-replica"), "text": m.text}
        obs["listening"] = listening_sockets()

        # fault: SIGKILL one replica process while requests are in flight
        pids = replica_pids()
        obs["replica_pids"] = len(pids)
        long = dict(sampling, max_tokens=200)
        with cf.ThreadPoolExecutor(4) as pool:
            futs = [pool.submit(complete, url, p, long, 60.0) for p in spec["prompts"][:4]]
            time.sleep(0.3)
            os.kill(pids[0], signal.SIGKILL)
            obs["during_kill"] = [f.result()["status"] for f in futs]   # 200 or 5xx, never a hang (60 s cap)
        t1 = time.monotonic()
        # Serve notices the death and starts a new replica: ~26 s per start under the ASan build, so the wait is long
        obs["after_kill"] = wait_replicas(url, spec["prompts"][0], sampling, 1, exclude=set(obs["replicas"]), timeout=150.0)
        obs["after_kill_all"] = wait_replicas(url, spec["prompts"][0], sampling, 2)
        obs["recover_s"] = round(time.monotonic() - t1, 1)
        obs["after_kill_answer"] = complete(url, spec["prompts"][0], sampling)

        # SIGTERM: the CLI deletes the app, shuts Serve down and exits 0 within 30 s
        t2 = time.monotonic()
        cli.send_signal(signal.SIGTERM)
        try:
            obs["cli_rc"] = cli.wait(timeout=60)
        except subprocess.TimeoutExpired:
            obs["cli_rc"] = None
        obs["sigterm_exit_s"] = round(time.monotonic() - t2, 1)
        obs["cli_log"] = "".join(log)[-2000:]
        obs["port_after_sigterm"] = [a for a in listening_sockets() if a[1] == spec["port"]]
        print(obs["cli_log"], file=sys.stderr, flush=True)
        deadline = time.monotonic() + 60      # the replicas' CPUs come back to the cluster
        while ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        obs["cpus_free_after_sigterm"] = ray.available_resources().get("CPU", 0)
        print(f"cpus free {obs['cpus_free_after_sigterm']} after {time.monotonic() - t2:.1f} s", file=sys.stderr,
              flush=True)

        # Ray Data batch inference
        import ray.data
        rows = [{"id": i, "prompt": p} for i, p in enumerate(spec["data_prompts"])]
        ds = ray.data.from_items(rows).map_batches(
            ubray.LLMPredictor, fn_constructor_kwargs=dict(model="tiny-llama", n_ctx=1024, **spec["data_sampling"]),
            concurrency=2, batch_size=16, num_cpus=1)
        out = ds.take_all()
        obs["data"] = sorted(({"id": int(r["id"]), "prompt": r["prompt"], "generated_text": r["generated_text"],
                               "num_generated_tokens": int(r["num_generated_tokens"])} for r in out),
                             key=lambda r: r["id"])
        obs["listening_end"] = listening_sockets()
    finally:
        if cli is not None and cli.poll() is None:
            cli.kill()
        ray.shutdown()
        time.sleep(0.5)
        obs["left_after_shutdown"] = sweep(os.readlink("/proc/self/ns/net"))
        shutil.rmtree(tmp, ignore_errors=True)
    obs["total_s"] = round(time.monotonic() - t0, 1)
    print("RESULT " + json.dumps(obs), flush=True)


if __name__ == "__main__":
    main()
