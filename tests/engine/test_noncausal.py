"""Non-causal attention (causal_attn=False): every token of a sequence sees all of that sequence's cells;
a batch larger than n_ubatch is refused up front (llama.cpp aborts)."""
import numpy as np
import pytest

import ubatch


def _ctx(**kw) -> ubatch.Context:
    return ubatch.Context(ubatch.models.tiny_llama(), n_ctx=256, n_batch=64, n_ubatch=16, **kw)


def _batch():
    return ubatch.Batch.from_arrays(tokens=[5, 17, 42, 7, 99, 3], pos=list(range(6)), seq_ids=[0] * 6,
                                    output=[1] * 6)


def _masks(ctx: ubatch.Context) -> list:
    """Records the Placement masks the context hands to its runner."""
    seen, compute = [], ctx._runner.compute

    def spy(ub, place, *saved):
        seen.append((place.cells.copy(), place.mask.copy()))
        return compute(ub, place, *saved)

    ctx._runner.compute = spy
    return seen


def test_noncausal_rows_see_their_whole_sequence() -> None:
    causal, bidir = _ctx(), _ctx(causal_attn=False)
    seen_c, seen_b = _masks(causal), _masks(bidir)
    causal.decode(_batch())
    bidir.decode(_batch())
    (cells_c, mask_c), = seen_c
    (cells_b, mask_b), = seen_b
    assert cells_c.tolist() == cells_b.tolist() == [[0, 1, 2, 3, 4, 5]]
    cols = cells_b[0]
    assert (mask_b[0][:, cols] == 0).all()                   # every row sees all six cells
    assert np.isneginf(mask_b[0][:, 6:]).all()               # and nothing else
    assert (mask_c[0][:, cols] == np.where(np.tril(np.ones((6, 6))) > 0, 0.0, -np.inf)).all()
    # so the first token's logits change once it sees the future
    assert np.abs(causal.get_logits_ith(0) - bidir.get_logits_ith(0)).max() > 1e-3


def test_noncausal_batch_larger_than_n_ubatch_is_refused() -> None:
    ctx = _ctx(causal_attn=False)
    snap = ctx.memory.snapshot()
    batch = ubatch.Batch.from_arrays(tokens=list(range(20)), pos=list(range(20)))
    with pytest.raises(ubatch.BatchError, match="non-causal attention requires n_ubatch >= n_tokens: n_tokens = 20"):
        ctx.decode(batch)
    assert ctx.memory.equals(snap)
