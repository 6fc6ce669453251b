"""Context: parameter derivation, strategies, output bookkeeping (out_ids, lazy swaps, getters and
their llama.cpp error reasons), pooled embeddings, runner hand-off."""
import numpy as np
import pytest

import ubatch
from ubatch.engine.context import Context
from ubatch.common.errors import BatchError, UbatchError
from fake_runner import FakeModel, install


def batch(pos, seq_ids, output=None, tokens=None):
    n = len(pos)
    tokens = [(7 * i + 3) % 32 for i in range(n)] if tokens is None else tokens
    return ubatch.Batch.from_arrays(tokens=tokens, pos=pos, seq_ids=seq_ids, output=output)


def lens_batch(lengths, start=0):
    pos, sids, out = [], [], []
    for s, n in enumerate(lengths):
        pos += list(range(start, start + n)); sids += [s] * n; out += [0] * (n - 1) + [1]
    return batch(pos, sids, out)


@pytest.mark.parametrize("kw,want", [
    (dict(n_ctx=256, n_batch=256, n_ubatch=3, n_seq_max=4), (1024, 256, 256, 3, 4)),
    (dict(n_ctx=100, n_batch=512, n_ubatch=512), (256, 256, 100, 100, 1)),
    (dict(n_ctx=1000, n_batch=64, n_ubatch=0, n_seq_max=3), (1536, 512, 64, 64, 3)),
    (dict(n_ctx=1000, n_seq_max=3, kv_unified=True), (1024, 1024, 512, 512, 3)),
    (dict(n_ctx=512, n_seq_max=0), (512, 512, 512, 512, 1)),
])
def test_parameter_derivation(kw, want):
    c = Context(**kw)
    assert (c.n_ctx, c.n_ctx_seq, c.n_batch, c.n_ubatch, c.n_seq_max) == want
    assert c.memory.size == c.n_ctx_seq
    assert c.memory.n_stream == (1 if kw.get("kv_unified") or c.n_seq_max == 1 else c.n_seq_max)


def test_bad_parameters():
    with pytest.raises(ValueError, match="n_seq_max"):
        Context(n_seq_max=257)
    with pytest.raises(ValueError, match="pooling"):
        Context(pooling="max")
    with pytest.raises(ValueError, match="type_k"):
        Context(type_k="q8")
    with pytest.raises(ValueError, match="n_ctx"):
        Context(n_ctx=0)


def test_planning_only_getters_raise():
    c = Context(n_ctx=256)
    assert c.decode(lens_batch([4])) == 0
    with pytest.raises(UbatchError, match="no logits"):
        c.get_logits_ith(3)
    with pytest.raises(UbatchError, match="no logits"):
        c.get_logits()
    with pytest.raises(UbatchError, match="no embeddings"):
        c.get_embeddings_seq(0)
    assert c.output_ids[3] == 0 and c.n_outputs == 1


def test_strategies_and_last_ubatches():
    c = Context(n_ctx=1024, n_batch=256, n_ubatch=8, n_seq_max=4, kv_unified=True)
    c.decode(lens_batch([5, 5, 5, 1]))
    assert [u.n_tokens for u in c.last_ubatches] == [8, 8]          # split_simple
    c = Context(n_ctx=1024, n_batch=256, n_ubatch=8, n_seq_max=4)
    c.decode(lens_batch([5, 5, 5, 1]))
    ubs = c.last_ubatches
    assert [u.n_tokens for u in ubs] == [4, 6, 6]                    # split_equal(sequential), spec 7.2
    assert ubs[0].batch_idxs.tolist() == [0, 5, 10, 15]
    assert c.output_swaps == [(0, 1), (1, 2), (2, 3)]
    oid = c.output_ids
    assert {i: int(oid[i]) for i in np.nonzero(oid >= 0)[0]} == {4: 0, 9: 1, 14: 2, 15: 3}
    # 4 one-token seqs with n_ubatch = 3 run as ONE 4-token ubatch (strict=False, as llama.cpp)
    c = Context(n_ctx=1024, n_batch=256, n_ubatch=3, n_seq_max=4)
    c.decode(lens_batch([1, 1, 1, 1]))
    assert [u.n_tokens for u in c.last_ubatches] == [4]


