"""`ubatch plan`: the printed split, --png, and the CLI dispatcher."""
import re
import os
import subprocess
import sys

import numpy as np
import pytest

from ubatch.cli import build_parser, main
from ubatch.common.errors import BatchError
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
    from ubatch.batch.allocator import BatchAllocator
    from ubatch.batch.workload import layout_batch

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


# ---------------------------------------------------------------- --kv: where the cells land

def kv_rows(out):
    """(ubatch, batch row, stream, cell) of every printed ubatch row."""
    rows, k = [], -1
    for l in out.splitlines():
        if l.startswith("ubatch "):
            k = int(l.split()[1].rstrip(":"))
        m = re.match(r"\s+row\s+\d+: batch\s+(\d+).*-> stream (\d+) cell\s+(\d+)", l)
        if m:
            rows.append((k, int(m.group(1)), int(m.group(2)), int(m.group(3))))
    return rows


def test_plan_kv_per_seq_streams(capsys):
    assert main(["plan", "--seqs", "5,3,3,1", "--n-ubatch", "4", "--kv"]) == 0
    out = capsys.readouterr().out
    assert "split_equal(sequential, llama.cpp-exact) (the cache's choice" in out
    rows = kv_rows(out)
    assert len(rows) == 12 and sorted(r[1] for r in rows) == list(range(12))
    # contiguous layout: seq s owns batch rows starting at 0, 5, 8, 11; each lands in stream s at cell = pos
    start = [0, 5, 8, 11]
    for _, b, st, cell in rows:
        s = max(i for i in range(4) if start[i] <= b)
        assert (st, cell) == (s, b - start[s])
    assert "stream 0: 5/256 used, head 5" in out and "stream 3: 1/256 used, head 1" in out
    assert "    u3 cells 3-4: s0:p3-4" in out        # the last ubatch holds seq 0's positions 3 and 4


def test_plan_kv_unified_cells_follow_rows(capsys):
    assert main(["plan", "--seqs", "3,2", "--shared-prefix", "2", "--layout", "interleaved", "--n-ubatch", "4",
                 "--kv", "--kv-unified"]) == 0
    out = capsys.readouterr().out
    assert "strategy split_simple (the cache's choice" in out
    rows = kv_rows(out)
    # split_simple on an empty unified cache: rows in batch order fill cells 0, 1, 2, ...
    assert [(b, st, c) for _, b, st, c in rows] == [(i, 0, i) for i in range(7)]
    assert "u0 cells 0-3: s0,1:p0-1 s0:p2 s1:p2" in out   # the shared prefix cells carry both seqs
    assert "stream 0: 7/256 used, head 7" in out


