"""KQ mask (C, one call) against a direct numpy evaluation of llama.cpp's rules on random caches:
non-empty cell, holds the row's primary (smallest) seq id, causal p0 <= p1, the 2-D M-RoPE tie rule,
and each SWA type; plus n_kv."""
import numpy as np
import pytest

from ubatch.memory.kv_cache import KVCache
from kv_helpers import place, plan as make_plan


def masked_swa(t, n_swa, p0, p1):
    if t == "standard":
        return p1 - p0 >= n_swa
    if t == "chunked":
        return p0 < (p1 // n_swa) * n_swa        # positions are >= 0 here: floor == C truncation
    if t == "symmetric":
        return abs(p1 - p0) > n_swa // 2
    return False


def reference_mask(kv, ub, streams, n_kv, causal=True):
    ns = len(streams)
    per = ub.n_tokens // ns
    out = np.full((ns, per, n_kv), -np.inf, np.float32)
    is_2d = ub.n_pos >= 3
    for k, st in enumerate(streams):
        a = kv.cell_arrays(int(st))
        for r in range(per):
            row = k * per + r
            s = int(ub.seq_ids(row)[0])
            p1 = int(ub.pos[0, row])
            for idx, p0, seq, ext in zip(a["index"], a["pos"], a["seq"], a["ext"]):
                if idx >= n_kv or not (int(seq[s // 64]) >> (s % 64)) & 1:
                    continue
                if causal and p0 > p1:
                    continue
                if causal and is_2d and p0 == p1:
                    x1, y1 = int(ub.pos[2, row]), int(ub.pos[1, row])
                    if ext[1] > y1 or (ext[1] == y1 and ext[0] > x1):
                        continue
                if kv.swa_type != "none" and masked_swa(kv.swa_type, kv.n_swa, int(p0), p1):
                    continue
                out[k, r, idx] = 0.0
    return out


def random_fill(rng, kv, n_pos, n_seq):
    """A few random batches (each seq gets a contiguous run after its last position), then holes."""
    nxt = [0] * n_seq
    for _ in range(int(rng.integers(2, 5))):
        pos, sids = [], []
        for s in rng.permutation(n_seq)[: int(rng.integers(1, n_seq + 1))]:
            m = int(rng.integers(1, 6))
            for _ in range(m):
                if kv.n_stream == 1 and n_seq > 1 and rng.random() < 0.3:
                    ids = sorted({int(s), int(rng.integers(0, n_seq))})
                else:
                    ids = [int(s)]
                pos.append(nxt[s]); sids.append(ids)
                nxt[s] += int(rng.integers(0, 2)) if n_pos == 1 else int(rng.integers(0, 3))
        if n_pos > 1:
            p = np.stack([np.array(pos), rng.integers(0, 4, len(pos)), rng.integers(0, 4, len(pos)),
                          np.zeros(len(pos), int)])
        else:
            p = pos
        # seqs must be non-decreasing in batch order: sort rows by position
        order = sorted(range(len(pos)), key=lambda i: (pos[i], sids[i][0]))
        p = np.asarray(p)[..., order]
        sids = [sids[i] for i in order]
        try:
            place(kv, p, sids, n_ubatch=int(rng.integers(1, 9)), n_pos=n_pos)
        except Exception as e:  # a full cache / a batch whose coupled seq jumps: skip, the state stays random
            assert type(e).__name__ in ("KVCacheFullError", "BatchError"), e
        for s in range(n_seq):
            if rng.random() < 0.3 and kv.seq_pos_max(s) > 2:
                kv.seq_rm(s, int(rng.integers(0, kv.seq_pos_max(s))), int(rng.integers(-1, kv.seq_pos_max(s) + 1)))
    return nxt


CONFIGS = [(1, 48, "none", 0, 1), (1, 40, "standard", 5, 1), (1, 40, "chunked", 4, 1), (1, 40, "symmetric", 6, 1),
           (3, 32, "none", 0, 1), (3, 32, "standard", 3, 1), (1, 40, "none", 0, 4), (3, 32, "none", 0, 4),
           (1, 520, "none", 0, 1), (2, 300, "standard", 7, 4)]


@pytest.mark.parametrize("cfg", CONFIGS, ids=[f"{c[0]}x{c[1]}-{c[2]}-npos{c[4]}" for c in CONFIGS])
@pytest.mark.parametrize("seed", range(6))
def test_mask_matches_rules(cfg, seed):
    n_stream, size, swa, n_swa, n_pos = cfg
    rng = np.random.default_rng(1000 * seed + size + n_pos)
    kv = KVCache(n_stream, size, swa_type=swa, n_swa=n_swa)
    n_seq = 3 if n_stream == 1 else n_stream
    nxt = random_fill(rng, kv, n_pos, n_seq)
    # the ubatch under test: one or two tokens per seq continuing each seq
    pos, sids = [], []
    for s in range(n_seq):
        for t in range(int(rng.integers(1, 5)) if seed % 2 else int(rng.integers(1, 3))):
            pos.append(max(nxt[s], kv.seq_pos_max(s) + 1) + t); sids.append([s])
    p = np.stack([np.array(pos), rng.integers(0, 4, len(pos)), rng.integers(0, 4, len(pos)),
                  np.zeros(len(pos), int)]) if n_pos > 1 else pos
    try:
        plan = make_plan(kv, p, sids, n_ubatch=64, n_pos=n_pos)
    except Exception as e:
        assert type(e).__name__ == "KVCacheFullError"
        pytest.skip("random cache too full for the probe ubatch (state still checked elsewhere)")
    kv.begin(plan)
    for i, ub in enumerate(plan.ubatches):
        kv.apply(plan, i)
        pl = kv.placement(plan, i)
        ump = max(kv.used_max_p1(int(st)) for st in pl.streams)
        assert pl.n_kv == min(size, max(256, -(-ump // 256) * 256))
        assert pl.mask.shape == (len(pl.streams), ub.n_tokens // len(pl.streams), pl.n_kv)
        np.testing.assert_array_equal(pl.mask, reference_mask(kv, ub, pl.streams, pl.n_kv))
        nc = kv.placement(plan, i, causal=False).mask
        np.testing.assert_array_equal(nc, reference_mask(kv, ub, pl.streams, pl.n_kv, causal=False))
        # the rows' own cells are visible to themselves (causal, same seq, inside any window)
        for k in range(len(pl.streams)):
            for r in range(pl.cells.shape[1]):
                if n_pos == 1:
                    assert pl.mask[k, r, pl.cells[k, r]] == 0.0
    kv.commit(plan)


def test_mask_unified_example_spec_7_1():
    """4 seqs x 5 tokens contiguous, unified 256 cells, split_simple(8): rows of ubatch 0 see exactly
    r0 {0}, r1 {0,1}, ..., r4 {0-4}, r5 {5}, r6 {5,6}, r7 {5,6,7}."""
    kv = KVCache(1, 256)
    pos = [p for s in range(4) for p in range(5)]
    sids = [s for s in range(4) for _ in range(5)]
    plan = make_plan(kv, pos, sids, n_ubatch=8)
    kv.begin(plan)
    kv.apply(plan, 0)
    pl = kv.placement(plan, 0)
    assert pl.n_kv == 256 and pl.cells.tolist() == [list(range(8))]
    vis = [set(np.nonzero(pl.mask[0, r] == 0)[0].tolist()) for r in range(8)]
    assert vis == [{0}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}, {0, 1, 2, 3, 4}, {5}, {5, 6}, {5, 6, 7}]
    kv.apply(plan, 1)
    pl = kv.placement(plan, 1)
    assert set(np.nonzero(pl.mask[0, 0] == 0)[0].tolist()) == {5, 6, 7, 8}
    assert set(np.nonzero(pl.mask[0, 2] == 0)[0].tolist()) == {10}
    snap_after = kv.snapshot()
    kv.rollback(plan)
    assert not kv.equals(snap_after) and kv.used(0) == 0


@pytest.mark.parametrize("swa,n_swa,n_pos", [("none", 0, 1), ("standard", 3, 1), ("chunked", 4, 4), ("none", 0, 4)])
@pytest.mark.parametrize("seed", range(3))
def test_mask_streams_many_rows_per_group(swa, n_swa, n_pos, seed):
    """Non-unified groups of 3..5 rows (the per-seq cell-list path of the C builder)."""
    rng = np.random.default_rng(seed + 77)
    kv = KVCache(3, 40, swa_type=swa, n_swa=n_swa)
    random_fill(rng, kv, n_pos, 3)
    m = int(rng.integers(3, 6))
    pos = [kv.seq_pos_max(s) + 1 + t for s in range(3) for t in range(m)]
    sids = [s for s in range(3) for _ in range(m)]
    p = np.stack([np.array(pos), rng.integers(0, 4, len(pos)), rng.integers(0, 4, len(pos)),
                  np.zeros(len(pos), int)]) if n_pos > 1 else pos
    plan = make_plan(kv, p, sids, n_ubatch=64, n_pos=n_pos)
    assert plan.ubatches[0].n_seq_tokens == m
    kv.begin(plan)
    kv.apply(plan, 0)
    pl = kv.placement(plan, 0)
    assert pl.mask.shape[:2] == (3, m)
    np.testing.assert_array_equal(pl.mask, reference_mask(kv, plan.ubatches[0], pl.streams, pl.n_kv))
    kv.rollback(plan)
