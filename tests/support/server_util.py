"""A real `ubatch serve` process on a free 127.0.0.1 port (port 0: the server picks it and prints it)."""
from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from typing import List, Optional

import httpx

from child_process import CHILD_CWD, child_env

_LISTEN = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")


class ServerProcess:
    def __init__(self, *args: str, model: str = "tiny-llama", timeout: float = 120.0,
                 env: Optional[dict] = None) -> None:
        cmd = [sys.executable, "-m", "ubatch", "serve", "--model", model, "--host", "127.0.0.1", "--port", "0",
               *args]
        self.proc = subprocess.Popen(cmd, cwd=CHILD_CWD, env=child_env(**(env or {})), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.log: List[str] = []
        self.url: Optional[str] = None
        deadline = time.monotonic() + timeout
        while self.url is None:
            line = self.proc.stderr.readline()
            if not line:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("ubatch serve did not start:\n" + "".join(self.log))
                continue
            self.log.append(line)
            m = _LISTEN.search(line)
            if m:
                self.url = m.group(1)
        # keep draining stderr so that the server never blocks on a full pipe
        self._drain = threading.Thread(target=self._read_rest, daemon=True)
        self._drain.start()

    def _read_rest(self) -> None:
        for line in self.proc.stderr:
            self.log.append(line)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def client(self, **kw) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=kw.pop("timeout", 60.0), **kw)

    def metrics(self, headers=None) -> dict:
        from ubatch.server.metrics import parse_text
        r = httpx.get(self.url + "/metrics", headers=headers, timeout=10.0)
        r.raise_for_status()
        return parse_text(r.text)

    def wait_idle(self, timeout: float = 10.0, headers=None) -> dict:
        """Polls /metrics until nothing is in flight, no sequence is active and the KV cache holds only what the
        prefix cache keeps."""
        deadline = time.monotonic() + timeout
        while True:
            m = self.metrics(headers)
            if (m["ubatch_requests_in_flight"] == 0 and m["ubatch_active_sequences"] == 0
                    and m["ubatch_kv_cells_used"] == m.get("ubatch_prefix_cache_cells", 0) and m["ubatch_engine_requests"] == 0
                    and m["ubatch_queue_depth"] == 0):
                return m
            if time.monotonic() > deadline:
                raise AssertionError(f"server not idle after {timeout} s: {m}")
            time.sleep(0.05)

    def rss_kib(self) -> int:
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
