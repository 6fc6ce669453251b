"""`ubatch serve` under bad input, auth, a full queue, vanishing clients, SIGTERM and a soak: every refusal
is an OpenAI error object with its status and the field named; nothing is left in the engine or the KV cache."""
from __future__ import annotations

import json
import os
import random
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

pytest.importorskip("fastapi", reason="the [server] extra (fastapi, uvicorn) is not installed")

from server_util import ServerProcess  # noqa: E402

MODEL = "tiny-llama"
N_CTX = 1024
C, CH, E = "/v1/completions", "/v1/chat/completions", "/v1/embeddings"


def _asan_env() -> dict:
    """Under the ASan run (.ci/asan preloads libasan), a small quarantine for the server: ASan keeps up to 256 MB
    of freed blocks unreused by default, which the soak's RSS check would read as growth."""
    if "libasan" not in os.environ.get("LD_PRELOAD", ""):
        return {}
    opts = os.environ.get("ASAN_OPTIONS", "")
    return {"ASAN_OPTIONS": (opts + ":" if opts else "") + "quarantine_size_mb=1"}


@pytest.fixture(scope="module")
def server():
    with ServerProcess("--parallel", "4", "--n-ctx", str(N_CTX), "--max-tokens-limit", "3000",
                       "--max-body-bytes", "65536", env=_asan_env()) as s:
        yield s


def _cmpl(**kw):
    return {"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0, **kw}


def _chat(**kw):
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **kw}


BAD = [  # (path, raw body or json, status, param, words in the message)
    (C, b"{not json", 400, "body", "malformed JSON"),
    (C, b"", 400, "body", "empty"),
    (C, b"[1, 2]", 400, "body", "JSON object"),
    (C, b"[" * 60000, 400, "body", "nested too deeply"),
    (C, b'{"model": "tiny-llama", "prompt": "\xff\xfe"}', 400, "body", "malformed JSON"),
    (C, {"prompt": [1]}, 422, "model", "Field required"),
    (C, _cmpl(model="gpt-4"), 400, "model", "unknown model"),
    (C, _cmpl(model=7), 422, "model", "string"),
    (C, _cmpl(temperature="hot"), 422, "temperature", "number"),
    (C, _cmpl(temperature=3.5), 422, "temperature", "less than or equal to 2"),
    (C, _cmpl(max_tokens="10"), 422, "max_tokens", "integer"),
    (C, _cmpl(max_tokens=0), 422, "max_tokens", "greater than or equal to 1"),
    (C, _cmpl(max_tokens=5000), 400, "max_tokens", "limit of 3000"),
    (C, _cmpl(n=True), 422, "n", "integer"),
    (C, _cmpl(n=9), 400, "n", "limit"),
    (C, _cmpl(stream="yes"), 422, "stream", "boolean"),
    (C, _cmpl(prompt=None), 422, "prompt", "Field required"),
    (C, _cmpl(prompt=[]), 400, "prompt", "empty"),
    (C, _cmpl(prompt={"a": 1}), 422, "prompt", "expected a string"),
    (C, _cmpl(prompt=[1, 999]), 400, "prompt.1", "out of the vocabulary"),
    (C, _cmpl(prompt=[1, "a"]), 422, "prompt.0", "expected a string or a list of token ids"),
    (C, _cmpl(prompt=list(range(256)) * 5), 400, "prompt", "cells"),             # 1280 > n_ctx 1024
    (C, _cmpl(stop=5), 422, "stop", "string"),
    (C, _cmpl(stop=["a", "b", "c", "d", "e"]), 400, "stop", "limit of 4"),
    (C, _cmpl(logit_bias={"5": 1.0}), 400, "logit_bias", "not supported"),
    (C, _cmpl(presence_penalty=0.5), 400, "presence_penalty", "not supported"),
    (C, _cmpl(logprobs=50), 422, "logprobs", "less than or equal to 20"),
    (C, _cmpl(top_p=0), 422, "top_p", "greater than 0"),
    (C, {"model": MODEL, "prompt": "x" * 70000}, 413, None, "exceeds the limit of 65536 bytes"),
    (CH, _chat(messages=[]), 422, "messages", "at least 1"),
    (CH, _chat(messages="hi"), 422, "messages", "list"),
    (CH, _chat(messages=[{"role": "robot", "content": "x"}]), 422, "messages.0.role", "system"),
    (CH, _chat(messages=[{"content": "x"}]), 422, "messages.0.role", "Field required"),
    (CH, _chat(messages=[{"role": "user", "content": 5}]), 422, "messages.0.content", "expected a string"),
    (CH, _chat(messages=[{"role": "user", "content": [{"type": "image_url"}]}]), 422, "messages.0.content.0",
     "text"),
    (CH, _chat(top_logprobs=2), 400, "top_logprobs", "logprobs: true"),
    (CH, _chat(tools=[{"type": "function"}]), 400, "tools.0.function", "expected an object"),
    (CH, _chat(messages=[{"role": "user", "content": "x" * 1100}]), 400, "messages", "cells"),
    (C, _cmpl(prompt=[[1, 2], list(range(256)) * 5]), 400, "prompt.1", "cells"),
    (E, {"model": MODEL}, 422, "input", "Field required"),
    (E, {"model": MODEL, "input": [1, 2], "dimensions": 8}, 400, "dimensions", "64"),
    (E, {"model": MODEL, "input": [1, 2], "encoding_format": "hex"}, 422, "encoding_format", "float"),
    (E, {"model": MODEL, "input": [list(range(256)) * 5]}, 400, "input", "exceed the context"),
]


