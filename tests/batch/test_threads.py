"""Thread safety: CFFI releases the GIL inside every C call, so these tests really run C concurrently.
One BatchAllocator hammered by 8 threads; one Batch shared by 8 allocators; a chaos test mixing
init/split/reset/reads/close on one handle. Results must equal a serial run; nothing may crash."""
import random
import threading

import numpy as np
import pytest

from ubatch import Batch
from ubatch.batch.allocator import BatchAllocator
from ubatch.common.errors import UbatchError

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


# ------------------------------------------------------------------------------------ Context / KV cache
def _decode_rounds(ctx, s, rounds, m, rng):
    for r in range(rounds):
        toks = rng.integers(0, 200, m)
        ctx.decode(Batch.from_arrays(tokens=toks, seq_ids=[s] * m, output=[i == m - 1 for i in range(m)]))
        if r == rounds // 2:
            ctx.memory.seq_rm(s, p0=m)          # drop all but the first m positions, then continue after them


def _seq_state(ctx, s):
    kv = ctx.memory
    pos = sorted(p for st in range(kv.n_stream) for _, p, ids in kv.cells(st) if s in ids)
    return kv.seq_pos_min(s), kv.seq_pos_max(s), pos


@pytest.mark.parametrize("with_model", [False, True])
def test_one_context_many_threads_equals_serial(with_model):
    """8 threads decode their own sequence on one Context (seq ops in between; a 9th thread reads the
    outputs and the cache meanwhile). Decodes serialise on the context's lock, so every sequence ends as in
    a serial run: same positions, and (with the model) the same logits for one more token."""
    from ubatch import Context

    model = None
    if with_model:
        from ubatch.models import tiny_llama
        model = tiny_llama()
    rounds, m = 6, 12

    def make():
        return Context(model, n_ctx=1024, n_batch=64, n_ubatch=8, n_seq_max=N_THREADS, kv_unified=True)

    serial = make()
    for s in range(N_THREADS):
        _decode_rounds(serial, s, rounds, m, np.random.default_rng(s))
    shared = make()
    stop = threading.Event()

    def work(k):
        if k == N_THREADS:       # reader
            while not stop.is_set():
                _ = (shared.n_outputs, shared.output_ids, shared.last_ubatches, shared.memory.cells(0), repr(shared.memory))
                if with_model:
                    try:
                        assert np.isfinite(shared.get_logits()).all()
                    except UbatchError:
                        pass
            return
        _decode_rounds(shared, k, rounds, m, np.random.default_rng(k))

    readers = threading.Thread(target=work, args=(N_THREADS,))
    readers.start()
    try:
        _run_threads(work)
    finally:
        stop.set()
        readers.join()
    assert shared.memory.used(0) == serial.memory.used(0)
    for s in range(N_THREADS):
        assert _seq_state(shared, s) == _seq_state(serial, s)
        if with_model:
            probe = Batch.from_arrays(tokens=[7], seq_ids=[s], output=[True])
            serial.decode(probe)
            shared.decode(probe)
            np.testing.assert_allclose(shared.get_logits(), serial.get_logits(), rtol=1e-5, atol=1e-6)


def test_context_close_while_decoding():
    """close() from another thread waits for a running decode; later decodes raise "closed"."""
    from ubatch import Context

    ctx = Context(None, n_ctx=4096, n_batch=512, n_ubatch=16, n_seq_max=4, kv_unified=True)
    b = Batch.from_arrays(tokens=list(range(256)), seq_ids=[i % 4 for i in range(256)])
    errors = []

    def work(k):
        for _ in range(20):
            try:
                if k == 0:
                    ctx.close()
                ctx.decode(b)
                ctx.memory.seq_rm(-1)
            except UbatchError as e:
                errors.append(str(e))

    _run_threads(work, n=4)
    assert errors and all("closed" in e for e in errors), errors[:3]
    with Context(None, n_ctx=256) as c2:
        c2.decode(Batch.from_arrays(tokens=[1, 2]))
    with pytest.raises(UbatchError, match="closed"):
        c2.decode(Batch.from_arrays(tokens=[3], pos=[2]))
