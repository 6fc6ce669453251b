"""Runs of rows that carry the same multi-seq set (shared prompts) take a fast path in init: the native
allocator must agree with the reference on ranges, continuity and decreasing positions."""
import pytest

import ubatch
from ubatch.batch.reference import ReferenceAllocator

CASES = {
    "prefix then own tokens": ([[0, 1]] * 3 + [[0], [1]], [0, 1, 2, 3, 3]),
    "gap inside the shared run": ([[0, 1]] * 2, [0, 2]),
    "decrease inside the shared run": ([[0, 1]] * 3, [0, 1, 0]),
    "repeat inside the shared run": ([[0, 1]] * 3, [0, 1, 1]),
    "own token between shared runs": ([[0, 1], [0, 1], [0], [0, 1]], [0, 1, 1, 2]),
    "decrease after own token": ([[0, 1], [0, 1], [1], [0, 1]], [0, 1, 2, 1]),
    "two different sets": ([[0, 1], [0, 1], [1, 2], [1, 2]], [0, 1, 2, 3]),
    "listed in other orders": ([[1, 0], [0, 1], [1, 1, 0]], [0, 1, 2]),
    "below -1 in a run": ([[0, 2], [0, 2]], [-3, -2]),
    "run then a lower single": ([[0, 1], [0, 1], [0, 1], [1]], [3, 4, 5, 2]),
}


def _outcome(alloc_cls, seq_ids, pos):
    a = alloc_cls()
    batch = ubatch.Batch.from_arrays(tokens=[1] * len(pos), pos=pos, seq_ids=seq_ids)
    try:
        a.init(batch, n_seq_max=3)
    except ubatch.BatchError as e:
        return ("error", str(e))
    return ("ok", [a.seq_pos_range(s) for s in range(3)], a.pos.tolist())


@pytest.mark.parametrize("name", sorted(CASES))
def test_native_matches_reference(name):
    seq_ids, pos = CASES[name]
    assert _outcome(ubatch.BatchAllocator, seq_ids, pos) == _outcome(ReferenceAllocator, seq_ids, pos)


def test_expected_outcomes():
    assert _outcome(ubatch.BatchAllocator, *CASES["prefix then own tokens"])[1] == [(0, 3), (0, 3), (-1, -1)]
    assert _outcome(ubatch.BatchAllocator, *CASES["gap inside the shared run"]) == \
        ("error", "sequence 0 positions are not continuous")
    assert _outcome(ubatch.BatchAllocator, *CASES["decrease inside the shared run"]) == \
        ("error", "sequence 0 positions are decreasing (not allowed)")
    assert _outcome(ubatch.BatchAllocator, *CASES["decrease after own token"]) == \
        ("error", "sequence 1 positions are decreasing (not allowed)")
    assert _outcome(ubatch.BatchAllocator, *CASES["run then a lower single"]) == \
        ("error", "sequence 1 positions are decreasing (not allowed)")
