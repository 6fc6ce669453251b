"""Thread safety: CFFI releases the GIL inside every C call, so these tests really run C concurrently.
One BatchAllocator hammered by 8 threads; one Batch shared by 8 allocators; a chaos test mixing
init/split/reset/reads/close on one handle. Results must equal a serial run; nothing may crash."""
import random
import threading

import numpy as np
import pytest

from ubatch import Batch
from ubatch.allocator import BatchAllocator
from ubatch.errors import UbatchError

from harden_util import ALLOWED, SPLITS, do_split, drain, ub_summary

N_THREADS = 8


def _batch(n=3000, n_seq=6, coupled=False, seed=0):
    rng = np.random.default_rng(seed)
    seq = rng.integers(0, n_seq, n)
    if coupled:
        # every seq appears once per step t (pos t), sometimes sharing a row with the next seq of the step
        seq_ids, pos = [], []
        for t in range(n // n_seq):
            order = [int(s) for s in rng.permutation(n_seq)]
            while order:
                k = 2 if len(order) > 1 and rng.random() < 0.2 else 1
                seq_ids.append(order[:k])
                pos.append(t)
                order = order[k:]
        m = len(pos)
        return Batch.from_arrays(tokens=rng.integers(0, 1000, m), pos=pos, seq_ids=seq_ids, output=rng.random(m) < 0.3)
    return Batch.from_arrays(tokens=rng.integers(0, 1000, n), seq_ids=seq, output=rng.random(n) < 0.3)


def _run_threads(target, n=N_THREADS):
    errors = []
    start = threading.Barrier(n)

    def wrap(k):
        try:
            start.wait()
            target(k)
        except BaseException as e:  # reported in the main thread
            errors.append(e)

    ts = [threading.Thread(target=wrap, args=(k,)) for k in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]


@pytest.mark.parametrize("kind", SPLITS)
def test_one_allocator_many_threads_equals_serial(kind):
    b = _batch(coupled=(kind == "seq"))
    n_ubatch = 37
    serial = BatchAllocator()
    serial.init(b, n_seq_max=8)
    want = drain(serial, kind, n_ubatch)
    want_out = serial.out_ids.tolist()
    assert want and all(u[0] != "error" for u in want)

    shared = BatchAllocator()
    for _round in range(3):
        shared.init(b, n_seq_max=8)
        got = [[] for _ in range(N_THREADS)]

        def work(k):
            while True:
                if k % 2:   # readers interleaved with the splits
                    assert 0 <= shared.n_used <= b.n_tokens
                    assert len(shared.out_ids) <= shared.n_outputs
                    repr(shared)
                ub = do_split(shared, kind, n_ubatch)
                if ub is None:
                    return
                got[k].append(ub_summary(ub))

        _run_threads(work)
        flat = [u for g in got for u in g]
        assert sorted(map(repr, flat)) == sorted(map(repr, want)), "threads emitted other ubatches than a serial run"
        # splits are serialised: emission order (out_ids) equals the serial order
        assert shared.out_ids.tolist() == want_out and shared.n_used == b.n_tokens


def test_one_batch_many_allocators():
    b = _batch(n=2000, coupled=True, seed=1)
    cases = [(SPLITS[k % len(SPLITS)], 5 + 7 * k, k % 3 == 0) for k in range(N_THREADS)]
    serial = {}
    for kind, n_ubatch, output_all in cases:
        a = BatchAllocator()
        a.init(b, n_seq_max=8, output_all=output_all)
        serial[(kind, n_ubatch, output_all)] = drain(a, kind, n_ubatch)
    results = [None] * N_THREADS

    def work(k):
        kind, n_ubatch, output_all = cases[k]
        out = []
        for _ in range(4):
            with BatchAllocator() as a:
                a.init(b, n_seq_max=8, output_all=output_all)
                out.append(drain(a, kind, n_ubatch))
        results[k] = out

    _run_threads(work)
    for k, case in enumerate(cases):
        assert all(r == serial[case] for r in results[k]), f"thread {k} {case} differs from the serial run"


def test_chaos_on_one_handle_never_crashes():
    """Random init/split/reset/reads from 8 threads, then a close in the middle: only allowed errors; after
    the close everything says "closed"; ubatches taken before stay readable."""
    batches = [_batch(n=400, seed=s) for s in range(3)] + [_batch(n=300, coupled=True, seed=9)]
    a = BatchAllocator()
    kept = []
    closed = threading.Event()

    def work(k):
        rng = random.Random(k)
        for step in range(300):
            if k == 0 and step == 150:
                a.close()
                closed.set()
            op = rng.randrange(7)
            try:
                if op == 0:
                    a.init(rng.choice(batches), n_seq_max=8, output_all=rng.random() < 0.5)
                elif op == 1:
                    a.split_reset()
                elif op == 2:
                    _ = (a.n_tokens, a.n_used, a.n_outputs, a.has_coupled, a.seq_pos_range(rng.randrange(8)))
                elif op == 3:
                    _ = (a.out_ids, a.pos, a.output, repr(a))
                else:
                    ub = do_split(a, rng.choice(SPLITS), rng.randrange(1, 50))
                    if ub is not None and len(kept) < 200:
                        kept.append((ub, ub_summary(ub)))
            except ALLOWED as e:
                assert str(e)
                if closed.is_set() and step > 150:   # this thread's op began after the close
                    assert "closed" in str(e), e

    _run_threads(work)
    with pytest.raises(UbatchError, match="closed"):
        a.split_simple(4)
    for ub, summary in kept:
        assert ub_summary(ub) == summary


def test_close_while_other_threads_read():
    """Reproducer of the unguarded accessors (n_tokens, has_coupled, seq_pos_range called the C handle
    without the lock): a close() in another thread freed the handle mid-call, a heap-use-after-free that
    ASan reports (make asan). Now every accessor holds the lock and raises "closed" afterwards."""
    b = Batch.from_arrays(tokens=list(range(500)), seq_ids=[i % 4 for i in range(500)])
    for _ in range(300):
        a = BatchAllocator()
        a.init(b, n_seq_max=4)
        stop = threading.Event()
        seen = []

        def reader():
            while not stop.is_set():
                try:
                    _ = (a.n_tokens, a.n_used, a.has_coupled, a.seq_pos_range(1), a.n_outputs)
                except UbatchError as e:
                    seen.append(str(e))
                    return

        t = threading.Thread(target=reader)
        t.start()
        a.close()
        stop.set()
        t.join()
        assert all("closed" in m for m in seen)


def test_batch_growing_while_allocators_init_on_it():
    """A writer appends rows of 16 seq ids (regrowing the batch's seq-id storage 4 times per batch) while 4
    threads init on the same Batch. Each init sees a consistent prefix of the rows; none may read freed
    storage (before the fix, the old seq-id array was freed while a C init still read it: ASan
    heap-use-after-free)."""
    cap, ids = 1500, list(range(16))
    for _round in range(20):
        b = Batch(cap)
        b.add_token(0, 0, ids)
        done = threading.Event()

        def writer():
            for i in range(1, cap):
                b.add_token(i, i, ids)
            done.set()

        def initer(k):
            a = BatchAllocator()
            while not done.is_set():
                a.init(b, n_seq_max=16)
                n = a.n_tokens
                assert 1 <= n <= cap and a.pos[0, n - 1] == n - 1 and a.split_seq(n).n_tokens == n

        _run_threads(lambda k: writer() if k == 0 else initer(k), n=5)
