"""Shared reads of copied cells (KVStore.shared_lists): after a per-sequence fork (seq_cp into other streams)
each forked row reads the source's copy of the common prompt; the results must be bitwise those of reading
its own copy (UBATCH_KV_SHARE=0), also after the source's cells are rewritten, shifted or restored, and a
cell must never be read in place of one whose bytes differ."""
import os

import numpy as np
import pytest

import ubatch
from ubatch.engine.kv_store import KVStore
from ubatch.model import fetch
from ubatch.model import fused
from ubatch.model.model import Model

_models = {}


def model(name):
    if name not in _models:
        _models[name] = ubatch.models.tiny_llama() if name == "tiny-llama" else Model.from_gguf(fetch.path(name))
    return _models[name]


class Spy:
    """Counts the ubatches whose lists KVStore.shared_lists rewrote (so a test knows sharing ran)."""

    def __init__(self, monkeypatch):
        self.moved = 0
        real = KVStore.shared_lists

        def spy(store, lists):
            got = real(store, lists)
            self.moved += got is not None
            return got
        monkeypatch.setattr(KVStore, "shared_lists", spy)


def fork_and_decode(m, share: bool, B: int = 4, P: int = 40, n_threads: int = 2) -> list:
    """A P-token prompt in sequence 0, seq_cp to B - 1 per-sequence streams, 6 greedy steps of all B;
    before step 3 sequence 0 drops its last 10 prompt tokens and decodes others in their place (its
    cells are rewritten while the forks still hold the old prompt); before step 5 sequence 1 is forked
    again from sequence 2 (a copy of a copy). Returns the logits of every step."""
    os.environ["UBATCH_KV_SHARE"] = "1" if share else "0"
    try:
        ctx = ubatch.Context(m, n_ctx=128 * B, n_batch=256, n_ubatch=256, n_seq_max=B, kv_unified=False,
                             n_threads=n_threads)
        rng = np.random.default_rng(1)
        prompt = [int(t) for t in rng.integers(3, m.n_vocab, P)]
        ctx.decode(ubatch.Batch.from_arrays(tokens=prompt, pos=list(range(P)), seq_ids=[0] * P,
                                            output=[0] * (P - 1) + [1]))
        for s in range(1, B):
            ctx.memory.seq_cp(0, s)
        last = [int(np.argmax(ctx.get_logits_ith(-1)))] * B
        out = []
        for step in range(6):
            if step == 3:
                ctx.memory.seq_rm(0, P - 10, -1)
                k = step + 10
                toks = [int(t) for t in rng.integers(3, m.n_vocab, k)]
                ctx.decode(ubatch.Batch.from_arrays(tokens=toks, pos=list(range(P - 10, P + step)),
                                                    seq_ids=[0] * k, output=[0] * (k - 1) + [1]))
            if step == 5:
                ctx.memory.seq_rm(1, -1, -1)
                ctx.memory.seq_cp(2, 1)
            b = ubatch.Batch.from_arrays(tokens=last, pos=[P + step] * B, seq_ids=list(range(B)), output=[1] * B)
            ctx.decode(b)
            lg = np.array(ctx.get_logits())
            out.append(lg)
            last = [int(x) for x in np.argmax(lg, axis=1)]
        return out
    finally:
        os.environ.pop("UBATCH_KV_SHARE", None)


@pytest.mark.parametrize("path", ["fused", "reference"])
def test_tiny_forks_share_bitwise(monkeypatch, path):
    spy = Spy(monkeypatch)
    fused.set_enabled(path == "fused")
    try:
        shared = fork_and_decode(model("tiny-llama"), True)
        assert spy.moved > 0, "no ubatch read a shared copy"
        own = fork_and_decode(model("tiny-llama"), False)
    finally:
        fused.set_enabled(None)
    for a, b in zip(shared, own):
        assert np.array_equal(a, b)


@pytest.mark.realmodel
@pytest.mark.parametrize("name", ["gemma3-270m", "qwen2.5-0.5b"])
def test_real_forks_share_bitwise(monkeypatch, name):
    spy = Spy(monkeypatch)
    shared = fork_and_decode(model(name), True, B=3)
    assert spy.moved > 0, "no ubatch read a shared copy"
    own = fork_and_decode(model(name), False, B=3, n_threads=1)
    for a, b in zip(shared, own):
        assert np.array_equal(a, b)


