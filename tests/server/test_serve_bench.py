"""`ubatch bench serve` end to end on the embedded tiny model (no llama-cpp-python): the server in a process of
its own, streamed and non-streamed rounds, the in-process engine reference, the JSON it writes. The greedy
requests are the same for the server and the engine, so their generated-token counts must agree exactly."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi", reason="the [server] extra (fastapi, uvicorn) is not installed")
pytest.importorskip("httpx", reason="httpx (the benchmark's client) is not installed")

from ubatch.bench import serve_bench  # noqa: E402


def test_bench_serve_tiny(tmp_path, capsys):
    out = tmp_path / "serve.json"
    rc = serve_bench.main(["--model", "tiny-llama", "--clients", "3", "--requests", "2", "--max-tokens", "5",
                           "--no-llama-cpp", "--engine", "--stream", "both", "--json", str(out)])
    assert rc == 0
    d = json.loads(out.read_text())
    by = {(r["server"], r["mode"]): r for r in d["rows"]}
    assert set(by) == {("ubatch serve", "stream"), ("ubatch serve", "plain"), ("ubatch.LLM", "engine")}
    for r in d["rows"]:
        assert r["clients"] == 3 and r["requests"] == 6
        assert r["tok_s"] > 0 and r["wall_s"] > 0 and r["ttft_p50"] <= r["lat_p99"] + 1e-9
        assert r["server_cpu_s"] is None or r["server_cpu_s"] >= 0
    # the same greedy requests: the server (both modes) generates exactly the engine's tokens
    assert by[("ubatch serve", "stream")]["tokens"] == by[("ubatch serve", "plain")]["tokens"] \
        == by[("ubatch.LLM", "engine")]["tokens"] > 0
    text = capsys.readouterr().out
    assert "server / engine alone tokens/s" in text


def test_bench_serve_bad_arguments(capsys):
    for argv in (["--clients", "0"], ["--clients", "a,b"], ["--repeats", "0"], ["--model", ","]):
        with pytest.raises(SystemExit) as e:
            serve_bench.main(argv + ["--no-llama-cpp"])
        assert e.value.code == 2
