"""Test helpers: place hand-made batches straight into a memory (no Context, no continuity checks), through
the memory protocol only (ubatch/memory/protocol.py): init_batch -> begin -> apply -> commit / rollback."""
from __future__ import annotations

import numpy as np

import ubatch
from ubatch.batch.allocator import BatchAllocator
from ubatch.memory.protocol import cache_split, split_all


def _alloc(kv, pos, seq_ids, n_pos=1):
    pos = np.asarray(pos, np.int32)
    n = pos.shape[-1]
    if n_pos == 1:
        b = ubatch.Batch.from_arrays(tokens=np.arange(n) % 7, pos=pos, seq_ids=seq_ids)
    else:
        b = ubatch.Batch.from_arrays(embd=np.zeros((n, 2), np.float32), pos=pos, seq_ids=seq_ids, n_pos_per_embd=n_pos)
    a = BatchAllocator(n_pos)
    a.init(b, n_seq_max=kv.n_seq)
    return a


def ubatches(kv, pos, seq_ids, n_ubatch=512, n_pos=1):
    """Splits a batch (pos: int[n] or int[n_pos, n]) the way this cache needs (the protocol's rule)."""
    return split_all(_alloc(kv, pos, seq_ids, n_pos), n_ubatch, cache_split(kv.n_stream))


def plan(kv, pos, seq_ids, n_ubatch=512, n_pos=1):
    """memory.init_batch of a hand-made batch: its split and a successful dry run (memory unchanged)."""
    return kv.init_batch(_alloc(kv, pos, seq_ids, n_pos), n_ubatch)


def place(kv, pos, seq_ids, n_ubatch=512, n_pos=1):
    """init_batch + begin + apply of every ubatch + commit (raises KVCacheFullError with the memory
    unchanged). begin hands out (and so clears) a pending update, as a decode does. Returns the ubatches."""
    plan = kv.init_batch(_alloc(kv, pos, seq_ids, n_pos), n_ubatch)
    kv.begin(plan)
    try:
        for i in range(len(plan)):
            kv.apply(plan, i)
    except BaseException:
        kv.rollback(plan)
        raise
    kv.commit(plan)
    return plan.ubatches
