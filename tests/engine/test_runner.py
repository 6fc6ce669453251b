"""ModelRunner: pooled embeddings against numpy, failure leaves K/V untouched, KV data ops, bad input."""
import numpy as np
import pytest

from decode_driver import NumpyCells
from ubatch import Batch, BatchAllocator
from ubatch.compute import kernels
from ubatch.compute import ops as cops
from ubatch.models import tiny_llama
from ubatch.memory.placement import Placement
from ubatch.engine.model_runner import ModelRunner

MODEL = tiny_llama()


def one_ubatch(tokens, pos, seq_ids, output_all=True):
    a = BatchAllocator()
    a.init(Batch.from_arrays(tokens=tokens, pos=pos, seq_ids=seq_ids), n_seq_max=4, n_vocab=256,
           output_all=output_all)
    a.split_reset()
    return a.split_simple(512)


SEQS = [{0}, {0}, {1}, {0}, {1, 2}, {2}, {1}, {2}]
POS = [0, 1, 0, 2, 1, 2, 2, 3]  # row 4 is shared by seqs 1 and 2; seq 2 has no position 0 (cls -> row 0)


@pytest.mark.parametrize("pooling", ["mean", "cls", "last"])
def test_pooled_embeddings_match_numpy(pooling):
    tokens = [5, 17, 200, 3, 9, 77, 8, 1]
    ub = one_ubatch(tokens, POS, SEQS)
    cells = NumpyCells(1, 64, 4, True)
    place = cells.place(ub)
    base = ModelRunner(MODEL, n_stream=1, kv_size=64, n_threads=1, embeddings=True, pooling="none")
    per_tok = base.compute(ub, place).embd  # all rows are outputs: [8, n_embd] in ubatch order
    r = ModelRunner(MODEL, n_stream=1, kv_size=64, n_threads=1, embeddings=True, pooling=pooling)
    res = r.compute(ub, place)
    assert res.embd is None and set(res.embd_seq) == {0, 1, 2}
    pos = ub.pos[0]
    for s in (0, 1, 2):
        rows = [i for i in range(ub.n_tokens) if s in ub.seq_ids(i)]
        if pooling == "mean":
            want = per_tok[rows].mean(axis=0)
        elif pooling == "cls":
            zero = [i for i in rows if pos[i] == 0]
            want = per_tok[zero[-1] if zero else 0]
        else:
            want = per_tok[max(rows, key=lambda i: (pos[i], i))]
        assert np.abs(res.embd_seq[s] - want).max() < 1e-5, s


@pytest.mark.parametrize("path", ["reference", "fused"])
def test_failure_leaves_kv_untouched(monkeypatch, path):
    """A failure in the second layer (after the first wrote its K/V rows) leaves the K/V data as before, on the
    Python reference path (attention fails) and on the fused path (the second C layer call fails)."""
    from ubatch.model import fused
    ub = one_ubatch([1, 2, 3], [0, 1, 2], [0, 0, 0])
    cells = NumpyCells(1, 32, 4, True)
    place = cells.place(ub)
    r = ModelRunner(MODEL, n_stream=1, kv_size=32, n_threads=1, embeddings=False, pooling="none")
    r.k[0][0, 5] = 7.0  # data outside the ubatch's cells
    r.k[0][0, 1] = 3.0  # data in a cell the ubatch overwrites (cells 0..2) before the injected failure
    before = r.snapshot_kv()
    calls = []
    mod, name = (cops, "attention_visible") if path == "reference" else (fused, "_call")
    real = getattr(mod, name)

    def failing(*a, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise MemoryError("injected")
        return real(*a, **kw)

    monkeypatch.setattr(mod, name, failing)
    fused.set_enabled(path == "fused")
    try:
        with pytest.raises(MemoryError):
            r.compute(ub, place)
    finally:
        fused.set_enabled(None)
    assert len(calls) == 2
    for a, b in zip(r.k + r.v, before[0] + before[1]):
        assert np.array_equal(a, b)


def test_update_copies_and_shift():
    r = ModelRunner(MODEL, n_stream=3, kv_size=8, n_threads=1, type_k="f16", type_v="f32")
    rng = np.random.default_rng(0)
    for l in range(MODEL.n_layer):
        r.k[l][0] = rng.standard_normal(r.k[l][0].shape).astype(np.float16)
        r.v[l][0] = rng.standard_normal(r.v[l][0].shape)
    src_k = [a[0].copy() for a in r.k]
    shift = np.zeros((3, 8), np.int32)
    shift[2, 3] = 5
    r.update([(0, 2), (2, 1)], shift)
    for l in range(MODEL.n_layer):
        assert np.array_equal(r.v[l][1], r.v[l][0]) and np.array_equal(r.v[l][2], r.v[l][0])
        assert np.array_equal(r.k[l][1], src_k[l])  # copied before the shift, stream 1 has no shift
        want = src_k[l][3].astype(np.float32)[None].copy()
        kernels.rope(want, np.array([[5]], np.int32), n_rot=16, base=10000.0)
        assert np.array_equal(r.k[l][2, 3], want[0].astype(np.float16))
        assert np.array_equal(np.delete(r.k[l][2], 3, axis=0), np.delete(src_k[l], 3, axis=0))
    with pytest.raises(ValueError, match="dst stream 3"):
        r.update([(0, 3)], None)
    with pytest.raises(ValueError, match="shift shape"):
        r.update([], np.zeros((3, 7), np.int32))
    r.clear()
    assert all(not a.any() for a in r.k + r.v)


def test_bad_placement_and_input():
    ub = one_ubatch([1, 2], [0, 1], [0, 0])
    r = ModelRunner(MODEL, n_stream=1, kv_size=16, n_threads=1)
    good = dict(streams=np.zeros(1, np.int32), cells=np.array([[0, 1]], np.int32), n_kv=16,
                mask=np.zeros((1, 2, 16), np.float32))
    cases = [
        (dict(cells=np.array([[0, 16]], np.int32)), "cells out of range"),
        (dict(cells=np.array([[3, 3]], np.int32)), "same cell"),
        (dict(streams=np.array([1], np.int32)), "streams"),
        (dict(n_kv=17, mask=np.zeros((1, 2, 17), np.float32)), "n_kv=17"),
        (dict(mask=np.zeros((1, 2, 8), np.float32)), "mask shape"),
        (dict(cells=np.array([[0], [1]], np.int32), streams=np.zeros(2, np.int32)), "mask shape"),
        (dict(streams=np.zeros(3, np.int32)), "not a multiple"),
    ]
    for change, msg in cases:
        p = Placement(**{**good, **change})
        with pytest.raises(ValueError, match=msg):
            r.compute(ub, p)
    assert all(not a.any() for a in r.k + r.v)
    with pytest.raises(ValueError, match="type_k"):
        ModelRunner(MODEL, n_stream=1, kv_size=4, type_k="q8_0")
    with pytest.raises(ValueError, match="pooling"):
        ModelRunner(MODEL, n_stream=1, kv_size=4, pooling="max")
