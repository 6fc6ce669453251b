"""The C visible-cell attention (csrc/compute/attention_vis.c: online lists, GQA, stream groups, f32/f16 K/V,
every kernel back-end) against the float64 cell-order reference with a mask (ubatch.testing.reference.attention),
and its bitwise independence of the thread count and of concurrent callers."""
import threading

import numpy as np
import pytest

from ubatch.compute import ops
from ubatch.testing.reference import attention_masked


def lists_from_mask(mask, pos, streams):
    """Each row's visible cells (mask == 0) in ascending (position, cell) order, the order the kernel needs:
    (row_stream int32[ns*per], off int32[ns*per + 1], cells int32[...]). pos: int32[n_stream, n_kv]."""
    ns, per, n_kv = mask.shape
    off, cells = [0], []
    for g in range(ns):
        order = np.lexsort((np.arange(n_kv), pos[streams[g], :n_kv]))
        for r in range(per):
            vis = order[mask[g, r, order] == 0]
            cells.append(vis)
            off.append(off[-1] + len(vis))
    cells = np.concatenate(cells).astype(np.int32) if cells else np.zeros(0, np.int32)
    return np.repeat(streams, per).astype(np.int32), np.array(off, np.int32), cells


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
    pos = np.stack([rng.permutation(kv_size) for _ in range(n_stream)]).astype(np.int32)  # cells not in order
    return q, k, v, streams, mask, pos


CASES = [
    # ns, per, n_head_kv, ratio, hd, n_kv, kv_size, n_stream, dtype
    (1, 1, 2, 1, 16, 1, 8, 1, np.float32),
    (1, 7, 2, 2, 16, 37, 40, 1, np.float32),
    (3, 1, 2, 4, 64, 300, 301, 4, np.float16),
    (2, 5, 1, 4, 128, 257, 300, 2, np.float32),
    (4, 3, 3, 2, 24, 129, 129, 4, np.float16),
    (1, 9, 4, 1, 20, 17, 33, 1, np.float16),     # head_dim not a multiple of 8: the plain loops on every back-end
    (5, 2, 2, 2, 80, 95, 100, 5, np.float32),
    (2, 1, 8, 4, 64, 100, 128, 2, np.float32),   # decode, GQA 4:1, 8 kv heads
    (3, 1, 4, 3, 40, 70, 80, 3, np.float16),     # 3 queries per kv head, hd 40
    (2, 1, 6, 1, 256, 33, 40, 2, np.float16),    # no GQA, hd 256
    (2, 3, 2, 5, 32, 150, 160, 2, np.float32),   # 5 query heads per kv head
]


def _run(case, n_threads, seed=None):
    ns, per, hkv, ratio, hd, n_kv, kv_size, n_stream, dtype = case
    rng = np.random.default_rng(seed if seed is not None else sum(int(x) for x in case[:8]))
    q, k, v, streams, mask, pos = make_case(rng, ns=ns, per=per, n_head_kv=hkv, ratio=ratio, hd=hd, n_kv=n_kv,
                                            kv_size=kv_size, n_stream=n_stream, dtype=dtype)
    rs, off, cells = lists_from_mask(mask, pos, streams)
    out = ops.attention_visible(q.reshape(ns * per, hkv * ratio, hd), k, v, rs, off, cells, n_threads=n_threads)
    return out.reshape(q.shape), (q, k, v, streams, mask)


@pytest.mark.parametrize("case", CASES, ids=[f"ns{c[0]}-per{c[1]}-r{c[3]}-hd{c[4]}-kv{c[5]}-{np.dtype(c[8]).name}"
                                             for c in CASES])
def test_visible_attention_matches_reference(case, backend):
    out, (q, k, v, streams, mask) = _run(case, n_threads=2)
    ref = attention_masked(q, k, v, streams, mask, 1.0 / np.sqrt(q.shape[3]))
    assert not np.isnan(out).any()
    assert np.abs(out - ref).max() < (2e-3 if case[8] == np.float16 else 2e-5)
    assert (out[0, 0] == 0).all()  # the fully masked row is zeros
    assert np.array_equal(out, _run(case, n_threads=1)[0])  # one participant per output: thread count is moot


def test_cells_beyond_n_kv_never_read():
    rng = np.random.default_rng(3)
    q, k, v, streams, mask, pos = make_case(rng, ns=1, per=4, n_head_kv=1, ratio=2, hd=16, n_kv=30, kv_size=64,
                                            n_stream=1, dtype=np.float32, hole_p=0.0)
    k[:, 30:] = np.nan
    v[:, 30:] = np.nan
    rs, off, cells = lists_from_mask(mask, pos, streams)
    out = ops.attention_visible(q.reshape(4, 2, 16), k, v, rs, off, cells)
    ref = attention_masked(q, k[:, :30], v[:, :30], streams, mask, 0.25)
    assert np.abs(out.reshape(q.shape) - ref).max() < 2e-5


def test_results_independent_of_thread_count_with_head_split():
    """One decode row: the query heads of a kv head are shared out among the threads (hsplit); bit-identical."""
    case = (1, 1, 8, 4, 64, 600, 640, 1, np.float32)
    outs = [_run(case, n_threads=nt, seed=5)[0] for nt in (1, 2, 3, 8, 64)]
    for o in outs[1:]:
        assert np.array_equal(o, outs[0])


def test_concurrent_calls_from_python_threads():
    """Several Python threads share the one pool (the GIL is released; a caller that finds the pool busy runs
    alone): every result stays exact."""
    cases = [(3, 2, 4, 4, 64, 257, 260, 3, dt) for dt in (np.float32, np.float16, np.float32, np.float16)]
    expected = [_run(c, n_threads=1, seed=i)[0] for i, c in enumerate(cases)]
    errors = []

    def run(i):
        try:
            for _ in range(10):
                if not np.array_equal(_run(cases[i], n_threads=2, seed=i)[0], expected[i]):
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