def _store(n_stream=3, kv_size=8):
    st = KVStore([0], n_stream=n_stream, kv_size=kv_size, n_head_kv=1, head_dim=4)
    rng = np.random.default_rng(0)
    flat = np.arange(kv_size, dtype=np.int64)                 # stream 0 written through the store
    st.write(0, flat, rng.standard_normal((kv_size, 1, 4)).astype(np.float32),
             rng.standard_normal((kv_size, 1, 4)).astype(np.float32))
    st.pos[0] = np.arange(kv_size)
    return st


def _lists(stream, cells):
    cells = np.asarray(cells, np.int32)
    return np.array([stream], np.int32), np.array([0, cells.size], np.int32), cells


def _check_same_bytes(st, lists):
    """Every cell the rewritten lists read holds the bytes of the cell it replaces."""
    got = st.shared_lists(lists)
    if got is None:
        return None
    rs, off, cells = lists
    own = np.repeat(rs.astype(np.int64), np.diff(off)) * st.kv_size + cells
    for a in (st.k[0], st.v[0]):
        flat = a.reshape(st.n_stream * st.kv_size, -1)
        assert np.array_equal(flat[got[2]], flat[own])
    return got[2]


def test_store_tags_follow_every_write():
    st = _store()
    st.copy_streams([(0, 1)])
    got = _check_same_bytes(st, _lists(1, range(8)))
    assert got is not None and list(got) == list(range(8))    # stream 1 reads stream 0's cells
    st.copy_streams([(1, 2)])                                 # a copy of a copy reads the first source
    assert list(_check_same_bytes(st, _lists(2, range(8)))) == list(range(8))
    # stream 0's cell 3 rewritten: streams 1 and 2 read their own cell 3 from now on
    st.write(0, np.array([3]), np.ones((1, 1, 4), np.float32), np.ones((1, 1, 4), np.float32))
    assert list(_check_same_bytes(st, _lists(1, range(8)))) == [0, 1, 2, 8 + 3, 4, 5, 6, 7]
    # stream 1's own cell 5 rewritten: it reads itself there
    st.write(0, np.array([8 + 5]), np.zeros((1, 1, 4), np.float32), np.zeros((1, 1, 4), np.float32))
    assert list(_check_same_bytes(st, _lists(1, range(8)))) == [0, 1, 2, 8 + 3, 4, 8 + 5, 6, 7]
    # a K-shift of stream 0's cell 6 (its K re-rotated)
    delta = np.zeros((3, 8), np.int32)
    delta[0, 6] = 2
    st.shift(delta, lambda il: (4, 0, 10000.0, 1.0))
    assert list(_check_same_bytes(st, _lists(2, range(8)))) == [0, 1, 2, 16 + 3, 4, 5, 16 + 6, 7]
    # restore / clear: nothing is read elsewhere until streams are copied again
    snap = st.snapshot()
    st.restore(snap)
    assert _check_same_bytes(st, _lists(1, range(8))) is None
    st.copy_streams([(0, 1)])
    assert _check_same_bytes(st, _lists(1, range(8))) is not None
    st.restore_cells(st.save_cells(np.array([0]), np.array([[1, 2]])))
    assert list(_check_same_bytes(st, _lists(1, range(8)))) == [0, 8 + 1, 8 + 2, 3, 4, 5, 6, 7]
    st.clear()
    assert _check_same_bytes(st, _lists(1, range(8))) is None


def test_store_undo_of_copy_reads_own():
    st = _store()
    recs = []
    st.copy_streams([(0, 1)], recs)
    assert _check_same_bytes(st, _lists(1, range(8))) is not None
    st.undo_op(recs[0])
    assert _check_same_bytes(st, _lists(1, range(8))) is None


def test_share_off_by_env(monkeypatch):
    st = _store()
    st.copy_streams([(0, 1)])
    monkeypatch.setenv("UBATCH_KV_SHARE", "0")
    assert st.shared_lists(_lists(1, range(8))) is None
