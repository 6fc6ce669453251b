"""find_slot with an SWA window: the worked example of docs/llama-cpp-behaviours.md §K7.6, and each SWA type's reuse rule."""
import pytest

from ubatch.memory.kv_cache import KVCache
from ubatch.common.errors import KVCacheFullError
from kv_helpers import place, plan as make_plan


def test_spec_7_6_reuse_without_purge():
    kv = KVCache(1, 8, swa_type="standard", n_swa=4)
    place(kv, list(range(8)), [0] * 8)
    assert kv.head(0) == 8 and kv.used(0) == 8
    ubs = place(kv, [8, 9], [0, 0])
    assert kv.cells(0)[:2] == [(0, 8, (0,)), (1, 9, (0,))]
    assert [c[1] for c in kv.cells(0)] == [8, 9, 2, 3, 4, 5, 6, 7]
    assert kv.head(0) == 2 and kv.seq_pos_min(0) == 2 and kv.seq_pos_max(0) == 9
    assert ubs[0].n_tokens == 2


def test_spec_7_6_purge():
    kv = KVCache(1, 8, swa_type="standard", n_swa=4)
    for p in ([5], [1], [2, 3, 4], [6, 7], [8]):     # cell 0 = pos 5, cell 1 = pos 1, ...
        place(kv, p, [0] * len(p))
    assert [(c[0], c[1]) for c in kv.cells(0)] == [(0, 5), (1, 1), (2, 2), (3, 3), (4, 4), (5, 6), (6, 7), (7, 8)]
    place(kv, [9], [0])          # head 8 -> wraps to cell 0 (pos 5: 9 - 5 >= 4): max_rm = 5 >= min 1
    assert kv.cells(0) == [(0, 9, (0,)), (5, 6, (0,)), (6, 7, (0,)), (7, 8, (0,))]
    assert (kv.seq_pos_min(0), kv.seq_pos_max(0), kv.used(0), kv.head(0)) == (6, 9, 4, 1)


def test_no_swa_never_reuses():
    kv = KVCache(1, 8)
    place(kv, list(range(8)), [0] * 8)
    snap = kv.snapshot()
    with pytest.raises(Exception) as e:
        place(kv, [8], [0])
    assert type(e.value).__name__ == "KVCacheFullError" and e.value.code == 1
    assert kv.equals(snap)


@pytest.mark.parametrize("swa_type,n_swa,usable", [
    ("standard", 4, [0, 1, 2, 3, 4]),           # p1 - p0 >= 4 with p1 = seq_pos_max + 1 = 8
    ("chunked", 4, [0, 1, 2, 3, 4, 5, 6, 7]),   # p0 < (8 // 4) * 4 = 8
    ("chunked", 3, [0, 1, 2, 3, 4, 5]),         # p0 < (8 // 3) * 3 = 6
    ("symmetric", 4, [0, 1, 2, 3, 4, 5]),       # |8 - p0| > 4 // 2
])
def test_swa_types_reusable_cells(swa_type, n_swa, usable):
    kv = KVCache(1, 8, swa_type=swa_type, n_swa=n_swa)
    place(kv, list(range(8)), [1] * 8)           # cells 0..7 = pos 0..7 of seq 1, head 8 (scan wraps to 0)
    snap = kv.snapshot()
    k = len(usable)
    plan = make_plan(kv, list(range(k)), [2] * k)  # another seq: takes exactly the reusable cells
    assert kv.equals(snap)
    kv.begin(plan)
    kv.apply(plan, 0)
    assert kv.placement(plan, 0).cells.tolist() == [usable]
    kv.rollback(plan)
    assert kv.equals(snap)
    with pytest.raises(KVCacheFullError):
        make_plan(kv, list(range(k + 1)), [2] * (k + 1))
    assert kv.equals(snap)


def test_shared_cell_never_reused():
    kv = KVCache(1, 4, swa_type="standard", n_swa=1)
    place(kv, [0, 1, 2, 3], [[0, 1]] * 4)        # every cell holds two seqs
    with pytest.raises(KVCacheFullError):
        place(kv, [4], [0])