def test_plan_kv_matches_context_placements():
    """The CLI's numbers come from Context.last_placements; check that accessor against the cache itself."""
    from ubatch import Context
    from ubatch.batch.workload import layout_batch

    for unified in (False, True):
        ctx = Context(n_ctx=1024, n_batch=64, n_ubatch=4, n_seq_max=4, kv_unified=unified)
        b = layout_batch([5, 3, 3, 1], "interleaved")
        ctx.decode(b)
        ubs, pl = ctx.last_ubatches, ctx.last_placements
        assert len(pl) == len(ubs) > 1
        seen = {}
        for ub, (streams, cells) in zip(ubs, pl):
            assert streams.dtype == cells.dtype == np.int32 and not cells.flags.writeable
            assert cells.size == ub.n_tokens and len(streams) == (1 if unified else ub.n_seqs_unq)
            per = cells.shape[1]
            for r in range(ub.n_tokens):
                seen[(int(streams[r // per]), int(cells.reshape(-1)[r]))] = (int(ub.pos[0, r]), ub.seq_ids(r).tolist())
        kv = ctx.memory
        table = {(st, i): (p, list(s)) for st in range(kv.n_stream) for i, p, s in kv.cells(st)}
        assert table == seen
        # a failed decode (seq 0 jumps from pos 4 to 50: not continuous) keeps the last placements
        bad = layout_batch([1], "contiguous", pos0=50)
        with pytest.raises(BatchError):
            ctx.decode(bad)
        assert [c.tolist() for _, c in ctx.last_placements] == [c.tolist() for _, c in pl]
        ctx.memory.seq_rm(-1)                       # sequence ops do not change the recorded placements
        assert [c.tolist() for _, c in ctx.last_placements] == [c.tolist() for _, c in pl]


def test_plan_kv_errors_are_messages(capsys):
    # coupled sequences (shared prefix) with per-seq streams: SplitError, exit 1, no traceback
    assert main(["plan", "--seqs", "3,2", "--shared-prefix", "2", "--kv"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ubatch plan: SplitError: ") and "kv_unified" in err and "Traceback" not in err
    # 302 tokens fit n_batch but seq 0's 300 cells do not fit its 256-cell stream
    assert main(["plan", "--seqs", "300,2", "--n-ctx", "512", "--n-ubatch", "64", "--kv"]) == 1
    assert capsys.readouterr().err.startswith("ubatch plan: KVCacheFullError: ")
    assert main(["plan", "--seqs", "300", "--n-ctx", "256", "--kv"]) == 1
    assert "raise --n-ctx" in capsys.readouterr().err
    # the cache chooses the strategy: a contradicting choice is rejected
    assert main(["plan", "--kv", "--strategy", "seq"]) == 2
    assert "conflicts with --kv" in capsys.readouterr().err
    assert main(["plan", "--kv", "--kv-unified", "--strategy", "equal"]) == 2
    assert "split_simple" in capsys.readouterr().err
    assert main(["plan", "--kv-unified"]) == 2
    assert "only apply with --kv" in capsys.readouterr().err
    assert main(["plan", "--kv", "--strategy", "equal", "--sequential"]) == 0   # what the cache does anyway


@needs_mpl
def test_plan_kv_png_has_a_kv_panel(tmp_path, monkeypatch, capsys):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    texts = {}
    real_savefig = plt.Figure.savefig

    def spy(fig, path, *args, **kw):
        texts[str(path)] = [t.get_text() for ax in fig.axes for t in ax.texts]
        return real_savefig(fig, path, *args, **kw)

    monkeypatch.setattr(plt.Figure, "savefig", spy)
    streams, unified = tmp_path / "s.png", tmp_path / "u.png"
    assert main(["plan", "--seqs", "5,3,3,1", "--n-ubatch", "4", "--kv", "--png", str(streams)]) == 0
    assert main(["plan", "--seqs", "5,3,3,1", "--n-ubatch", "4", "--kv", "--kv-unified", "--layout", "interleaved",
                 "--png", str(unified)]) == 0
    for p in (streams, unified):
        assert p.read_bytes()[:8] == PNG_MAGIC
    t = texts[str(streams)]
    assert [x for x in t if x.startswith("stream ")] == [f"stream {s}" for s in range(4)]
    assert "5/256 used" in t and "c4\np4\nu3" in t            # seq 0's last cell, written by ubatch 3
    assert any("→s3:c0" in x for x in t)                        # ubatch rows name their (stream, cell)
    t = texts[str(unified)]
    assert [x for x in t if x.startswith("stream ")] == ["stream 0"] and "12/256 used" in t
    assert sorted(int(x.split("\n")[0][1:]) for x in t if re.match(r"c\d+\n", x)) == list(range(12))
    assert any(x.endswith("→c11\nout 3") for x in t)
    # unlabelled (many cells): ubatch blocks are still named
    big = tmp_path / "big.png"
    assert main(["plan", "--seqs", "60,30,5,1", "--n-ubatch", "32", "--kv", "--png", str(big)]) == 0
    assert {"u0", "u1", "u4"} <= set(texts[str(big)])
