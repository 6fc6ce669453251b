"""A decode failure fails only the requests in that decode, never the server: the app with a real LLMEngine on
the tiny model, served by uvicorn in a thread on 127.0.0.1 (real HTTP), whose model runner raises on a
'poisoned' token id. The requests still queued in the engine, and every later request, get their normal
answers, identical to a run without the fault; the engine and the KV cache end empty."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

pytest.importorskip("fastapi", reason="the [server] extra (fastapi, uvicorn) is not installed")
import uvicorn  # noqa: E402

import ubatch  # noqa: E402
from ubatch.engine.llm_engine import LLMEngine  # noqa: E402
from ubatch.server.app import create_app  # noqa: E402
from ubatch.server.config import ServerConfig  # noqa: E402
from ubatch.server.state import ServerState  # noqa: E402

POISON = 251


class ThreadServer:
    def __init__(self, parallel: int) -> None:
        cfg = ServerConfig(model="tiny-llama", parallel=parallel, n_ctx=1024)
        engine = LLMEngine(ubatch.models.tiny_llama(), n_ctx=cfg.n_ctx, n_seq_max=parallel, kv_unified=True)
        runner = engine.ctx._runner
        real = runner.compute

        def compute(ub, place, *saved):              # the injected fault
            if (ub.token == POISON).any():
                raise RuntimeError("injected fault: poisoned token")
            return real(ub, place, *saved)

        runner.compute = compute
        self.state = ServerState(cfg, engine)
        self.server = uvicorn.Server(uvicorn.Config(create_app(self.state), host="127.0.0.1", port=0,
                                                    log_level="critical", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


@pytest.fixture(scope="module")
def srv():
    s = ThreadServer(parallel=1)
    yield s
    s.stop()


def _post(url, prompt, max_tokens=30):
    r = httpx.post(url + "/v1/completions", json={"model": "tiny-llama", "prompt": prompt, "max_tokens": max_tokens,
                                                  "temperature": 0, "return_token_ids": True}, timeout=60)
    return r.status_code, r.json()


def test_decode_failure_fails_only_its_request(srv):
    good = [[5, 6, 7, 8], [9, 10], [11, 12, 13]]
    expected = [_post(srv.url, p)[1]["choices"][0]["token_ids"] for p in good]
    # one sequence at a time: the poisoned request runs, the good ones wait in the engine's queue
    with ThreadPoolExecutor(4) as ex:
        bad = ex.submit(_post, srv.url, [1, 2, POISON, 3])
        time.sleep(0.05)
        rest = [ex.submit(_post, srv.url, p) for p in good]
        status, body = bad.result()
        answers = [f.result() for f in rest]
    assert status == 500 and body["error"]["code"] == "decode_failed" and "poisoned" not in body["error"]["message"]   # no internal text
    assert [a[0] for a in answers] == [200, 200, 200]
    assert [a[1]["choices"][0]["token_ids"] for a in answers] == expected
    assert _post(srv.url, [4, 4, 4])[0] == 200                      # the server goes on
    st = srv.state.engine.stats()
    assert st["running"] == 0 and st["waiting"] == 0 and st["kv_cells_used"] == st["prefix_cache_cells"]
    assert not srv.state.engine.has_unfinished_requests()
    m = httpx.get(srv.url + "/metrics").text
    assert "ubatch_step_failures_total 1" in m and 'status="500"} 1' in m


def test_failing_stream_ends_with_an_error_event(srv):
    # accepted (200, headers sent) before the step that fails: the stream carries the error object, then [DONE]
    r = httpx.post(srv.url + "/v1/completions", json={"model": "tiny-llama", "prompt": [POISON], "max_tokens": 5,
                                                      "stream": True}, timeout=60)
    assert r.status_code == 200
    events = [e for e in r.text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]" and '"code":"decode_failed"' in events[-2]
    assert not srv.state.engine.has_unfinished_requests()
