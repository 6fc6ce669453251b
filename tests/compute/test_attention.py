"""The C attention kernel (online softmax, GQA, stream groups, f32/f16 K/V) against a float64 numpy reference."""
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from ubatch.compute import kernels


def reference(q, k, v, streams, mask, scale):
    ns, per, n_head, hd = q.shape
    n_kv = mask.shape[2]
    r = n_head // k.shape[2]
    out = np.zeros(q.shape, np.float64)
    for g in range(ns):
        kk = k[streams[g], :n_kv].astype(np.float64)
        vv = v[streams[g], :n_kv].astype(np.float64)
        for h in range(n_head):
            s = q[g, :, h].astype(np.float64) @ kk[:, h // r].T * scale + mask[g]
            mx = s.max(axis=1, keepdims=True)
            seen = np.isfinite(mx[:, 0])
            p = np.exp(s - np.where(seen[:, None], mx, 0.0))
            l = p.sum(axis=1, keepdims=True)
            out[g, :, h] = np.where(seen[:, None], (p @ vv[:, h // r]) / np.where(l > 0, l, 1.0), 0.0)
    return out


def make_case(rng, *, ns, per, n_head_kv, ratio, hd, n_kv, kv_size, n_stream, dtype, hole_p=0.3):
    n_head = n_head_kv * ratio
    q = rng.standard_normal((ns, per, n_head, hd)).astype(np.float32)
    k = rng.standard_normal((n_stream, kv_size, n_head_kv, hd)).astype(dtype)
    v = rng.standard_normal((n_stream, kv_size, n_head_kv, hd)).astype(dtype)
    mask = np.where(rng.random((ns, per, n_kv)) < hole_p, -np.inf, 0.0).astype(np.float32)
    mask[0, 0, :] = -np.inf  # a fully masked row
    if per > 2:
        mask[-1, 1, : n_kv // 2] = -np.inf  # a long hole
    streams = rng.integers(0, n_stream, ns).astype(np.int32)
    return q, k, v, streams, mask


CASES = [
    # ns, per, n_head_kv, ratio, hd, n_kv, kv_size, n_stream, dtype
    (1, 1, 2, 1, 16, 1, 8, 1, np.float32),
    (1, 7, 2, 2, 16, 37, 40, 1, np.float32),
    (3, 1, 2, 4, 64, 300, 301, 4, np.float16),
    (2, 5, 1, 4, 128, 257, 300, 2, np.float32),
    (4, 3, 3, 2, 24, 129, 129, 4, np.float16),
    (2, 40, 2, 4, 128, 513, 520, 3, np.float32),
    (1, 9, 4, 1, 20, 17, 33, 1, np.float16),   # head_dim not a multiple of 8: generic loops
    (5, 2, 2, 2, 80, 95, 100, 5, np.float32),
    # decode shapes: kv heads grouped per tile, every query-group width of the SIMD kernels
    (2, 1, 8, 4, 64, 100, 128, 2, np.float32),   # GQA 4:1, 8 kv heads (head blocking)
    (3, 1, 4, 3, 40, 70, 80, 3, np.float16),     # 3 queries per kv head, hd 40 (16 + 16 + 8 columns)
    (2, 1, 4, 2, 96, 64, 64, 2, np.float32),     # 2 per kv head, hd 96 (32-column blocks), n_kv = 2 chunks
    (2, 1, 6, 1, 256, 33, 40, 2, np.float16),    # no GQA (one query per kv head), hd 256, one-cell tail
    (1, 1, 2, 8, 128, 20, 24, 1, np.float32),    # n_kv below one chunk
    (2, 3, 2, 5, 32, 150, 160, 2, np.float32),   # 15 queries per kv head: groups of 4, 4, 4, 3
]


@pytest.mark.parametrize("case", CASES, ids=[f"ns{c[0]}-per{c[1]}-r{c[3]}-hd{c[4]}-kv{c[5]}-{np.dtype(c[8]).name}"
                                             for c in CASES])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_attention_matches_numpy(case, n_threads):
    ns, per, hkv, ratio, hd, n_kv, kv_size, n_stream, dtype = case
    rng = np.random.default_rng(hash(case[:8]) % 2**32)
    q, k, v, streams, mask = make_case(rng, ns=ns, per=per, n_head_kv=hkv, ratio=ratio, hd=hd, n_kv=n_kv,
                                       kv_size=kv_size, n_stream=n_stream, dtype=dtype)
    out = kernels.attention(q, k, v, streams, mask, n_threads=n_threads)
    ref = reference(q, k, v, streams, mask, 1.0 / np.sqrt(hd))
    assert not np.isnan(out).any()
    assert np.abs(out - ref).max() < 2e-5
    assert (out[0, 0] == 0).all()  # the fully masked row is zeros


def test_mixed_kv_types_and_thread_independence():
    rng = np.random.default_rng(7)
    q, k, v, streams, mask = make_case(rng, ns=3, per=6, n_head_kv=2, ratio=4, hd=64, n_kv=200, kv_size=210,
                                       n_stream=3, dtype=np.float32)
    v16 = v.astype(np.float16)
    o1 = kernels.attention(q, k, v16, streams, mask, n_threads=1)
    o2 = kernels.attention(q, k, v16, streams, mask, n_threads=2)
    assert np.array_equal(o1, o2)  # one thread owns each row: bit-identical whatever n_threads
    assert np.abs(o1 - reference(q, k, v16, streams, mask, 1 / 8.0)).max() < 2e-5


def test_finite_mask_bias_and_cells_beyond_n_kv_ignored():
    rng = np.random.default_rng(3)
    q, k, v, streams, mask = make_case(rng, ns=1, per=4, n_head_kv=1, ratio=2, hd=16, n_kv=30, kv_size=64,
                                       n_stream=1, dtype=np.float32, hole_p=0.0)
    mask = mask + rng.standard_normal(mask.shape).astype(np.float32)  # additive bias, as ggml's soft_max_ext
    k[:, 30:] = np.nan  # cells past n_kv must never be read
    v[:, 30:] = np.nan
    out = kernels.attention(q, k, v, streams, mask)
    assert np.abs(out - reference(q, k[:, :30], v[:, :30], streams, mask, 0.25)).max() < 2e-5


@pytest.mark.parametrize("bad, msg", [
    (lambda a: a.update(q=a["q"].astype(np.float64)), "q must have dtype float32"),
    (lambda a: a.update(streams=np.array([5], np.int32)), "streams"),
    (lambda a: a.update(mask=np.zeros((1, 2, 99), np.float32)), "n_kv=99"),
    (lambda a: a.update(mask=np.full((1, 2, 8), np.nan, np.float32)), "NaN"),
    (lambda a: a.update(v=np.zeros((1, 16, 2, 8), np.float32)), "v shape"),
    (lambda a: a.update(k=np.zeros((1, 16, 3, 16), np.float32), v=np.zeros((1, 16, 3, 16), np.float32)),
     "multiple of n_head_kv"),
    (lambda a: a.update(q=np.zeros((1, 2, 4, 16), np.float32)[:, :, :, ::1].transpose(0, 1, 2, 3)[::-1]),
     None),
])
def test_bad_arguments_raise(bad, msg):
    a = dict(q=np.zeros((1, 2, 4, 16), np.float32), k=np.zeros((1, 16, 2, 16), np.float32),
             v=np.zeros((1, 16, 2, 16), np.float32), streams=np.zeros(1, np.int32),
             mask=np.zeros((1, 2, 8), np.float32))
    bad(a)
    if msg is None:  # a valid call (reversed view of a 1-group array is still contiguous)
        kernels.attention(**a)
        return
    with pytest.raises(ValueError, match=msg):
        kernels.attention(**a)


def test_non_contiguous_rejected():
    q = np.zeros((1, 2, 4, 32), np.float32)[:, :, :, ::2]
    with pytest.raises(ValueError, match="C-contiguous"):
        kernels.attention(q, np.zeros((1, 4, 2, 16), np.float32), np.zeros((1, 4, 2, 16), np.float32),
                          np.zeros(1, np.int32), np.zeros((1, 2, 4), np.float32))


def test_masked_runs_skip_whole_chunks():
    """Long -inf runs (whole 32-cell chunks hidden for some tokens, visible to others in the same tile)."""
    rng = np.random.default_rng(11)
    q, k, v, streams, mask = make_case(rng, ns=2, per=9, n_head_kv=2, ratio=4, hd=64, n_kv=300, kv_size=300,
                                       n_stream=2, dtype=np.float32, hole_p=0.05)
    mask[0, :4, 0:200] = -np.inf      # first tokens see only the end
    mask[0, 4:, 150:] = -np.inf       # later tokens only the start
    mask[1, :, 64:256] = -np.inf      # a hole of 6 chunks for every token
    mask[1, 8, :] = -np.inf           # and one token sees nothing
    for nt in (1, 2):
        out = kernels.attention(q, k, v, streams, mask, n_threads=nt)
        assert np.abs(out - reference(q, k, v, streams, mask, 1 / 8.0)).max() < 2e-5
        assert (out[1, 8] == 0).all()


def test_results_independent_of_thread_count_with_head_blocking():
    """Decode shape whose kv-head grouping per tile changes with n_threads: rows must be bit-identical."""
    rng = np.random.default_rng(5)
    q, k, v, streams, mask = make_case(rng, ns=1, per=1, n_head_kv=8, ratio=4, hd=64, n_kv=600, kv_size=640,
                                       n_stream=1, dtype=np.float32, hole_p=0.1)  # > 1M MACs: threads used
    outs = [kernels.attention(q, k, v, streams, mask, n_threads=nt) for nt in (1, 2, 3, 8)]
    for o in outs[1:]:
        assert np.array_equal(o, outs[0])
    assert np.abs(outs[0] - reference(q, k, v, streams, mask, 1 / 8.0)).max() < 2e-5


def test_concurrent_calls_from_python_threads():
    """Several Python threads share the persistent pool (the GIL is released): every result stays exact."""
    rng = np.random.default_rng(9)
    cases = [make_case(rng, ns=3, per=2, n_head_kv=4, ratio=4, hd=64, n_kv=257, kv_size=260, n_stream=3,
                       dtype=dt) for dt in (np.float32, np.float16, np.float32, np.float16)]
    expected = [kernels.attention(*c, n_threads=1) for c in cases]
    errors = []

    def run(i):
        try:
            for _ in range(15):
                out = kernels.attention(*cases[i], n_threads=2)
                if not np.array_equal(out, expected[i]):
                    errors.append(f"thread {i}: result differs")
                    return
        except Exception as e:  # pragma: no cover - reported below
            errors.append(f"thread {i}: {e!r}")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def _n_tasks():
    """Threads of this process (Linux), else None."""
    return len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else None


def _pool_sized_case(seed):
    """A decode batch big enough (> 1M multiply-adds) for the kernel to use a second thread."""
    return make_case(np.random.default_rng(seed), ns=4, per=1, n_head_kv=4, ratio=4, hd=64, n_kv=600,
                     kv_size=600, n_stream=4, dtype=np.float32)


def test_pool_shutdown_and_restart():
    case = _pool_sized_case(2)
    a = kernels.attention(*case, n_threads=2)
    n = _n_tasks()
    kernels.attention_shutdown()
    m = _n_tasks()
    if n is not None:
        assert m < n  # the pool's workers were joined
    kernels.attention_shutdown()  # idempotent
    b = kernels.attention(*case, n_threads=2)  # a worker starts again
    if n is not None:
        assert _n_tasks() == m + 1
    assert np.array_equal(a, b)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is not available on this platform")
def test_fork_child_gets_a_working_pool():
    case = _pool_sized_case(4)
    expected = kernels.attention(*case, n_threads=2)  # parent's workers exist now
    pid = os.fork()
    if pid == 0:  # child: the parent's workers are gone; the pool must start fresh ones, not hang
        code = 3
        try:
            before = _n_tasks()
            if np.array_equal(kernels.attention(*case, n_threads=2), expected):
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
            pytest.fail("forked child hung in attention()")
        time.sleep(0.01)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "child: 3 = wrong result, 4 = no fresh worker"


_GENERIC_SCRIPT = """
import numpy as np, sys
sys.path[:0] = [{pkg!r}, {tests!r}]
from test_attention import CASES, make_case, reference
from ubatch.compute import kernels
worst = 0.0
for case in CASES:
    ns, per, hkv, ratio, hd, n_kv, kv_size, n_stream, dtype = case
    rng = np.random.default_rng(1)
    q, k, v, streams, mask = make_case(rng, ns=ns, per=per, n_head_kv=hkv, ratio=ratio, hd=hd, n_kv=n_kv,
                                       kv_size=kv_size, n_stream=n_stream, dtype=dtype)
    out = kernels.attention(q, k, v, streams, mask, n_threads=2)
    worst = max(worst, float(np.abs(out - reference(q, k, v, streams, mask, 1.0 / np.sqrt(hd))).max()))
print(worst)
"""


def test_plain_c_path_matches_numpy():
    """UBATCH_ATTN_GENERIC=1 forces the portable loops (what a CPU without AVX2/FMA/F16C runs)."""
    here = os.path.dirname(os.path.abspath(__file__))
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(kernels.__file__)))  # the ubatch under test
    env = dict(os.environ, UBATCH_ATTN_GENERIC="1",
               PYTHONPATH=os.pathsep.join(os.path.abspath(p) for p in sys.path if p))
    res = subprocess.run([sys.executable, "-c", _GENERIC_SCRIPT.format(pkg=pkg, tests=here)], env=env, cwd=here,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert float(res.stdout.strip()) < 2e-5
