"""A failure during compute (injected) rolls the whole decode back: KV cells, heads, the pending
K-shift and the K/V data are as before the call, and later decodes match a twin that never failed."""
import numpy as np
import pytest

import ubatch
from ubatch import Batch, Context


def _prompt(n_seqs: int, n: int, start: int = 0) -> Batch:
    toks, pos, seqs = [], [], []
    for s in range(n_seqs):
        for k in range(n):
            toks.append((17 * s + 5 * k + 3) % 256)
            pos.append(start + k)
            seqs.append(s)
    out = [1 if (i + 1) % n == 0 else 0 for i in range(len(toks))]
    return Batch.from_arrays(tokens=toks, pos=pos, seq_ids=seqs, output=out)


def _ctx(**kw) -> Context:
    return Context(ubatch.models.tiny_llama(), n_ctx=512, n_batch=64, n_ubatch=4, n_seq_max=2, **kw)


class _FailOn:
    """Wraps a runner's compute so that its k-th call raises."""

    def __init__(self, runner, k: int) -> None:
        self.runner, self.k, self.calls = runner, k, 0
        self.orig = runner.compute

    def __call__(self, ub, place, *saved):
        self.calls += 1
        if self.calls == self.k:
            raise RuntimeError("injected compute failure")
        return self.orig(ub, place, *saved)


@pytest.mark.parametrize("kv_unified", [True, False])
@pytest.mark.parametrize("fail_at", [1, 2, 3])
def test_failed_compute_rolls_back_everything(kv_unified: bool, fail_at: int) -> None:
    ctx, twin = _ctx(kv_unified=kv_unified), _ctx(kv_unified=kv_unified)
    for c in (ctx, twin):
        c.decode(_prompt(2, 6))
        c.memory.seq_rm(0, 0, 2)              # context shift on seq 0: a K-shift is now pending
        c.memory.seq_add(0, 2, -1, -2)
    assert ctx.memory.has_pending_update()
    snap = ctx.memory.snapshot()
    data = ctx._runner.snapshot_kv()
    # seq 0 continues at 4 (shifted), seq 1 at 6; 10 rows -> 3 ubatches of n_ubatch 4
    batch = Batch.from_arrays(tokens=list(range(10, 20)), pos=[4, 6, 5, 7, 6, 8, 7, 9, 8, 10],
                              seq_ids=[0, 1] * 5, output=[1] * 10)
    ctx._runner.compute = _FailOn(ctx._runner, fail_at)
    with pytest.raises(RuntimeError, match="injected"):
        ctx.decode(batch)
    assert ctx.memory.equals(snap)
    assert ctx.memory.has_pending_update()                 # the K-shift is still pending, as before the call
    for a, b in zip(data[0] + data[1], ctx._runner.k + ctx._runner.v):
        assert np.array_equal(a, b)
    del ctx._runner.compute                      # back to the real method
    ctx.decode(batch)
    twin.decode(batch)
    assert np.array_equal(ctx.get_logits(), twin.get_logits())
    assert ctx.memory.cells(0) == twin.memory.cells(0)