@pytest.mark.parametrize("path,body,status,param,words", BAD, ids=[f"{i}-{b[0].rsplit('/', 1)[1]}-{b[3]}"
                                                                 for i, b in enumerate(BAD)])
def test_bad_request_gets_status_and_named_field(server, path, body, status, param, words):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with server.client() as c:
        r = c.post(path, content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param and words in err["message"], err
    assert err["type"] == "invalid_request_error"


def test_unknown_route_and_method(server):
    with server.client() as c:
        r = c.get("/v2/nothing")
        assert r.status_code == 404 and "no such endpoint" in r.json()["error"]["message"]
        r = c.get(C)
        assert r.status_code == 405 and "GET" in r.json()["error"]["message"]


def test_engine_empty_after_bad_requests(server):
    m = server.wait_idle()
    assert m['ubatch_requests_total{endpoint="/v1/completions",status="422"}'] > 0


def _stream_lines(c: httpx.Client, body: dict, n_lines: int):
    """Opens a stream, reads n_lines data events, then leaves (closes the connection)."""
    with c.stream("POST", C, json={**body, "stream": True}) as r:
        assert r.status_code == 200
        got = 0
        for line in r.iter_lines():
            if line.startswith("data: "):
                got += 1
                if got >= n_lines:
                    return got
    return got


def test_disconnect_mid_stream_frees_the_sequence(server):
    before = server.metrics()["ubatch_cancelled_total"]
    with server.client() as c:
        assert _stream_lines(c, _cmpl(max_tokens=3000), 3) == 3
    m = server.wait_idle()              # the sequence left the engine and the KV cache
    assert m["ubatch_cancelled_total"] == before + 1
    assert m["ubatch_generation_tokens_total"] < 10**6


def test_disconnect_right_after_the_headers_frees_the_sequence(server):
    before = server.metrics()["ubatch_cancelled_total"]
    with server.client() as c, c.stream("POST", C, json={**_cmpl(max_tokens=3000), "stream": True}) as r:
        assert r.status_code == 200                     # leaves without reading a single event
    m = server.wait_idle()
    assert m["ubatch_cancelled_total"] == before + 1


def test_disconnect_non_streaming_frees_the_sequence(server):
    before = server.metrics()["ubatch_cancelled_total"]
    host, port = server.url.rsplit("/", 1)[1].split(":")
    body = json.dumps(_cmpl(max_tokens=3000)).encode()
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        deadline = time.monotonic() + 10
        while server.metrics()["ubatch_active_sequences"] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
    m = server.wait_idle()
    assert m["ubatch_cancelled_total"] == before + 1


def test_api_key():
    with ServerProcess("--api-key", "s3cret", "--parallel", "2", "--n-ctx", "512") as s, s.client() as c:
        for h in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"},
                  {"Authorization": "Basic s3cret"}):
            r = c.post(C, json=_cmpl(), headers=h)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key", (h, r.text)
            assert r.headers["www-authenticate"] == "Bearer"
        assert c.get("/metrics").status_code == 401
        assert c.get("/health").status_code == 200                       # probes need no key
        ok = {"Authorization": "Bearer s3cret"}
        assert c.post(C, json=_cmpl(), headers=ok).status_code == 200
        import openai
        cl = openai.OpenAI(base_url=s.url + "/v1", api_key="s3cret", max_retries=0)
        assert cl.completions.create(model=MODEL, prompt=[1, 2], max_tokens=2).usage.completion_tokens == 2


