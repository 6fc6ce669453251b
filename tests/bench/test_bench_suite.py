"""`ubatch bench`: the split-strategy suite on a tiny grid, its metrics, plots, and the sub-commands."""
import json
import math
import os
import sys
import types

import pytest

from ubatch.batch.allocator import BatchAllocator
from ubatch.bench import families, plots, split_bench, strategies, sweep
from ubatch.bench.llama_data import LLAMA_CPP_TIMINGS, WORKLOADS
from ubatch.cli import bench as bench_cli
from ubatch.cli import main
from ubatch.batch.workload import layout_batch

from suite_paths import ROOT  # noqa: E402
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def tiny_suite(tmp_path, *extra):
    out = tmp_path / "out"
    argv = ["bench", "--quick", "--n-ubatch", "16,64", "--reps", "2", "--warmup", "0", "--no-progress",
            "--out", str(out), *extra]
    assert main(argv) == 0
    return out, json.loads((out / "bench_suite.json").read_text())


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    return tiny_suite(tmp_path_factory.mktemp("suite"), "--no-plots")


def rows_of(doc, **kw):
    return [r for r in doc["rows"] if all(r[k] == v for k, v in kw.items())]


def test_suite_covers_the_grid(suite):
    _, doc = suite
    fams, strats = list(families.FAMILIES), list(strategies.STRATEGIES)
    assert [(r["family"], r["n_ubatch"], r["strategy"]) for r in doc["rows"]] == \
        [(f, n, s) for f in fams for n in (16, 64) for s in strats]
    assert set(doc["families"]) == set(fams) and set(doc["strategies"]) == set(strats)
    assert doc["quick"] is True and doc["n_ubatch"] == [16, 64]
    for key in ("plan_us", "extra_ubatches", "mean_fill", "empty_slots", "waste_pct", "excess_waste_pct", "shapes"):
        assert key in doc["definitions"]
    assert doc["families"]["mrope-embd"]["n_pos_per_embd"] == 4 and doc["families"]["mrope-embd"]["input"] == "embd"
    assert doc["families"]["embeddings"]["output_all"] is True


def test_suite_metrics_are_consistent(suite):
    _, doc = suite
    for r in doc["rows"]:
        if "error" in r:
            continue
        n, nu = r["n_tokens"], r["n_ubatch"]
        assert r["plan_us"] > 0 and r["plan_us_p90"] >= r["plan_us"]
        assert r["simple_ubatches"] == math.ceil(n / nu)
        assert r["extra_ubatches"] == r["n_ubatches"] - r["simple_ubatches"]
        assert sum(r["shapes"].values()) == r["n_ubatches"] and r["n_shapes"] == len(r["shapes"])
        sizes_total = sum(int(a) * int(b) * c for k, c in r["shapes"].items() for a, b in [k.split("x")])
        assert sizes_total == n                                   # every token placed exactly once
        assert r["mean_fill"] == pytest.approx(n / (r["n_ubatches"] * nu), abs=1e-4)
        if not r["strategy"].endswith("-llama"):
            assert r["max_tokens"] <= nu and r["overflow_ubatches"] == 0
        if r["overflow_ubatches"] == 0:
            assert r["empty_slots"] == r["n_ubatches"] * nu - n
        if r["strategy"] == "simple":
            assert r["extra_ubatches"] == 0 and r["excess_waste_pct"] == 0


def test_suite_known_cells(suite):
    _, doc = suite
    # 32 decode tokens, one per seq: llama.cpp's split_equal takes n_ubatch + 1 = 17 seqs at n_ubatch 16
    exact = rows_of(doc, family="decode", n_ubatch=16, strategy="equal-llama")[0]
    assert exact["max_tokens"] == 17 and exact["overflow_ubatches"] == 1 and exact["shapes"] == {"17x1": 1, "15x1": 1}
    strict = rows_of(doc, family="decode", n_ubatch=16, strategy="equal")[0]
    assert strict["shapes"] == {"16x1": 2}
    # split_seq cuts a decode step into one ubatch per sequence
    seq = rows_of(doc, family="decode", n_ubatch=64, strategy="seq")[0]
    assert seq["n_ubatches"] == 32 and seq["shapes"] == {"1x1": 32}
    # prefill of 4 x 128 at n_ubatch 16: 4 x 4 rectangles
    assert rows_of(doc, family="prefill", n_ubatch=16, strategy="equal")[0]["shapes"] == {"4x4": 32}
    # a shared prefix couples the sequences: the sequential split refuses, like llama.cpp
    for s in ("equal-seq", "equal-seq-llama"):
        r = rows_of(doc, family="shared-prefix", n_ubatch=16, strategy=s)[0]
        assert r["error"].startswith("SplitError") and "plan_us" not in r
    # split_equal pays on ragged batches
    rag = rows_of(doc, family="ragged", n_ubatch=64, strategy="equal")[0]
    assert rag["extra_ubatches"] > 0 and rag["excess_waste_pct"] > 0


