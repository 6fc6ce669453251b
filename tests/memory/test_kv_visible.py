"""The rows' visible-cell lists the memory writes in C (KVCache.visible / Placement.visible) against the
path they replace: the dense KQ mask (KVCache.mask, C) turned into lists by ops.visible_cells with the
cells' positions. Random cache states (hypothesis): holes, reused cells out of index order, duplicate
positions from seq_add / seq_div, coupled rows, every window type, causal and not, 1-D and M-RoPE
positions, one stream and several; the two-cache memory's placements (both caches, and the full cache
with the window for swa=False). Equality is exact (same cells, same order)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from ubatch.compute.ops import visible_cells
from ubatch.memory.iswa import KVCacheISWA
from ubatch.memory.kv_cache import KVCache
from ubatch.memory.placement import Placement, mask_of
from kv_helpers import plan as make_plan
from test_kv_mask import masked_swa, random_fill


def cell_pos(kv: KVCache, streams, n_kv: int) -> np.ndarray:
    """int32[ns, n_kv]: the position of every cell column of each group's stream (-1 = empty)."""
    out = np.full((len(streams), n_kv), -1, np.int32)
    for k, st_ in enumerate(streams):
        a = kv.cell_arrays(int(st_))
        keep = a["index"] < n_kv
        out[k, a["index"][keep]] = a["pos"][keep]
    return out


def oracle(kv: KVCache, mask: np.ndarray, streams: np.ndarray, ub, window=None):
    """(row_stream, off, cells) by the old path: a C mask of kv's cells, a window applied in numpy,
    ops.visible_cells with the cells' positions."""
    ns, per, n_kv = mask.shape
    pos = cell_pos(kv, streams, n_kv)
    if window is not None:
        t, n = window
        p1 = np.asarray(ub.pos[0], np.int64).reshape(ns, per)
        far = np.vectorize(lambda a, b: masked_swa(t, n, int(a), int(b)))(pos[:, None, :], p1[:, :, None])
        mask = np.where(far, np.float32(-np.inf), mask).astype(np.float32)
    off, cells = visible_cells(mask, pos)
    return np.repeat(streams, per).astype(np.int32), off, cells


def same(vis, ref, what: str) -> None:
    for name, a, b in zip(("row_stream", "off", "cells"), vis, ref):
        assert a.dtype == np.int32, (what, name, a.dtype)
        np.testing.assert_array_equal(a, b, err_msg=f"{what}: {name}")


def scramble(rng, kv: KVCache, n_seq: int) -> None:
    """Sequence operations that move positions: shifts (K-shift pending) and divisions (duplicates)."""
    for s in range(n_seq):
        m = kv.seq_pos_max(s)
        if m < 1:
            continue
        r = rng.random()
        if r < 0.25:
            kv.seq_add(s, int(rng.integers(0, m + 1)), -1, int(rng.integers(-3, 4)))
        elif r < 0.4:
            kv.seq_div(s, int(rng.integers(0, m + 1)), -1, int(rng.integers(2, 4)))


def probe_rows(rng, kv: KVCache, n_seq: int, n_pos: int):
    """A run of rows per sequence, mostly continuing it, sometimes from a position it already holds
    (duplicates: ties go by cell index; the causal bound cuts its list in the middle)."""
    pos, sids = [], []
    for s in range(n_seq):
        top = kv.seq_pos_max(s) + 1
        start = top if rng.random() < 0.6 else int(rng.integers(0, top + 1))
        m = int(rng.integers(1, 5))
        pos += list(range(start, start + m))
        sids += [[s]] * m
    if n_pos > 1:
        return np.stack([np.array(pos), rng.integers(0, 4, len(pos)), rng.integers(0, 4, len(pos)),
                         np.zeros(len(pos), int)]), sids
    return pos, sids


CONFIG = st.tuples(st.sampled_from([1, 3]), st.sampled_from([24, 40, 300]),
                   st.sampled_from(["none", "standard", "chunked", "symmetric"]), st.integers(1, 9),
                   st.sampled_from([1, 4]), st.integers(0, 2**32 - 1))