def test_full_queue_gets_429_with_retry_after():
    with ServerProcess("--parallel", "1", "--max-queue", "1", "--n-ctx", "4096") as s:
        clients = [s.client() for _ in range(2)]
        streams = [c.stream("POST", C, json={**_cmpl(max_tokens=3000), "stream": True}) for c in clients]
        try:
            for st in streams:
                r = st.__enter__()
                assert r.status_code == 200
            with s.client() as c:
                r = c.post(C, json=_cmpl())
            assert r.status_code == 429, r.text
            assert r.headers["retry-after"] == "1" and r.json()["error"]["type"] == "rate_limit_error"
        finally:
            for st in streams:
                st.__exit__(None, None, None)
            for c in clients:
                c.close()
        s.wait_idle()
        with s.client() as c:
            assert c.post(C, json=_cmpl()).status_code == 200
        assert s.metrics()['ubatch_requests_total{endpoint="/v1/completions",status="429"}'] == 1


def test_sigterm_drains_in_flight_and_refuses_new():
    s = ServerProcess("--parallel", "2", "--n-ctx", "4096", "--grace", "30")
    try:
        with s.client() as c, c.stream("POST", C, json={**_cmpl(max_tokens=600), "stream": True}) as r:
            it = r.iter_lines()
            first = next(line for line in it if line.startswith("data: "))
            assert first
            s.proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            with pytest.raises(httpx.TransportError):      # the listening socket is closed
                httpx.post(s.url + C, json=_cmpl(), timeout=5)
            rest = [line for line in it if line.startswith("data: ")]
        assert rest[-1] == "data: [DONE]"
        finals = [json.loads(x[6:])["choices"][0]["finish_reason"] for x in rest[:-1]]
        assert finals[-1] == "length"                      # the in-flight request ran to its end
        assert s.proc.wait(30) == 0
    finally:
        s.stop(signal.SIGKILL)


def test_sigterm_grace_expiry_cancels_and_exits():
    s = ServerProcess("--parallel", "2", "--n-ctx", "4096", "--grace", "0.5", "--max-tokens-limit", "100000")
    try:
        with s.client() as c, c.stream("POST", C, json={**_cmpl(max_tokens=4000), "stream": True}) as r:
            it = r.iter_lines()
            next(line for line in it if line.startswith("data: "))
            t0 = time.monotonic()
            s.proc.send_signal(signal.SIGTERM)
            try:
                for _ in it:
                    pass
            except httpx.HTTPError:
                pass
        assert s.proc.wait(30) == 0 and time.monotonic() - t0 < 20
    finally:
        s.stop(signal.SIGKILL)


def _soak_round(server, rnd: random.Random, n: int) -> dict:
    def one(i: int) -> int:
        kind = rnd.choice("ccsxhebd")
        p = [rnd.randrange(256) for _ in range(rnd.randint(1, 40))]
        with server.client(timeout=60) as c:
            if kind == "c":
                r = c.post(C, json=_cmpl(prompt=p, max_tokens=rnd.randint(1, 24), n=rnd.choice([1, 1, 2])))
            elif kind == "s":
                r = c.post(C, json=_cmpl(prompt=p, max_tokens=rnd.randint(1, 24), stream=True))
                assert r.text.endswith("data: [DONE]\n\n")
            elif kind == "x":
                _stream_lines(c, _cmpl(prompt=p, max_tokens=500), rnd.randint(1, 3))
                return 0
            elif kind == "h":
                r = c.post(CH, json=_chat(max_tokens=rnd.randint(1, 12), temperature=0.8, seed=i))
            elif kind == "e":
                r = c.post(E, json={"model": MODEL, "input": [p, p[:5]]})
            elif kind == "b":
                r = c.post(C, json=_cmpl(prompt=p, temperature="x"))
                assert r.status_code == 422
                return 422
            else:
                r = c.post(C, content=b"{", headers={"Content-Type": "application/json"})
                assert r.status_code == 400
                return 400
            assert r.status_code == 200, r.text
            return 200

    with ThreadPoolExecutor(12) as ex:
        codes = list(ex.map(one, range(n)))
    return {c: codes.count(c) for c in set(codes)}


def test_soak_leaves_kv_empty_and_memory_flat(server):
    rnd = random.Random(15)
    _soak_round(server, rnd, 60)                 # warm-up: allocator pools, caches, embedding context
    server.wait_idle()
    rss0 = server.rss_kib()
    codes = _soak_round(server, rnd, 200)
    m = server.wait_idle()
    rss1 = server.rss_kib()
    assert codes.get(200, 0) > 80
    assert m["ubatch_kv_cells_used"] == m["ubatch_prefix_cache_cells"] and m["ubatch_active_sequences"] == 0
    assert rss1 - rss0 < 24 * 1024, f"RSS grew from {rss0} KiB to {rss1} KiB over 200 requests"
