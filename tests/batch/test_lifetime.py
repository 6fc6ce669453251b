"""Lifetimes and leaks: UBatch views own their C record (valid after the allocator is reset, re-inited,
closed or collected, and after the UBatch itself is dropped); the allocator never keeps pointers into the
Batch; close() / context manager; flat RSS over many create/init/split/destroy cycles."""
import gc
import os

import numpy as np
import pytest

from ubatch import Batch
from ubatch.batch.allocator import BatchAllocator
from ubatch.common.errors import UbatchError

from harden_util import SPLITS, do_split, drain, ub_summary

UNDER_ASAN = "asan" in os.environ.get("LD_PRELOAD", "")


def _batch(seed, n=64, n_embd=0):
    rng = np.random.default_rng(seed)
    seq = rng.integers(0, 4, n)
    if n_embd:
        return Batch.from_arrays(embd=rng.standard_normal((n, n_embd)).astype(np.float32), seq_ids=seq,
                                 output=rng.random(n) < 0.5)
    return Batch.from_arrays(tokens=rng.integers(0, 500, n), seq_ids=seq, output=rng.random(n) < 0.5)


def _scribble():
    """Reuses freed memory: many allocations of the same sizes filled with other values."""
    junk = []
    for s in range(40):
        with BatchAllocator() as a:
            a.init(_batch(1000 + s, n_embd=8 if s % 2 else 0), n_seq_max=4)
            junk.extend(drain(a, "simple", 7))
        junk.append(np.full(4096, -7, np.int32))
    return len(junk)


def _views(ub):
    arrs = [ub.pos, ub.output, ub.n_seq_id, ub.seq_off, ub.seq_id_flat, ub.seq_id_unq, ub.seq_idx, ub.batch_idxs]
    arrs += [x for x in (ub.token, ub.embd) if x is not None]
    return arrs


@pytest.mark.parametrize("event", ["split_reset", "reinit", "close", "del_allocator", "del_ubatch", "del_batch"])
@pytest.mark.parametrize("n_embd", [0, 4])
def test_views_survive(event, n_embd):
    b = _batch(1, n_embd=n_embd)
    a = BatchAllocator()
    a.init(b, n_seq_max=4)
    ub = a.split_equal(16)
    views = _views(ub)
    copies = [v.copy() for v in views]
    summary = ub_summary(ub)
    assert all(not v.flags.writeable for v in views)
    if event == "split_reset":
        a.split_reset()
        drain(a, "seq", 5)
    elif event == "reinit":
        a.init(_batch(2, n=200, n_embd=n_embd), n_seq_max=4)
        drain(a, "simple", 50)
    elif event == "close":
        a.close()
    elif event == "del_allocator":
        del a
    elif event == "del_ubatch":
        del ub
    elif event == "del_batch":
        del b          # the allocator copied everything it needs at init
        a.split_reset()
    gc.collect()
    _scribble()
    for v, c in zip(views, copies):
        assert np.array_equal(v, c)
    if event == "del_batch":
        assert ub_summary(a.split_equal(16)) == summary
    elif event != "del_ubatch":
        assert ub_summary(ub) == summary


def test_batch_mutated_after_init_does_not_change_splits():
    b = Batch(8)
    for i in range(8):
        b.add_token(i, i // 2, i % 2, output=True)
    a = BatchAllocator()
    a.init(b, n_seq_max=2)
    first = drain(a, "equal", 4)
    b.clear()
    for i in range(8):
        b.add_token(100 + i, 50 + i, 1)
    a.split_reset()
    assert drain(a, "equal", 4) == first


def test_close_and_context_manager():
    b = _batch(3)
    with BatchAllocator() as a:
        a.init(b, n_seq_max=4)
        ub = a.split_simple(10)
    assert repr(a) == "BatchAllocator(closed)"
    with pytest.raises(UbatchError, match="closed"):
        a.init(b, n_seq_max=4)
    a.close()                       # idempotent
    assert ub.token.tolist() == b.token[:10].tolist()
    with pytest.raises(RuntimeError, match="inside"):
        with BatchAllocator() as c:
            c.init(b, n_seq_max=4)
            raise RuntimeError("inside")
    with pytest.raises(UbatchError, match="closed"):
        c.split_simple(1)           # closed by __exit__ even on an exception
    # a closed allocator is then collected normally (ffi.gc must not free the handle twice)
    del a, c
    gc.collect()


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _cycle(b, kind):
    a = BatchAllocator()
    a.init(b, n_seq_max=4, output_all=True)
    ub = do_split(a, kind, 8)
    n = ub.n_tokens + int(ub.pos[0, 0]) + len(a.out_ids)
    if kind == "equal":
        a.close()                   # explicit close on some cycles, ffi.gc on the others
    return n


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="RSS is read from /proc/self/statm (Linux only)")
def test_create_init_split_destroy_cycles_flat_rss():
    """100,000 cycles (about 5 s) in every profile except ASan, whose quarantine keeps freed memory
    resident: there 2,000 cycles and no RSS bound (ASan itself reports any use-after-free)."""
    cycles = 2_000 if UNDER_ASAN else 100_000
    batches = [_batch(s, n=16 + 8 * s, n_embd=4 if s % 2 else 0) for s in range(4)]
    for i in range(2_000):                      # warm-up: allocator pools, numpy caches
        _cycle(batches[i % 4], SPLITS[i % 4])
    gc.collect()
    rss0 = _rss_bytes()
    for i in range(cycles):
        _cycle(batches[i % 4], SPLITS[i % 4])
    gc.collect()
    growth = _rss_bytes() - rss0
    if not UNDER_ASAN:
        assert growth < 20 * 2**20, f"RSS grew by {growth / 2**20:.1f} MiB over {cycles} cycles"


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="RSS is read from /proc/self/statm (Linux only)")
def test_context_create_decode_destroy_cycles_flat_rss():
    """Context (KV cache + allocator) created, decoded into (automatic positions, 2 streams), closed or
    collected: 100,000 cycles in the fuzz profile, 20,000 otherwise (about 1 s); 1,000 under ASan."""
    from ubatch import Context

    fuzz = os.environ.get("HYPOTHESIS_PROFILE") == "fuzz"
    cycles = 1_000 if UNDER_ASAN else (100_000 if fuzz else 20_000)
    b = Batch.from_arrays(tokens=[1, 2, 3, 4, 5], seq_ids=[0, 1, 0, 1, 0], output=[1, 0, 1, 1, 1])

    def cycle(i):
        c = Context(None, n_ctx=256, n_batch=16, n_ubatch=4, n_seq_max=2)
        c.decode(b)
        c.memory.seq_rm(1)
        c.decode(Batch.from_arrays(tokens=[9], seq_ids=[1]))
        n = c.n_outputs + len(c.last_ubatches)
        if i % 2:
            c.close()
        return n

    for i in range(1_000):
        cycle(i)
    gc.collect()
    rss0 = _rss_bytes()
    for i in range(cycles):
        cycle(i)
    gc.collect()
    growth = _rss_bytes() - rss0
    if not UNDER_ASAN:
        assert growth < 20 * 2**20, f"RSS grew by {growth / 2**20:.1f} MiB over {cycles} Context cycles"
