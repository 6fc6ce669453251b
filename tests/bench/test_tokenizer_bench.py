"""`ubatch bench tokenizer` runs end to end (small text, one run, without llama-cpp-python) and reports what it
measured; speed itself is never asserted."""
import json

import pytest

from ubatch.bench import tokenizer_bench
from ubatch.cli import main as cli_main


def test_mixed_text_is_deterministic_and_mixed():
    a, b = tokenizer_bench.mixed_text(20), tokenizer_bench.mixed_text(20)
    assert a == b and 20_000 <= len(a.encode()) < 21_000
    assert any("\u4e00" <= c <= "\u9fff" for c in a) and "def " in a and "\t" in a and "👍🏽" in a


@pytest.mark.realmodel
def test_bench_runs_and_writes_json(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert cli_main(["bench", "tokenizer", "--kb", "5", "--runs", "1", "--no-llama", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [r["model"] for r in rows] == ["gemma3-270m", "qwen2.5-0.5b"]
    from ubatch import Tokenizer
    from ubatch.model import fetch
    for r in rows:
        tok = Tokenizer.from_gguf(fetch.path(r["model"]))
        assert r["n_tokens"] == len(tok.encode(tokenizer_bench.mixed_text(5)))
        assert r["encode_tok_s"] > 0 and r["load_s"] > 0
    assert "| gemma3-270m |" in capsys.readouterr().out


def test_bench_rejects_bad_args(capsys):
    assert tokenizer_bench.main(["--runs", "0"]) == 2
