"""`ubatch bench generate` runs on the embedded model (ubatch side only: llama-cpp-python is not in CI) and reports
what its docstring promises."""
from __future__ import annotations

import json

from ubatch.cli import main


def test_bench_generate_tiny(tmp_path, capsys):
    out = tmp_path / "g.json"
    assert main(["bench", "generate", "--models", "tiny-llama", "--concurrency", "1,3", "--max-tokens", "4",
                 "--no-llama-cpp", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "ubatch tok/s" in text and "llama.cpp tok/s" in text and "sampler, 32 x 256 logits" in text
    d = json.loads(out.read_text())
    rows = [r for r in d["results"] if "concurrency" in r]
    assert [r["concurrency"] for r in rows] == [1, 3]
    for r in rows:
        u = r["ubatch"]
        assert u["generated_tokens"] == 4 * r["concurrency"]           # ignore_eos: every request is whole
        assert 0 < u["ttft_p50_s"] <= u["latency_p50_s"] <= u["latency_p95_s"] <= u["wall_s"]
        assert "llama_cpp" not in r


def test_bench_generate_bad_args(capsys):
    assert main(["bench", "generate", "--concurrency", "0"]) == 2
    assert "must be >= 1" in capsys.readouterr().err
