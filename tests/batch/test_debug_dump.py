"""UBATCH_DEBUG dumps (llama.cpp's LLAMA_BATCH_DEBUG format) on stderr."""
import re

import numpy as np
import pytest

import ubatch
from ubatch.batch import debug
from ubatch.batch.workload import layout_batch


@pytest.fixture
def level(monkeypatch):
    """Set UBATCH_DEBUG for one test and restore the module's level afterwards."""
    def set_level(v):
        if v is None:
            monkeypatch.delenv(debug.ENV, raising=False)
        else:
            monkeypatch.setenv(debug.ENV, str(v))
        return debug.reload()
    yield set_level
    monkeypatch.delenv(debug.ENV, raising=False)
    debug.reload()


def split_all(alloc, n_ubatch, how="equal"):
    out = []
    while True:
        ub = alloc.split_equal(n_ubatch) if how == "equal" else alloc.split_simple(n_ubatch)
        if ub is None:
            return out
        out.append(ub)


def test_parse_is_atoi_like():
    assert debug._parse(None) == 0
    assert debug._parse("") == 0
    assert debug._parse("2") == 2
    assert debug._parse(" 1x") == 1
    assert debug._parse("abc") == 0
    assert debug._parse("-1") == -1


def test_unset_prints_nothing(level, capfd):
    assert level(None) == 0
    a = ubatch.BatchAllocator()
    a.init(layout_batch([3, 2]), n_seq_max=2)
    assert len(split_all(a, 4)) > 0
    out, err = capfd.readouterr()
    assert err == "" and out == ""


def test_zero_is_off(level, capfd):
    assert level("0") == 0
    a = ubatch.BatchAllocator()
    a.init(layout_batch([2]), n_seq_max=1)
    split_all(a, 4)
    assert capfd.readouterr().err == ""


def test_level1_init_and_ubatches(level, capsys):
    assert level(1) == 1
    b = layout_batch([3, 2, 1], shared_prefix=2)      # rows 0-1 carry seqs {0,1,2}
    a = ubatch.BatchAllocator()
    a.init(b, n_seq_max=3)
    ubs = split_all(a, 4)
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines[0] == "init: input batch info:"
    assert "ubatch_print:   n_tokens     = 8" in lines
    assert "ubatch_print:   n_seq_tokens = 1" in lines
    assert "ubatch_print:   n_seqs       = 8" in lines
    assert "ubatch_print:   seq_id_unq = [ 0 1 2 ]" in lines
    assert "ubatch_print:   n_outputs  = 3" in lines
    seq_idx = [l for l in lines if "seq_idx" in l][0]
    assert re.search(r"= \[012\.{253}\]$", seq_idx)
    # per-sequence ranges and couplings (1 and 2 are listed after 0 in the prefix rows)
    assert "init:     0: pos = [   0,    4], cpl = -" in lines
    assert "init:     1: pos = [   0,    3], cpl = 0" in lines
    assert "init:     2: pos = [   0,    2], cpl = 0" in lines
    # one block per ubatch, numbered from 0, with the ubatch's own shape
    heads = [l for l in lines if l.startswith("ubatch_add: added ubatch")]
    assert heads == [f"ubatch_add: added ubatch {k} to split:" for k in range(len(ubs))]
    shapes = re.findall(r"n_seq_tokens = (\d+)\n.*n_seqs       = (\d+)", err)
    assert [(int(t), int(s)) for t, s in shapes[1:]] == [(u.n_seq_tokens, u.n_seqs) for u in ubs]
    assert "token     = [" not in err                   # rows only at level 2


def test_level2_rows(level, capsys):
    level(2)
    b = ubatch.Batch.from_arrays(tokens=[5, 6, 7, 8], pos=[0, 1, 0, 1], seq_ids=[0, 0, 3, 3], output=[0, 1, 0, 1])
    a = ubatch.BatchAllocator()
    a.init(b, n_seq_max=4)
    ub = a.split_equal(8)
    assert a.split_equal(8) is None
    lines = capsys.readouterr().err.splitlines()
    rows = [l for l in lines if re.match(r"ubatch_print:\s+\d+: ", l)]
    # 4 rows at init, 4 in the ubatch
    assert len(rows) == 8
    assert rows[0] == "ubatch_print:     0: id =      5, pos =    0, n_seq_id =  1, seq_id = [0...], output = 0"
    assert rows[3] == "ubatch_print:     3: id =      8, pos =    1, n_seq_id =  1, seq_id = [...3], output = 1"
    # ubatch rows follow the ubatch's order and name their batch row
    for r in range(ub.n_tokens):
        line = rows[4 + r]
        assert f"id = {int(ub.token[r]):6d}" in line
        assert line.endswith(f"batch = {int(ub.batch_idxs[r]):4d}")
        assert f"output = {int(ub.output[r])}" in line


def test_index_restarts_after_split_reset(level, capsys):
    level(1)
    a = ubatch.BatchAllocator()
    a.init(layout_batch([4, 4]), n_seq_max=2)
    n1 = len(split_all(a, 2, "simple"))
    a.split_reset()
    n2 = len(split_all(a, 2, "simple"))
    heads = [l for l in capsys.readouterr().err.splitlines() if l.startswith("ubatch_add")]
    assert n1 == n2 == 4
    assert [h.split()[3] for h in heads] == ["0", "1", "2", "3"] * 2


def test_mrope_embedding_rows_show_every_section(level, capsys):
    level(2)
    emb = np.arange(12, dtype=np.float32).reshape(3, 4)
    pos = np.array([[0, 0, 0], [0, 0, 1], [0, 1, 0], [0, 0, 0]])
    b = ubatch.Batch.from_arrays(embd=emb, pos=pos, seq_ids=[1, 1, 1], n_pos_per_embd=4)
    a = ubatch.BatchAllocator(n_pos_per_embd=4)
    a.init(b, n_seq_max=2)
    a.split_simple(8)
    err = capsys.readouterr().err
    assert "ubatch_print:   token      = (nil)" in err
    assert "ubatch_print:     2: [embd], pos = [   0,    1,    0,    0], n_seq_id =  1, seq_id = [.1], output = 1" in err


def test_failed_init_prints_nothing(level, capfd):
    level(2)
    a = ubatch.BatchAllocator()
    with pytest.raises(ubatch.BatchError):
        a.init(ubatch.Batch.from_arrays(tokens=[1, 2], seq_ids=[0, 9]), n_seq_max=2)
    assert capfd.readouterr().err == ""


def test_context_decode_is_dumped(level, capsys):
    """The decode loop goes through BatchAllocator, so UBATCH_DEBUG shows its init and ubatches."""
    level(1)
    ctx = ubatch.Context(None, n_ctx=64, n_batch=16, n_ubatch=4, n_seq_max=2)
    b = ubatch.Batch.from_arrays(tokens=[1, 2, 3, 4, 5, 6], pos=[0, 1, 2, 0, 1, 2], seq_ids=[0, 0, 0, 1, 1, 1],
                                 output=[0, 0, 1, 0, 0, 1])
    ctx.decode(b)
    err = capsys.readouterr().err
    assert err.count("init: input batch info:") >= 1
    heads = [l for l in err.splitlines() if l.startswith("ubatch_add: added ubatch")]
    assert len(heads) >= len(ctx.last_ubatches) >= 2