def test_getters_with_runner(monkeypatch):
    install(monkeypatch)
    c = Context(FakeModel(), n_ctx=1024, n_batch=256, n_ubatch=8, n_seq_max=4)
    b = lens_batch([5, 5, 5, 1])
    toks = [(7 * i + 3) % 32 for i in range(16)]
    c.decode(b)
    r = c._runner
    assert [len(p.streams) for p in r.placements] == [4, 3, 3]
    assert r.placements[1].streams.tolist() == [0, 1, 2] and r.placements[1].cells.tolist() == [[1, 2]] * 3
    L = c.get_logits()
    assert L.shape == (4, 32) and L[:, -1].tolist() == [4, 9, 14, 15]     # batch order after the swaps
    assert np.argmax(c.get_logits_ith(15)[:-1]) == toks[15]
    assert c.get_logits_ith(-1)[-1] == 15 and c.get_logits_ith(-4)[-1] == 4
    with pytest.raises(IndexError, match=r"negative index out of range \[0, 4\)"):
        c.get_logits_ith(-5)
    with pytest.raises(IndexError, match=r"batch.logits\[0\] != true"):
        c.get_logits_ith(0)
    with pytest.raises(IndexError, match=r"batch.logits\[100\] != true"):
        c.get_logits_ith(100)
    with pytest.raises(IndexError, match=r"out of range \[0, 256\)"):
        c.get_logits_ith(256)
    with pytest.raises(UbatchError, match="embeddings=False"):
        c.get_embeddings_ith(4)


def test_embeddings_all_outputs(monkeypatch):
    install(monkeypatch)
    c = Context(FakeModel(), n_ctx=1024, n_batch=256, n_ubatch=8, n_seq_max=4, embeddings=True)
    c.decode(lens_batch([5, 5, 5, 5]))
    assert c.n_outputs == 20
    assert c.get_embeddings()[:, 0].tolist() == list(range(20))
    assert c.get_embeddings_ith(7)[0] == 7
    assert len(c.output_swaps) == 12          # spec 7.1: C equal, every token an output


def test_pooled_split_seq(monkeypatch):
    install(monkeypatch)
    c = Context(FakeModel(), n_ctx=256, n_batch=64, n_ubatch=8, n_seq_max=3, kv_unified=True, embeddings=True,
                pooling="mean")
    c.decode(lens_batch([5, 3, 6]))
    assert [u.seq_id_unq.tolist() for u in c.last_ubatches] == [[0], [1], [2]]
    assert c.get_embeddings_seq(2)[0] == 2.0
    with pytest.raises(KeyError):
        c.get_embeddings_seq(5)
    with pytest.raises(UbatchError, match="pooling"):
        c.get_embeddings_ith(0)
    snap = c.memory.snapshot()
    with pytest.raises(BatchError, match="sequence 0 does not fit in one ubatch"):
        c.decode(lens_batch([9], start=5))
    assert c.memory.equals(snap)


def test_update_handed_to_runner(monkeypatch):
    install(monkeypatch)
    c = Context(FakeModel(), n_ctx=768, n_batch=64, n_ubatch=64, n_seq_max=3)
    c.decode(lens_batch([6]))
    c.memory.seq_cp(0, 1)
    c.memory.seq_add(0, 2, -1, -1)
    c.decode(batch([5, 6], [0, 1]))
    copies, shift = c._runner.updates[-1]
    assert copies == [(0, 1)] and shift[0, 2:6].tolist() == [-1] * 4 and shift[1].sum() == 0
    assert not c.memory.has_shift(0)