def test_metrics_by_hand():
    """[3, 2] contiguous at n_ubatch 4: simple -> 4 + 1 rows; equal -> {0,1} x 2 then seq 0 x 1."""
    w = families.Workload("t", "t", layout_batch([3, 2]), n_seq_max=2)
    a = BatchAllocator()
    m = sweep.plan_metrics(a, w, strategies.STRATEGIES["simple"].split, 4)
    assert (m["n_ubatches"], m["empty_slots"], m["waste_pct"], m["mean_fill"]) == (2, 3, 37.5, 0.625)
    assert m["shapes"] == {"4x1": 1, "1x1": 1}
    m = sweep.plan_metrics(a, w, strategies.STRATEGIES["equal"].split, 4)
    assert m["shapes"] == {"2x2": 1, "1x1": 1} and m["excess_waste_pct"] == 0.0
    m = sweep.plan_metrics(a, w, strategies.STRATEGIES["seq"].split, 4)
    assert m["shapes"] == {"1x3": 1, "1x2": 1} and m["n_ubatches"] == 2
    m = sweep.plan_metrics(a, w, strategies.STRATEGIES["equal"].split, 2)
    # equal at 2: {0,1}x1, {0,1}x1, {0}x1 -> 3 ubatches like simple (ceil(5/2) = 3)
    assert m["n_ubatches"] == 3 and m["extra_ubatches"] == 0


def test_families_are_seeded_and_valid():
    a = families.build(list(families.FAMILIES), quick=True, seed=3)
    b = families.build(list(families.FAMILIES), quick=True, seed=3)
    for wa, wb in zip(a, b):
        assert wa.n_tokens == wb.n_tokens and wa.info == wb.info
        alloc = BatchAllocator(n_pos_per_embd=wa.n_pos_per_embd)
        alloc.init(wa.batch, n_seq_max=wa.n_seq_max, n_vocab=wa.n_vocab, output_all=wa.output_all)
    mrope = [w for w in a if w.family == "mrope-embd"][0]
    assert mrope.batch.token is None and mrope.batch.pos.shape[0] == 4
    with pytest.raises(ValueError, match="unknown workload family"):
        families.build(["nope"], quick=True)


def test_table_and_legend(tmp_path, capsys):
    _, doc = tiny_suite(tmp_path, "--no-plots", "--families", "decode,shared-prefix", "--strategies", "simple,equal-seq")
    out = capsys.readouterr().out
    assert "== decode:" in out and "== shared-prefix:" in out
    assert "n/a  SplitError" in out
    assert "excess%" in out and "columns:" in out
    assert len(doc["rows"]) == 2 * 2 * 2


def test_bad_arguments(capsys):
    assert main(["bench", "--families", "nope", "--no-progress"]) == 2
    assert "unknown workload family" in capsys.readouterr().err
    assert main(["bench", "--strategies", "fastest", "--no-progress"]) == 2
    assert "unknown strategy" in capsys.readouterr().err
    assert main(["bench", "--reps", "0"]) == 2


def test_list(capsys):
    assert main(["bench", "--list"]) == 0
    out = capsys.readouterr().out
    for name in list(families.FAMILIES) + list(strategies.STRATEGIES):
        assert name in out


@pytest.mark.skipif(not plots.have_matplotlib(), reason="matplotlib is not installed (pip install '.[plot]')")
def test_plots_are_written(tmp_path, capsys):
    out, _ = tiny_suite(tmp_path, "--families", "decode,ragged,shared-prefix")
    printed = capsys.readouterr().out
    for name in ("plan_us.png", "fill.png", "waste.png"):
        data = (out / name).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 10000, name
        assert f"wrote {out / name}" in printed


