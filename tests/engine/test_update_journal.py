"""The runner's stream copies move only the live cells and journal only what they overwrite: the result is
bitwise the whole-stream copy's, undo_update restores the K/V data bitwise, and a decode that fails after a
seq_cp between streams leaves the data as it was (Context uses the journal instead of a whole-K/V snapshot)."""
import numpy as np
import pytest

import ubatch
from ubatch import Batch, Context
from ubatch.compute import kernels
from ubatch.engine.model_runner import ModelRunner

MODEL = ubatch.models.tiny_llama()


def _fill(r: ModelRunner, rng, stream: int, cells) -> None:
    """Random K/V bytes (and a position) into the given cells of a stream, every layer."""
    st = r.stores[0]
    for a in r.k + r.v:
        raw = a.reshape(st.n_stream, st.kv_size, -1).view(np.uint8)
        raw[stream, cells] = rng.integers(1, 255, raw[stream, cells].shape, dtype=np.uint8) \
            if a.dtype == np.uint8 else np.frombuffer(
                rng.standard_normal(raw[stream, cells].size // a.itemsize).astype(a.dtype).tobytes(),
                np.uint8).reshape(raw[stream, cells].shape)
    st.pos[stream, cells] = np.arange(len(cells))


def _state(r: ModelRunner) -> list:
    return [a.copy() for a in r.k + r.v] + [st.pos.copy() for st in r.stores]


def _equal(xs, ys) -> bool:
    return all(x.tobytes() == y.tobytes() for x, y in zip(xs, ys))


def _whole_copy(state: list, pairs, n_arrays: int) -> list:
    out = [a.copy() for a in state]
    for src, dst in pairs:
        for a in out[:n_arrays + 1]:
            a[dst] = a[src]
    return out


@pytest.mark.parametrize("type_k", ["f32", "f16", "bf16"])
def test_copies_equal_whole_stream_copies_and_undo(type_k: str) -> None:
    r = ModelRunner(MODEL, n_stream=4, kv_size=16, n_threads=1, type_k=type_k, type_v="f16")
    rng = np.random.default_rng(1)
    _fill(r, rng, 0, [0, 1, 2, 5])
    _fill(r, rng, 2, [3, 4, 9])                   # a dst with data of its own, in cells src does not use
    for a in r.k + r.v:                           # bytes that are non-zero although the value is 0 (-0.0),
        if a.dtype != np.uint8:                   # and written bytes in a cell whose pos stayed -1
            a[0, 7] = -0.0
            a[2, 11] = 1.5
    assert (r.stores[0].pos[0, 7], r.stores[0].pos[2, 11]) == (-1, -1)
    before = _state(r)
    pairs = [(0, 2), (2, 1), (3, 0)]              # chained, and an empty stream over a full one
    want = _whole_copy(before, pairs, len(r.k) + len(r.v))
    undo: list = []
    r.update(pairs, None, undo=undo)
    assert _equal(_state(r), want)
    r.undo_update(undo)
    assert _equal(_state(r), before)


def test_shift_undo_restores_k_and_pos() -> None:
    r = ModelRunner(MODEL, n_stream=2, kv_size=8, n_threads=1)
    rng = np.random.default_rng(2)
    _fill(r, rng, 0, list(range(6)))
    _fill(r, rng, 1, [0, 1])
    before = _state(r)
    shift = np.zeros((2, 8), np.int32)
    shift[0, 2:6] = -2
    shift[1, 1] = 3
    undo: list = []
    r.update([(0, 1)], shift, undo=undo)
    k0 = before[0][0, 3].astype(np.float32)[None].copy()
    kernels.rope(k0, np.array([[-2]], np.int32), n_rot=MODEL.n_rot, base=MODEL.hparams.rope_params(0)[0])
    assert not np.array_equal(r.k[0][0, 3], before[0][0, 3])
    assert r.stores[0].pos[0, 3] == before[-1][0, 3] - 2
    r.undo_update(undo)
    assert _equal(_state(r), before)


def test_undo_of_a_partial_update() -> None:
    """A shift that raises after the copies ran: the records kept so far undo the copies."""
    r = ModelRunner(MODEL, n_stream=3, kv_size=8, n_threads=1)
    rng = np.random.default_rng(3)
    _fill(r, rng, 0, [0, 1, 2])
    before = _state(r)
    undo: list = []

    def bad_rope(il):
        raise RuntimeError("injected rope failure")
    r._rope = bad_rope
    shift = np.zeros((3, 8), np.int32)
    shift[1, 0] = 1
    with pytest.raises(RuntimeError, match="injected"):
        r.update([(0, 1), (0, 2)], shift, undo=undo)
    assert not _equal(_state(r), before)
    r.undo_update(undo)
    assert _equal(_state(r), before)


class _FailCompute:
    def __init__(self, runner) -> None:
        self.runner = runner

    def __call__(self, *a, **kw):
        raise RuntimeError("injected compute failure")


@pytest.mark.parametrize("kv_unified", [False, True])
def test_failed_decode_after_seq_cp_leaves_kv_data(kv_unified: bool) -> None:
    """Per-sequence KV: seq_cp(0, s) is a pending stream copy applied by the next decode; when its compute
    fails, the K/V data, the memory and the pending copies are as before, and the retry matches a twin."""
    ctxs = [Context(MODEL, n_ctx=4 * 64, n_batch=64, n_ubatch=64, n_seq_max=4, kv_unified=kv_unified)
            for _ in range(2)]
    for c in ctxs:
        c.decode(Batch.from_arrays(tokens=[5, 9, 13, 200, 7], pos=list(range(5)), seq_ids=[0] * 5,
                                   output=[0, 0, 0, 0, 1]))
        for s in (1, 2, 3):
            c.memory.seq_cp(0, s)
    ctx, twin = ctxs
    data = _state(ctx._runner)
    snap = ctx.memory.snapshot()
    step = Batch.from_arrays(tokens=[1, 2, 3, 4], pos=[5] * 4, seq_ids=[0, 1, 2, 3], output=[1] * 4)
    ctx._runner.compute = _FailCompute(ctx._runner)
    with pytest.raises(RuntimeError, match="injected"):
        ctx.decode(step)
    assert _equal(_state(ctx._runner), data)
    assert ctx.memory.equals(snap)
    del ctx._runner.compute
    for c in ctxs:
        c.decode(step)
    assert np.array_equal(ctx.get_logits(), twin.get_logits())
    assert _equal(_state(ctx._runner), _state(twin._runner))
