"""bench/bench_decode.py: the instrumentation sees every phase and the shares add up (tiny workload)."""
from __future__ import annotations

import importlib.util
import json
import os

import pytest

from suite_paths import ROOT  # noqa: E402
PATH = os.path.join(ROOT, "bench", "bench_decode.py")


@pytest.fixture(scope="module")
def bench():
    if not os.path.isfile(PATH):
        pytest.skip(f"no source checkout: {PATH} is missing")
    spec = importlib.util.spec_from_file_location("_bench_decode_under_test", PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("unified", [False, True])
def test_run_once_shares(bench, unified):
    from ubatch.models import tiny_llama
    wl = ("t", 6, 3, (4, 12), (2, 5), 768 if not unified else 256, 16, 8, unified)
    r = bench.run_once(tiny_llama(), wl, 1)
    t = r["time_us"]
    for k in ("step", "decode", "init", "init_batch", "kv_prepare", "kv_apply", "placement", "compute"):
        assert t[k] > 0, k
    assert t["kv_prepare"] <= t["init_batch"]
    assert t["compute"] < t["decode"] <= t["step"]
    s = r["share"]
    assert abs(s["plan"] + s["compute"] + s["kv_update"] + s["decode_glue"] + s["serve"] - 1) < 1e-9
    assert abs(sum(s[f"plan.{k}"] for k in bench.PLAN) - s["plan"]) < 1e-9
    assert r["decoded_tokens"] == r["prompt_tokens"] + r["generated_tokens"] - 6
    assert r["steps"] == r["decode_calls"] and r["tokens_per_s"] > 0


def test_main_writes_json(bench, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(bench, "WORKLOADS", [("tiny", 4, 2, (4, 8), (2, 3), 512, 16, 8, False)] * 2)
    out = tmp_path / "d.json"
    assert bench.main(["--quick", "--blas-threads", "0", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert len(doc["rows"]) == 2 and doc["rows"][0]["workload"] == "tiny"
    assert "plan%" in capsys.readouterr().out