def test_missing_matplotlib_still_writes_json(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(plots, "have_matplotlib", lambda: False)
    out, doc = tiny_suite(tmp_path, "--families", "decode", "--strategies", "simple")
    err = capsys.readouterr().err
    assert "matplotlib is not installed" in err and "pip install 'ubatch[plot]'" in err
    assert doc["rows"] and not list(out.glob("*.png"))


def test_progress_bar():
    bar = bench_cli.progress_bar(False, "x")
    assert bar is None
    pytest.importorskip("tqdm", reason="tqdm is not installed")
    bar = bench_cli.progress_bar(True, "x")
    assert list(bar(iter([1, 2, 3]), 3)) == [1, 2, 3]


# ---------------------------------------------------------------- bench split (W1-W6)
def test_split_bench_plans_like_llama_cpp(capsys, tmp_path):
    """Every W1-W6 plan has llama.cpp's number of ubatches (the table was recorded from llama.cpp)."""
    path = tmp_path / "split.json"
    assert main(["bench", "split", "--reps", "1", "--warmup", "0", "--no-reference", "--no-progress",
                 "--json", str(path)]) == 0
    rows = json.loads(path.read_text())["rows"]
    assert len(rows) == len(LLAMA_CPP_TIMINGS["table"]) == sum(len(w["strategies"]) for w in WORKLOADS["workloads"])
    for r in rows:
        assert r["n_ubatches"] == r["llama_cpp_n_ubatches"], r
        assert r["c_us"] > 0 and r["llama_cpp_us"] > 0
    out = capsys.readouterr().out
    assert "W4" in out and "llama.cpp µs" in out


def test_split_bench_expansion():
    ws = {w["id"]: split_bench.expand(w, WORKLOADS["defaults"]) for w in WORKLOADS["workloads"]}
    assert len(ws["W1"]["tokens"]) == 64 and ws["W1"]["mem"][0] == [0, 0, 99]
    w5 = ws["W5"]
    assert w5["seq_ids"][0] == list(range(16)) and len(w5["tokens"]) == 64 + 16 * 32
    assert int(w5["output"].sum()) == 16
    assert ws["W6"]["output_all"] and int(ws["W6"]["output"].sum()) == 4096
    w3 = ws["W3"]
    assert int(w3["tokens"][0]) == (7919 * 0 + 104729 * 100 + 17) % 32000


def test_llama_data_matches_the_timed_workloads():
    """Each timed llama.cpp plan names a shipped workload, and its token count is that workload's."""
    from ubatch.bench.split_bench import expand
    sizes = {w["id"]: len(expand(w, WORKLOADS["defaults"])["tokens"]) for w in WORKLOADS["workloads"]}
    assert LLAMA_CPP_TIMINGS["table"]
    for row in LLAMA_CPP_TIMINGS["table"]:
        assert sizes[row["workload"]] == row["total_tokens"], row["workload"]


def test_bench_split_script_is_thin():
    import subprocess
    script = os.path.join(ROOT, "bench", "bench_split.py")
    if not os.path.isfile(script):
        pytest.skip("bench/bench_split.py is not next to the tests (installed package)")
    r = subprocess.run([sys.executable, script, "--reps", "1", "--warmup", "0", "--no-reference", "--workload", "W1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "W1" in r.stdout and "W2" not in r.stdout


# ---------------------------------------------------------------- kernel sub-commands
def test_kernel_bench_not_available(monkeypatch, capsys):
    monkeypatch.setitem(bench_cli.KERNEL_BENCHES, "kv",
                        ("ubatch.bench._no_such_module", "bench_no_such_file.py", "KV cache"))
    assert main(["bench", "kv"]) == 2
    err = capsys.readouterr().err
    assert "ubatch bench kv: not available in this build" in err


def test_kernel_bench_forwards_arguments(monkeypatch):
    seen = {}
    mod = types.ModuleType("ubatch_test_fake_bench")
    mod.main = lambda argv: seen.setdefault("argv", argv) and 0
    monkeypatch.setitem(sys.modules, "ubatch_test_fake_bench", mod)
    monkeypatch.setitem(bench_cli.KERNEL_BENCHES, "attention", ("ubatch_test_fake_bench", "none.py", "attention"))
    assert main(["bench", "attention", "--reps", "3", "--json", "x.json"]) == 0
    assert seen["argv"] == ["--reps", "3", "--json", "x.json"]


def test_kernel_bench_from_source_checkout(monkeypatch, tmp_path, capsys):
    """A bench/bench_X.py next to the package is loaded when the package has no module for it."""
    (tmp_path / "bench_probe.py").write_text("def main(argv):\n    print('probe', argv)\n    return 0\n")
    monkeypatch.setattr(bench_cli, "source_bench_dir", lambda: str(tmp_path))
    monkeypatch.setitem(bench_cli.KERNEL_BENCHES, "decode", ("ubatch.bench._no_such", "bench_probe.py", "decode"))
    assert main(["bench", "decode", "--quick", "W1"]) == 0
    assert "probe ['--quick', 'W1']" in capsys.readouterr().out


def test_kernel_bench_without_argv_parameter(monkeypatch, tmp_path, capsys):
    """Scripts whose main() reads sys.argv get the forwarded arguments there; sys.argv is restored."""
    (tmp_path / "bench_probe2.py").write_text(
        "import sys\ndef main():\n    print('argv', sys.argv[1:])\n")
    monkeypatch.setattr(bench_cli, "source_bench_dir", lambda: str(tmp_path))
    monkeypatch.setitem(bench_cli.KERNEL_BENCHES, "kv", ("ubatch.bench._no_such", "bench_probe2.py", "kv"))
    before = list(sys.argv)
    assert main(["bench", "kv", "--n", "3"]) == 0
    assert "argv ['--n', '3']" in capsys.readouterr().out
    assert sys.argv == before


def test_split_bench_llama_cpp_live_or_recorded(capsys, tmp_path, monkeypatch):
    """--llama-cpp auto: llama.cpp's allocator timed live when llama-cpp-python and g++ are here (its plans
    have our ubatch counts), else a printed note and the recorded times; --llama-cpp json: recorded."""
    from ubatch.bench import llama_live
    path = tmp_path / "split.json"
    why = llama_live.available()
    assert main(["bench", "split", "--reps", "2", "--warmup", "0", "--no-reference", "--no-progress",
                 "--workload", "W5", "--json", str(path)]) == 0
    doc = json.loads(path.read_text())
    out = capsys.readouterr().out
    if why is None:
        assert doc["llama_cpp_source"] == "live"
        for r in doc["rows"]:
            assert r["llama_cpp_source"] == "live" and r["llama_cpp_n_ubatches"] == r["n_ubatches"], r
            assert r["llama_cpp_us"] > 0 and r["llama_cpp_recorded_us"] > 0 and r["plain_bulk_us"] > 0
    else:
        assert f"not timed live here ({why})" in out and doc["llama_cpp_source"] == "recorded"
    monkeypatch.setitem(sys.modules, "llama_cpp", None)          # llama-cpp-python absent
    assert "llama-cpp-python is not installed" in llama_live.available()
    assert main(["bench", "split", "--reps", "1", "--warmup", "0", "--no-reference", "--no-progress",
                 "--workload", "W1", "--llama-cpp", "json", "--json", str(path)]) == 0
    rows = json.loads(path.read_text())["rows"]
    assert all(r["llama_cpp_source"] == "recorded" and r["llama_cpp_us"] == r["llama_cpp_recorded_us"] for r in rows)
    with pytest.raises(SystemExit, match="--llama-cpp live: llama-cpp-python is not installed"):
        main(["bench", "split", "--reps", "1", "--no-reference", "--no-progress", "--workload", "W1",
              "--llama-cpp", "live"])


def test_llama_live_input_format():
    """The driver's stdin: one W record per workload with every row and strategy."""
    from ubatch.bench import llama_live
    ws = split_bench.expanded(["W5"])
    text = llama_live._serialise(ws).split()
    assert text[:7] == ["W", "W5", "256", str(ws[0]["n_vocab"]), "0", str(ws[0]["n_ubatch"]), "0"]
    assert int(text[7]) == 576 and text[8:12] == [str(ws[0]["tokens"][0]), "0", "0", "16"]
