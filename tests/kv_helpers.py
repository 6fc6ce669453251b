"""Test helpers: place hand-made ubatches straight into a KVCache (no Context, no continuity checks)."""
from __future__ import annotations

import numpy as np

import ubatch
from ubatch.batch.allocator import BatchAllocator


def ubatches(kv, pos, seq_ids, n_ubatch=512, n_pos=1):
    """Splits a batch (pos: int[n] or int[n_pos, n]) the way the Context does for this cache."""
    pos = np.asarray(pos, np.int32)
    n = pos.shape[-1]
    if n_pos == 1:
        b = ubatch.Batch.from_arrays(tokens=np.arange(n) % 7, pos=pos, seq_ids=seq_ids)
    else:
        b = ubatch.Batch.from_arrays(embd=np.zeros((n, 2), np.float32), pos=pos, seq_ids=seq_ids, n_pos_per_embd=n_pos)
    a = BatchAllocator(n_pos)
    a.init(b, n_seq_max=kv.n_seq)
    out = []
    while True:
        ub = a.split_simple(n_ubatch) if kv.n_stream == 1 else a.split_equal(n_ubatch, sequential=True, strict=False)
        if ub is None:
            break
        out.append(ub)
    assert a.n_used == a.n_tokens
    return out


def place(kv, pos, seq_ids, n_ubatch=512, n_pos=1):
    """prepare + apply every ubatch (raises KVCacheFullError with the cache unchanged). Returns the ubatches."""
    ubs = ubatches(kv, pos, seq_ids, n_ubatch, n_pos)
    kv._prepare(ubs)
    kv._begin()
    try:
        for i, ub in enumerate(ubs):
            kv._apply(i, ub)
    except BaseException:
        kv._rollback()
        raise
    kv._commit()
    return ubs
