"""The blocked attention loops (csrc/compute/attn_tile_simd.h: several heads x 4 cells per score block, P.V
accumulated in registers) give bitwise the results of the per-cell loops (UBATCH_ATTN_TILES=0, run in a child
process) on every back-end, and a row's output is bitwise the same alone, batched, permuted, with any thread
count and inside any batch: causal + sliding-window masks with holes, two sequences in one unified KV."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from child_process import CHILD_CWD, child_env
from ubatch.compute import ops
from ubatch.testing.reference import attention_masked

# (n_head_kv, queries per kv head, head_dim, n_kv, dtype, softcap)
SHAPES = [
    (1, 4, 256, 37, np.float32, 0.0),    # Gemma 3: 4:1, hd 256
    (2, 7, 64, 45, np.float32, 0.0),     # Qwen2.5: 7:1, hd 64
    (2, 7, 64, 29, np.float16, 0.0),
    (1, 4, 256, 23, np.float16, 50.0),
    (3, 1, 8, 13, np.float32, 0.0),      # one head per block, hd 8 (one vector)
    (2, 2, 24, 19, np.float16, 0.0),     # hd 24: 3 ymm, not a multiple of 16
    (1, 3, 40, 31, np.float32, 0.0),
    (2, 5, 80, 27, np.float16, 0.0),     # hd 80: 5 zmm = 4 + 1
    (1, 9, 128, 33, np.float32, 0.0),    # 9 heads: 4 + 4 + 1 blocks
    (1, 6, 48, 21, np.float16, 0.0),     # hd 48: 3 zmm
    (2, 8, 16, 17, np.float32, 0.0),
    (1, 2, 20, 15, np.float32, 0.0),     # hd % 8 != 0: the plain loops
]


def shape_case(i):
    """Inputs of SHAPES[i]: rows whose lists have every length 0..n_kv (every 4-cell tail), cells shuffled."""
    hkv, r, hd, n_kv, dt, cap = SHAPES[i]
    rng = np.random.default_rng(100 + i)
    n_q = n_kv + 1
    q = rng.standard_normal((n_q, hkv * r, hd)).astype(np.float32)
    k = (rng.standard_normal((1, n_kv + 3, hkv, hd)) * 2).astype(dt)
    v = rng.standard_normal((1, n_kv + 3, hkv, hd)).astype(dt)
    order = rng.permutation(n_kv + 3)[:n_kv].astype(np.int32)
    off = np.concatenate([[0], np.cumsum(np.arange(n_q))]).astype(np.int32)
    cells = np.concatenate([order[:n] for n in range(n_q)]).astype(np.int32)
    rs = np.zeros(n_q, np.int32)
    return q, k, v, rs, off, cells, cap


def run_shapes():
    return [ops.attention_visible(*shape_case(i)[:6], softcap=shape_case(i)[6], n_threads=2)
            for i in range(len(SHAPES))]


CHILD = """
import json, sys
import numpy as np
sys.path.insert(0, {test_dir!r})
import test_attention_tiles as t
from ubatch.compute import matmul as mm
assert mm.set_backend({backend!r}) == {backend!r}
outs = t.run_shapes()
np.savez({path!r}, *outs)
print(json.dumps({{"n": len(outs)}}))
"""


def test_blocked_loops_bitwise_equal_per_cell_loops(backend, tmp_path):
    blocked = run_shapes()
    path = str(tmp_path / "per_cell.npz")
    env = child_env(UBATCH_ATTN_TILES="0")  # the child imports the same ubatch as this process
    code = CHILD.format(test_dir=os.path.dirname(os.path.abspath(__file__)), backend=backend, path=path)
    res = subprocess.run([sys.executable, "-c", code], env=env, cwd=CHILD_CWD, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout.strip().splitlines()[-1])["n"] == len(SHAPES)
    per_cell = np.load(path)
    for i, b in enumerate(blocked):
        p = per_cell[f"arr_{i}"]
        assert b.shape == p.shape
        assert np.array_equal(b.view(np.uint32), p.view(np.uint32)), f"shape {SHAPES[i]}: blocked != per-cell"
        q, k, v, rs, off, cells, cap = shape_case(i)
        if cap == 0.0:  # against the float64 reference too (one mask row per list)
            n_kv = k.shape[1]
            mask = np.full((1, q.shape[0], n_kv), -np.inf, np.float32)
            for row in range(q.shape[0]):
                mask[0, row, cells[off[row]:off[row + 1]]] = 0.0
            ref = attention_masked(q[None], k, v, np.zeros(1, np.int32), mask, 1.0 / np.sqrt(q.shape[2]))[0]
            assert np.abs(b - ref).max() < (4e-3 if k.dtype == np.float16 else 2e-5)


def unified_two_seqs(rng, n, win, dt, hkv=2, r=7, hd=64):
    """Two sequences interleaved in one unified KV of n cells (random cells, positions in token order), every
    token a query row: causal, sliding window `win` (0: none), 10% holes. Lists via ops.visible_cells."""
    seq = rng.integers(0, 2, n)
    pos = np.zeros(n, np.int32)
    for s in (0, 1):
        pos[seq == s] = np.arange((seq == s).sum())
    cell_of = rng.permutation(n + 5)[:n]                       # row t's token lives in cell cell_of[t]
    kv_pos = np.full(n + 5, -1, np.int32)
    kv_pos[cell_of] = pos
    kv_seq = np.full(n + 5, -1)
    kv_seq[cell_of] = seq
    mask = np.full((1, n, n + 5), -np.inf, np.float32)
    for t in range(n):
        vis = (kv_seq == seq[t]) & (kv_pos <= pos[t]) & (kv_pos >= 0)
        if win:
            vis &= pos[t] - kv_pos < win
        vis &= rng.random(n + 5) > 0.1
        mask[0, t, vis] = 0.0
    off, cells = ops.visible_cells(mask, kv_pos[None].astype(np.int32))
    q = rng.standard_normal((n, hkv * r, hd)).astype(np.float32)
    k = rng.standard_normal((1, n + 5, hkv, hd)).astype(dt)
    v = rng.standard_normal((1, n + 5, hkv, hd)).astype(dt)
    return q, k, v, np.zeros(n, np.int32), off, cells


@pytest.mark.parametrize("dt", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("win,hkv,r,hd", [(0, 2, 7, 64), (9, 1, 4, 256), (16, 2, 3, 40)],
                         ids=["causal-qwen", "swa-gemma", "swa-hd40"])
def test_row_output_independent_of_batch(backend, dt, win, hkv, r, hd):
    rng = np.random.default_rng(7 + win)
    n = 70
    q, k, v, rs, off, cells = unified_two_seqs(rng, n, win, dt, hkv, r, hd)
    full = ops.attention_visible(q, k, v, rs, off, cells, n_threads=2)
    bits = full.view(np.uint32)
    for nt in (1, 3):
        assert np.array_equal(ops.attention_visible(q, k, v, rs, off, cells, n_threads=nt).view(np.uint32), bits)
    lists = [cells[off[t]:off[t + 1]] for t in range(n)]

    def batch(rows, nt):
        o = np.concatenate([[0], np.cumsum([len(lists[t]) for t in rows])]).astype(np.int32)
        c = np.concatenate([lists[t] for t in rows]).astype(np.int32)
        return ops.attention_visible(np.ascontiguousarray(q[rows]), k, v, np.zeros(len(rows), np.int32), o, c,
                                     n_threads=nt)

    perm = rng.permutation(n)
    assert np.array_equal(batch(perm, 2).view(np.uint32), bits[perm])             # permuted rows
    for t in (0, 1, 5, n // 2, n - 1):                                           # alone (decode-like: head split)
        assert np.array_equal(batch([t], 2).view(np.uint32), bits[t:t + 1])
    sub = np.sort(rng.choice(n, 11, replace=False))                              # another batch / tile offset
    assert np.array_equal(batch(sub, 1).view(np.uint32), bits[sub])