@settings(deadline=None)
@given(cfg=CONFIG)
def test_visible_lists_equal_the_mask_path(cfg):
    n_stream, size, swa, n_swa, n_pos, seed = cfg
    rng = np.random.default_rng(seed)
    kv = KVCache(n_stream, size, swa_type=swa, n_swa=n_swa if swa != "none" else 0)
    n_seq = 3
    random_fill(rng, kv, n_pos, n_seq)
    scramble(rng, kv, n_seq)
    random_fill(rng, kv, n_pos, n_seq)            # new cells land in the holes: lists out of index order
    p, sids = probe_rows(rng, kv, n_seq, n_pos)
    try:
        plan = make_plan(kv, p, sids, n_ubatch=int(rng.integers(1, 9)), n_pos=n_pos)
    except Exception as e:                        # full cache: nothing to probe in this state
        assert type(e).__name__ == "KVCacheFullError", e
        return
    win = (["standard", "chunked", "symmetric"][seed % 3], 1 + seed % 7)
    kv.begin(plan)
    for i in range(len(plan)):
        kv.apply(plan, i)
        ub, streams = plan.ubatches[i], kv.placement(plan, i).streams
        for causal in (True, False):
            mask = kv.mask(plan, i, causal)
            vis = kv.visible(plan, i, causal)
            same(vis, oracle(kv, mask, streams, ub), f"ubatch {i} causal={causal}")
            if swa == "none":                     # a window given by the caller (iSWA's swa=False path)
                w = kv.visible(plan, i, causal, swa_type=win[0], n_swa=win[1])
                same(w, oracle(kv, mask, streams, ub, win), f"ubatch {i} causal={causal} window {win}")
        pl = kv.placement(plan, i)
        np.testing.assert_array_equal(pl.mask, kv.mask(plan, i))      # the inspection view
    kv.rollback(plan)


@settings(deadline=None, max_examples=max(10, settings().max_examples // 4))
@given(unified=st.booleans(), n_swa=st.integers(1, 8), seed=st.integers(0, 2**32 - 1))
def test_two_cache_placements_equal_the_mask_path(unified, n_swa, seed):
    rng = np.random.default_rng(seed)
    n_stream = 1 if unified else 3
    mem = KVCacheISWA(n_stream, 64, 32, n_swa=n_swa)
    for _ in range(int(rng.integers(1, 5))):
        sids, p = [], []                          # each seq continues by a few tokens
        for s in range(3):
            top = mem.base.seq_pos_max(s) + 1
            m = int(rng.integers(0, 12))
            sids += [[s]] * m
            p += list(range(top, top + m))
        if not p:
            continue
        try:
            plan = make_plan(mem, p, sids, n_ubatch=int(rng.integers(1, 9)))
        except Exception as e:
            assert type(e).__name__ == "KVCacheFullError", e
            return
        mem.begin(plan)
        for i in range(len(plan)):
            mem.apply(plan, i)
            ub = plan.ubatches[i]
            place = mem.placement(plan, i)
            full, slide = mem.mask(plan, i), mem.mask_swa(plan, i)
            same(place.visible, oracle(mem.base, full, place.streams, ub), f"full cache, ubatch {i}")
            same(place.swa.visible, oracle(mem.swa, slide, place.swa.streams, ub), f"sliding cache, ubatch {i}")
            one = mem.placement(plan, i, swa=False)
            assert one.swa is None
            same(one.visible_window, oracle(mem.base, full, one.streams, ub, ("standard", n_swa)),
                 f"the full cache with the window, ubatch {i}")
        mem.commit(plan)


def test_placement_mask_view_and_hand_made():
    """Placement.mask is the lists' dense view; a hand-made Placement may carry only a mask."""
    kv = KVCache(1, 16)
    plan = make_plan(kv, [0, 1, 2, 0, 1], [[0], [0], [0], [1], [1]])
    kv.begin(plan)
    kv.apply(plan, 0)
    pl = kv.placement(plan, 0)
    rows = [pl.visible.cells[pl.visible.off[r]:pl.visible.off[r + 1]].tolist() for r in range(5)]
    assert rows == [[0], [0, 1], [0, 1, 2], [3], [3, 4]]
    m = mask_of(pl.visible, 1, pl.n_kv)
    np.testing.assert_array_equal(m, kv.mask(plan, 0))
    assert Placement(pl.streams, pl.cells, pl.n_kv, mask=m).mask is m
    kv.rollback(plan)


def test_visible_bad_input_names_the_culprit():
    import pytest
    from ubatch.common.errors import CallOrderError
    kv = KVCache(1, 16)
    plan = make_plan(kv, [0, 1], [[0], [0]])
    kv.begin(plan)
    kv.apply(plan, 0)
    with pytest.raises(ValueError, match="swa_type must be one of"):
        kv.visible(plan, 0, swa_type="sliding", n_swa=4)
    with pytest.raises(ValueError, match="bad window"):
        kv.visible(plan, 0, swa_type="standard", n_swa=0)
    with pytest.raises(ValueError, match="n_kv"):
        kv.visible(plan, 0, n_kv=17)
    for bad in (3, -1, 0.0):
        with pytest.raises(IndexError, match="not in the plan"):
            kv.visible(plan, bad, n_kv=16)
    kv.rollback(plan)
    kv.seq_rm(0)                                  # the plan is no longer the cache's current one
    with pytest.raises(CallOrderError, match="current plan"):
        kv.visible(plan, 0)
