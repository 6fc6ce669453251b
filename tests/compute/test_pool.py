"""The C core's one thread pool (csrc/common/ub_pool.c): its workers persist across calls of every kernel that
uses it (attention, sampling), are joined by kernels.pool_shutdown() and restarted on demand, and a forked
child gets a working pool of its own."""
import os
import signal
import time

import numpy as np
import pytest

from ubatch.compute import kernels, ops
from ubatch.engine.sampling import SampleBatch, SamplingParams, sample


def _n_tasks():
    """The pool's worker threads in this process (Linux: the threads named "ubatch-pool"), else None. Other
    threads (a test's Python threads still exiting, a library's) are not counted."""
    if not os.path.isdir("/proc/self/task"):
        return None
    n = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                n += f.read().strip() == "ubatch-pool"
        except OSError:  # the thread exited meanwhile
            pass
    return n


def _attention():
    rng = np.random.default_rng(2)
    q = rng.standard_normal((4, 8, 64)).astype(np.float32)
    k = rng.standard_normal((2, 64, 2, 64)).astype(np.float32)
    v = rng.standard_normal((2, 64, 2, 64)).astype(np.float32)
    rs = np.array([0, 1, 0, 1], np.int32)
    off = np.array([0, 10, 30, 50, 64], np.int32)
    cells = np.concatenate([np.arange(10), np.arange(20), np.arange(20), np.arange(14)]).astype(np.int32)
    return ops.attention_visible(q, k, v, rs, off, cells, n_threads=2)


def _sample(n_threads):
    """4 requests over a 100,000-entry vocabulary: enough work (n * n_vocab >= 2^18) for a second thread."""
    logits = np.random.default_rng(3).standard_normal((4, 100_000)).astype(np.float32)
    sb = SampleBatch()
    for i in range(4):
        sb.add(i, SamplingParams(temperature=0.8, top_k=40).validated(), seed=i, counter=0, history=None)
    return sample(logits, sb, n_threads=n_threads)[0]


@pytest.mark.skipif(_n_tasks() is None, reason="needs /proc/self/task to count the pool's threads (Linux)")
def test_shutdown_and_restart_attention_and_sampling_share_the_workers():
    a = _attention()
    kernels.pool_shutdown()
    n0 = _n_tasks()
    assert n0 == 0
    kernels.pool_shutdown()  # idempotent
    assert _n_tasks() == n0
    b = _attention()  # one worker starts again
    assert _n_tasks() == n0 + 1
    assert np.array_equal(a, b)
    s1 = _sample(2)  # the sampler runs on the same worker: no thread started or left behind per call
    assert _n_tasks() == n0 + 1
    kernels.pool_shutdown()
    s2 = _sample(2)  # ...and it starts the pool itself when nothing else has
    assert _n_tasks() == n0 + 1
    assert np.array_equal(s1, s2) and np.array_equal(s1, _sample(1))
    kernels.pool_shutdown()
    assert _n_tasks() == n0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is not available on this platform")
def test_fork_child_gets_a_working_pool():
    expected = _attention()  # the parent's worker exists now
    tokens = _sample(2)
    pid = os.fork()
    if pid == 0:  # child: the parent's workers are gone; the pool must start fresh ones, not hang
        code = 3
        try:
            before = _n_tasks()
            if np.array_equal(_attention(), expected) and np.array_equal(_sample(2), tokens):
                code = 0 if before is None or _n_tasks() == before + 1 else 4  # one new worker thread
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while True:  # a child stuck waiting for the parent's (absent) workers must fail the test, not hang it
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("forked child hung in a pooled kernel")
        time.sleep(0.01)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "child: 3 = wrong result, 4 = no fresh worker"
