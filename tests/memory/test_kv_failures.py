"""Every kind of failed decode / dry run leaves the KV cache bit-identical (whole-state snapshot
compare), the outputs and last_ubatches untouched; includes the two llama.cpp rollback bugs we fix
(heads restored by the wrong stream index, SWA purges not undone)."""
import numpy as np
import pytest

import ubatch
from ubatch.engine.context import Context
from ubatch.common.errors import BatchError, KVCacheFullError, SplitError
from ubatch.memory.kv_cache import KVCache
from fake_runner import FakeModel, install
from kv_helpers import place, ubatches


def seq_batch(seq, start, n, out_last=True):
    return ubatch.Batch.from_arrays(tokens=[(3 * i) % 32 for i in range(n)], pos=list(range(start, start + n)),
                                    seq_ids=[seq] * n, output=[0] * (n - 1) + [int(out_last)])


def state(c):
    return c.memory.snapshot(), c.output_ids, [id(u) for u in c.last_ubatches]


def unchanged(c, st):
    snap, oids, ubs = st
    assert c.memory.equals(snap)
    assert np.array_equal(c.output_ids, oids)
    assert [id(u) for u in c.last_ubatches] == ubs


@pytest.mark.parametrize("n_ubatch", [256, 3])
def test_kv_full_unified(n_ubatch):
    c = Context(n_ctx=256, n_batch=256, n_ubatch=n_ubatch, n_seq_max=2, kv_unified=True)
    c.decode(seq_batch(0, 0, 200))
    c.memory.seq_add(0, 150, -1, 0)          # no-op
    st = state(c)
    with pytest.raises(KVCacheFullError) as e:
        c.decode(seq_batch(1, 0, 100))       # with n_ubatch=3 many ubatches fit before the failure
    assert e.value.code == 1
    unchanged(c, st)
    c.decode(seq_batch(1, 0, 50))


def test_kv_full_streams_heads_restored_by_their_own_index():
    """Streams {2, 3}: llama.cpp would restore their heads from the saved heads of streams 0 and 1."""
    c = Context(n_ctx=256, n_batch=256, n_ubatch=4, n_seq_max=4)
    c.decode(seq_batch(0, 0, 3))
    c.decode(seq_batch(2, 0, 20))
    c.decode(seq_batch(3, 0, 250))
    heads = [c.memory.head(s) for s in range(4)]
    assert heads == [3, 0, 20, 250]
    st = state(c)
    b = ubatch.Batch.from_arrays(tokens=[1] * 20, pos=list(range(20, 30)) + list(range(250, 260)),
                                 seq_ids=[2] * 10 + [3] * 10)
    with pytest.raises(KVCacheFullError):
        c.decode(b)
    unchanged(c, st)
    assert [c.memory.head(s) for s in range(4)] == heads


def test_batch_errors_and_split_error():
    c = Context(n_ctx=512, n_batch=64, n_ubatch=16, n_seq_max=3)
    c.decode(seq_batch(0, 0, 10))
    st = state(c)
    for b, exc, msg in [
        (seq_batch(0, 12, 3), BatchError, "inconsistent sequence positions"),      # Y != X + 1
        (seq_batch(3, 0, 3), BatchError, "seq_id"),                                # id >= n_seq_max
        (seq_batch(1, 0, 65), BatchError, "n_batch"),                              # > n_batch
        (ubatch.Batch.from_arrays(tokens=[1, 2], pos=[0, 0], seq_ids=[[1, 2], [1]]), SplitError, "coupled"),
    ]:
        with pytest.raises(exc, match=msg) as e:
            c.decode(b)
        assert e.value.code == (-1 if exc is BatchError else 1)
        unchanged(c, st)


def test_pending_shift_survives_failed_decode():
    c = Context(n_ctx=256, n_batch=256, n_ubatch=256, n_seq_max=1)
    c.decode(seq_batch(0, 0, 250))
    c.memory.seq_add(0, 100, -1, -1)
    st = state(c)
    assert c.memory.has_shift(0)
    with pytest.raises(KVCacheFullError):
        c.decode(seq_batch(0, 249, 10))
    unchanged(c, st)
    c.decode(seq_batch(0, 249, 6))
    assert not c.memory.has_shift(0) and c.memory.used(0) == 256


def test_dry_run_swa_purge_is_undone():
    kv = KVCache(1, 8, swa_type="standard", n_swa=4)
    for p in ([5], [1], [2, 3, 4], [6, 7], [8]):
        place(kv, p, [0] * len(p))
    snap = kv.snapshot()
    ub_purging = ubatches(kv, [9], [0])[0]             # reuses cell 0 and purges pos [1, 6) of seq 0
    ub_too_big = ubatches(KVCache(1, 16), list(range(9)), [1] * 9)[0]   # 9 tokens > 8 cells
    with pytest.raises(KVCacheFullError, match="n_tokens = 9 > size = 8"):
        kv.prepare([ub_purging, ub_too_big])
    assert kv.equals(snap)
    assert kv.seq_pos_min(0) == 1 and kv.used(0) == 8


def test_compute_failure_rolls_back(monkeypatch):
    install(monkeypatch)
    c = Context(FakeModel(), n_ctx=512, n_batch=64, n_ubatch=4, n_seq_max=2, kv_unified=True)
    c.decode(seq_batch(0, 0, 10))
    st = state(c)
    c._runner.fail_at = c._runner.calls + 3               # third ubatch of the next decode
    with pytest.raises(RuntimeError, match="compute failed"):
        c.decode(seq_batch(1, 0, 12))
    unchanged(c, st)
    assert c.get_logits_ith(9)[-1] == 9                   # previous outputs still readable


def test_seq_op_failures_unchanged():
    kv = KVCache(4, 32)
    for s in range(4):
        place(kv, list(range(5 + s)), [s] * (5 + s))
    kv.seq_add(1, 0, -1, 2)
    snap = kv.snapshot()
    for bad in (lambda: kv.seq_cp(0, 1, 2, 5), lambda: kv.seq_rm(4), lambda: kv.seq_keep(7),
                lambda: kv.seq_div(0, 0, 3, 0), lambda: kv.seq_add(2, 0, -1, 2**31 - 2)):
        with pytest.raises(ValueError):
            bad()
        assert kv.equals(snap)
    kv.seq_rm(0)
    assert not kv.equals(snap)
    kv.restore(snap)
    assert kv.equals(snap) and kv.seq_pos_max(0) == 4 and kv.seq_pos_min(1) == 2


def test_journal_transaction_rules():
    kv = KVCache(1, 16)
    place(kv, [0, 1, 2], [0, 0, 0])
    snap = kv.snapshot()
    with pytest.raises(RuntimeError, match="undo"):
        with kv.transaction():
            with pytest.raises(ValueError, match="already open"):
                with kv.transaction():
                    pass
            kv.seq_rm(0, 1, -1)
            kv.seq_cp(0, 3)
            kv.seq_add(3, -1, -1, 4)
            kv.clear()
            raise RuntimeError("undo")
    assert kv.equals(snap)
    with pytest.raises(ValueError, match="no KV transaction"):
        kv.commit(None)
