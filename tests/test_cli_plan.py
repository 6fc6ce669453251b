"""`ubatch plan`: the printed split, --png, and the CLI dispatcher."""
import re
import os
import subprocess
import sys

import pytest

from ubatch.cli import build_parser, main
from ubatch.viz import plan_png

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def have_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


needs_mpl = pytest.mark.skipif(not have_matplotlib(), reason="matplotlib is not installed (pip install '.[plot]')")


def ubatch_lines(out):
    return [l for l in out.splitlines() if l.startswith("ubatch ")]


def test_plan_equal_interleaved(capsys):
    assert main(["plan", "--seqs", "5,3,3,1", "--layout", "interleaved", "--n-ubatch", "8"]) == 0
    out = capsys.readouterr().out
    heads = ubatch_lines(out)
    # equal split: 4 seqs x 1 (all four at pos 0), then seqs {0,1,2} x 2, then seq 0 x 2
    assert heads[0].startswith("ubatch 0: 4 tokens = 4 x 1")
    assert heads[1].startswith("ubatch 1: 6 tokens = 3 x 2")
    assert heads[2].startswith("ubatch 2: 2 tokens = 1 x 2")
    assert "out_ids: [3, 8, 9, 11]" in out


def test_plan_simple_and_seq(capsys):
    assert main(["plan", "--seqs", "4,4", "--n-ubatch", "3", "--strategy", "simple"]) == 0
    out = capsys.readouterr().out
    assert [re.search(r"(\d+) tokens", l).group(1) for l in ubatch_lines(out)] == ["3", "3", "2"]
    assert main(["plan", "--seqs", "4,4", "--n-ubatch", "3", "--strategy", "seq"]) == 0
    out = capsys.readouterr().out
    assert [re.search(r"(\d+) tokens", l).group(1) for l in ubatch_lines(out)] == ["3", "1", "3", "1"]


def test_plan_llama_exact_overflow(capsys):
    main(["plan", "--seqs", "1,1,1,1,1", "--n-ubatch", "4"])
    strict = ubatch_lines(capsys.readouterr().out)
    main(["plan", "--seqs", "1,1,1,1,1", "--n-ubatch", "4", "--llama-exact"])
    exact = ubatch_lines(capsys.readouterr().out)
    assert [l.split(":")[1].split("=")[0].strip() for l in strict] == ["4 tokens", "1 tokens"]
    assert exact[0].startswith("ubatch 0: 5 tokens = 5 x 1")     # llama.cpp's n_ubatch + 1


def test_plan_bad_lengths_are_argparse_errors(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["plan", "--seqs", "a,b"])
    assert "--seqs takes comma-separated lengths" in capsys.readouterr().err


@needs_mpl
def test_plan_png_writes_a_picture(tmp_path, capsys):
    path = tmp_path / "plan.png"
    assert main(["plan", "--seqs", "3,2,1", "--shared-prefix", "2", "--n-ubatch", "4", "--png", str(path)]) == 0
    assert f"wrote {path}" in capsys.readouterr().out
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 5000


@needs_mpl
def test_plan_png_large_batch_and_overflow(tmp_path):
    # many rows (cell labels are dropped) and a llama.cpp overflow ubatch both draw
    big, over = tmp_path / "big.png", tmp_path / "over.png"
    assert main(["plan", "--seqs", "60,30,5,1", "--layout", "interleaved", "--n-ubatch", "32", "--png", str(big)]) == 0
    assert main(["plan", "--seqs", "1,1,1,1,1", "--n-ubatch", "4", "--llama-exact", "--png", str(over)]) == 0
    assert big.read_bytes()[:8] == PNG_MAGIC and over.read_bytes()[:8] == PNG_MAGIC


@needs_mpl
def test_plan_png_picture_content(tmp_path):
    """The drawing holds one labelled line per ubatch, a cell per row, and the shapes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from ubatch.allocator import BatchAllocator
    from ubatch.workload import layout_batch

    b = layout_batch([3, 2], "interleaved")
    a = BatchAllocator()
    a.init(b, n_seq_max=2)
    ubs = []
    while (ub := a.split_equal(4)) is not None:
        ubs.append(ub)
    captured = {}
    real_savefig = plt.Figure.savefig

    def spy(fig, *args, **kw):
        captured["texts"] = [t.get_text() for ax in fig.axes for t in ax.texts]
        return real_savefig(fig, *args, **kw)

    plt.Figure.savefig = spy
    try:
        plan_png.draw_plan(str(tmp_path / "x.png"), batch_seq_ids=[b.seq_ids(i) for i in range(b.n_tokens)],
                           batch_pos=a.pos, batch_output=a.output, ubatches=ubs, out_ids=a.out_ids.tolist(),
                           n_ubatch=4, title="t")
    finally:
        plt.Figure.savefig = real_savefig
    texts = captured["texts"]
    assert [t for t in texts if t.startswith("ubatch ")] == [f"ubatch {k}" for k in range(len(ubs))]
    for ub in ubs:
        assert f"{ub.n_seqs} x {ub.n_seq_tokens} = {ub.n_tokens}" in texts
    # every ubatch row is a cell labelled with its batch row; outputs name their logits row
    cells = [t for t in texts if re.match(r"b\d+\n", t)]
    assert sorted(int(t.split("\n")[0][1:]) for t in cells) == list(range(b.n_tokens))
    assert sum("out " in t for t in cells) == len(a.out_ids)


def test_plan_png_without_matplotlib(tmp_path, capsys, monkeypatch):
    """A clear message (and exit code 2) when matplotlib is missing."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)     # import matplotlib -> ImportError
    rc = main(["plan", "--seqs", "2,2", "--n-ubatch", "2", "--png", str(tmp_path / "x.png")])
    assert rc == 2
    assert "matplotlib is not installed" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_console_entry_point_runs():
    r = subprocess.run([sys.executable, "-m", "ubatch", "plan", "--seqs", "2,1", "--n-ubatch", "2"],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(os.path.abspath(p) for p in sys.path if p)),
                       cwd=os.path.dirname(os.path.abspath(__file__)))   # not the repo root: its ubatch/ is unbuilt
    assert r.returncode == 0, r.stderr
    assert "out_ids: [2, 1]" in r.stdout    # ubatch 0 = rows 0, 2 (both at pos 0)
