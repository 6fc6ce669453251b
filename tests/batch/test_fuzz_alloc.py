"""Fuzzing BatchAllocator: invariants of every split on random valid batches, and random programs of
valid and hostile calls run against two allocators (a failed call on one must leave it equal to its twin)."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from ubatch import Batch
from ubatch.batch.allocator import BatchAllocator
from ubatch.common.errors import SplitError, UbatchError

from split_helpers import ConstMemory

from harden_util import (I32_MAX, I32_MIN, SPLITS, FakeMemory, build_batch, call, do_split, drain, hostile_args,
                         hostile_ints, snapshot, ub_summary, valid_spec)

# numpy overflow / complex-cast warnings from the library are bugs (an exception under -W error)
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


def _check_ubatch(a, ub, kind, n_ubatch, strict, used, ref):
    """One ubatch against the allocator's normalised batch `ref` (pos, output, seq sets, tokens, embd)."""
    n = ub.n_tokens
    assert n >= 1
    idx = ub.batch_idxs.tolist()
    assert len(set(idx)) == n and not any(used[i] for i in idx), "a row was emitted twice"
    for i in idx:
        used[i] = True
    assert ub.pos.tolist() == ref["pos"][:, idx].tolist()
    assert ub.output.tolist() == ref["output"][idx].tolist()
    sets = [ub.seq_ids(r).tolist() for r in range(n)]
    assert sets == [ref["sets"][i] for i in idx]
    assert ub.n_seq_id.tolist() == [len(s) for s in sets]
    unq = sorted(set().union(*map(set, sets)))
    assert ub.seq_id_unq.tolist() == unq
    idx_tab = ub.seq_idx.tolist()
    assert all(idx_tab[s] == unq.index(s) if s in unq else idx_tab[s] == -1 for s in range(256))
    if ref["token"] is not None:
        assert ub.token.tolist() == ref["token"][idx].tolist()
    else:
        assert ub.token is None
    if ref["embd"] is not None:
        assert np.array_equal(ub.embd, ref["embd"][idx])
    if kind == "simple":
        assert n <= n_ubatch
        first = [i for i in range(len(used)) if i not in idx and not used[i]]
        assert all(i > max(idx) for i in first) or not first
        assert idx == sorted(idx)
    elif kind == "seq":
        assert n <= n_ubatch and ub.n_seqs == 1
        assert all(set(s) <= set(sets[0]) for s in sets)
    else:
        assert n <= (n_ubatch if strict else n_ubatch + 1)
        assert ub.equal_seqs and ub.n_seqs * ub.n_seq_tokens == n
        groups = [sets[k * ub.n_seq_tokens] for k in range(ub.n_seqs)]
        for k in range(ub.n_seqs):
            block = sets[k * ub.n_seq_tokens:(k + 1) * ub.n_seq_tokens]
            assert all(s == groups[k] for s in block)
        flat = [s for g in groups for s in g]
        assert len(flat) == len(set(flat)), "split_equal sets are not disjoint"


@given(spec=valid_spec(), via=st.sampled_from(["arrays", "rows"]), kind=st.sampled_from(SPLITS),
       n_ubatch=st.integers(1, 30), strict=st.booleans(), tail=st.integers(0, 5), output_all=st.booleans())
def test_valid_batches_split_invariants(spec, via, kind, n_ubatch, strict, tail, output_all):
    b = build_batch(spec, via)
    a = BatchAllocator()
    a.init(b, n_seq_max=spec["n_seq_max"], output_all=output_all)
    ref = dict(pos=a.pos, output=a.output, sets=[sorted(set(s)) for s in spec["seq_sets"]],
               token=None if b.token is None else b.token.copy(), embd=None if b.embd is None else b.embd.copy())
    n = spec["n"]
    tail = min(tail, n_ubatch - 1)
    used = [False] * n
    emitted = []
    for _ in range(n + 1):
        ok, ub = call(do_split, a, kind, n_ubatch, tail, strict)
        if not ok:
            assert kind == "equal_seq" and isinstance(ub, SplitError) and a.has_coupled
            assert a.n_used == 0
            return
        if ub is None:
            break
        _check_ubatch(a, ub, kind, n_ubatch, strict, used, ref)
        emitted.append(ub_summary(ub))
    assert all(used) and a.n_used == n
    want_out = [i for s in emitted for i, o in zip(s[14], s[9]) if o]
    assert a.out_ids.tolist() == want_out and a.n_outputs == int(ref["output"].sum())
    # split_reset replays the exact same ubatches
    a.split_reset()
    again = [ub_summary(do_split(a, kind, n_ubatch, tail, strict)) for _ in range(len(emitted))]
    assert again == emitted and do_split(a, kind, n_ubatch, tail, strict) is None


# ------------------------------------------------------------------------------------ random programs
seq_id_vals = st.one_of(st.integers(0, 7), st.sampled_from([-1, 255, 256, I32_MAX, I32_MIN]))
pos_vals = st.one_of(st.integers(0, 12), st.sampled_from([-1, I32_MAX, I32_MAX - 1, I32_MIN]))


@st.composite
def loose_batch(draw):
    """A Batch with arbitrary (often invalid for init) seq ids, positions, outputs, content."""
    n = draw(st.integers(1, 12))
    sets = draw(st.lists(st.lists(seq_id_vals, min_size=1, max_size=3), min_size=n, max_size=n))
    pos = draw(st.one_of(st.none(), st.lists(pos_vals, min_size=n, max_size=n)))
    out = draw(st.one_of(st.none(), st.lists(st.booleans(), min_size=n, max_size=n)))
    n_pos = draw(st.sampled_from([1, 1, 3]))
    if draw(st.booleans()):
        tokens = draw(st.lists(st.integers(-2, 40), min_size=n, max_size=n))
        return Batch.from_arrays(tokens=tokens, pos=pos, seq_ids=sets, output=out, n_pos_per_embd=n_pos)
    embd = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    return Batch.from_arrays(embd=embd, pos=pos, seq_ids=sets, output=out, n_pos_per_embd=n_pos)


memory_vals = st.one_of(st.integers(-1, 12), st.sampled_from([-1, -5, I32_MAX, I32_MIN, 2**40, -(2**40)]))


@st.composite
def memories(draw):
    if draw(st.booleans()):
        return None
    lo = draw(st.lists(memory_vals, min_size=8, max_size=8)) + [-1] * 248
    hi = draw(st.lists(memory_vals, min_size=8, max_size=8)) + [-1] * 248
    return FakeMemory(lo, hi, fast=draw(st.booleans()))


@st.composite
def ops(draw):
    which = draw(st.sampled_from(["init_valid", "init_loose", "init_junk", "split", "split", "split", "split_hostile",
                                  "reset", "reads"]))
    if which == "init_valid":
        spec = draw(valid_spec())
        return ("init", build_batch(spec), dict(n_seq_max=spec["n_seq_max"], output_all=draw(st.booleans()),
                                                  n_vocab=draw(st.sampled_from([None, 100, 50])),
                                                  memory=draw(memories())))
    if which == "init_loose":
        return ("init", draw(loose_batch()), dict(n_seq_max=draw(st.one_of(st.integers(1, 8), hostile_ints)),
                                                  n_vocab=draw(st.one_of(st.none(), hostile_ints)),
                                                  output_all=draw(st.booleans()), memory=draw(memories())))
    if which == "init_junk":
        return ("init", draw(st.sampled_from([None, 3, "batch", [1, 2]])),
                dict(n_seq_max=draw(hostile_args), n_vocab=draw(hostile_args), output_all=draw(st.booleans())))
    if which == "split":
        return ("split", draw(st.sampled_from(SPLITS)), draw(st.integers(1, 9)), draw(st.integers(0, 3)),
                draw(st.booleans()))
    if which == "split_hostile":
        return ("split", draw(st.sampled_from(SPLITS)), draw(hostile_args), draw(hostile_args), draw(st.booleans()))
    return (which,)


def _apply(a, op):
    if op[0] == "init":
        return a.init(op[1], **op[2])
    if op[0] == "split":
        return ub_summary(do_split(a, *op[1:]))
    if op[0] == "reset":
        return a.split_reset()
    return (a.n_tokens, a.n_used, a.n_outputs, repr(a), a.out_ids.tolist())


@given(program=st.lists(ops(), min_size=1, max_size=12), final=st.sampled_from(SPLITS))
def test_random_programs_failures_leave_no_trace(program, final):
    a, b = BatchAllocator(), BatchAllocator()
    for op in program:
        before = snapshot(a)
        ok_a, res_a = call(_apply, a, op)
        if not ok_a:
            assert snapshot(a) == before, f"failed {op[0]} ({res_a!r}) changed the allocator"
            continue
        ok_b, res_b = call(_apply, b, op)
        assert ok_b and res_a == res_b
        assert snapshot(a) == snapshot(b)
    # the allocator that saw the failures splits exactly like the one that did not
    if a._inited:
        assert drain(a, final, 3) == drain(b, final, 3)
    a.close()
    b.close()


# ------------------------------------------------------------------------------------ wrong order / closed
@pytest.mark.parametrize("kind", SPLITS)
def test_split_before_init_and_after_close(kind):
    a = BatchAllocator()
    with pytest.raises(UbatchError, match="before a successful init"):
        do_split(a, kind, 4)
    with pytest.raises(UbatchError, match="before a successful init"):
        a.split_reset()
    a.init(Batch.from_arrays(tokens=[1, 2, 3]), n_seq_max=1)
    assert do_split(a, kind, 2).n_tokens == 2
    a.close()
    a.close()   # idempotent
    for f in (lambda: do_split(a, kind, 4), a.split_reset, lambda: a.n_tokens, lambda: a.n_used,
              lambda: a.n_outputs, lambda: a.out_ids, lambda: a.pos, lambda: a.output, lambda: a.has_coupled,
              lambda: a.seq_pos_range(0), lambda: a.init(Batch.from_arrays(tokens=[1]), n_seq_max=1)):
        with pytest.raises(UbatchError, match="closed"):
            f()
    assert repr(a) == "BatchAllocator(closed)"


def test_failed_init_keeps_previous_batch_and_cursor():
    a = BatchAllocator()
    a.init(Batch.from_arrays(tokens=[1, 2, 3, 4, 5], seq_ids=[0, 1, 0, 1, 0]), n_seq_max=2)
    first = a.split_equal(2)
    before = snapshot(a)
    bad = Batch.from_arrays(tokens=[7, 8], seq_ids=[0, 9])
    with pytest.raises(ValueError, match=r"seq_id\[1\]\[0\] = 9"):
        a.init(bad, n_seq_max=2)
    with pytest.raises(ValueError, match="n_seq_max"):
        a.init(bad, n_seq_max=0)
    with pytest.raises(ValueError, match="n_ubatch"):
        a.split_equal(0)
    with pytest.raises(ValueError, match="n_keep_tail"):
        a.split_equal(2, n_keep_tail=2)
    assert snapshot(a) == before
    rest = drain(a, "equal", 2)
    b = BatchAllocator()
    b.init(Batch.from_arrays(tokens=[1, 2, 3, 4, 5], seq_ids=[0, 1, 0, 1, 0]), n_seq_max=2)
    assert ub_summary(b.split_equal(2)) == ub_summary(first)
    assert drain(b, "equal", 2) == rest


@pytest.mark.parametrize("n_ubatch", [0, -1, I32_MIN, -(2**70)])
def test_bad_n_ubatch_names_it(n_ubatch):
    a = BatchAllocator()
    a.init(Batch.from_arrays(tokens=[1, 2]), n_seq_max=1)
    for kind in SPLITS:
        with pytest.raises(ValueError, match="n_ubatch"):
            do_split(a, kind, n_ubatch)
    assert a.n_used == 0


@pytest.mark.parametrize("arg", [1.0, "2", None, True, np.float64(2)])
def test_non_int_arguments_are_type_errors(arg):
    a = BatchAllocator()
    b = Batch.from_arrays(tokens=[1, 2])
    with pytest.raises(TypeError, match="n_seq_max"):
        a.init(b, n_seq_max=arg)
    a.init(b, n_seq_max=1)
    with pytest.raises(TypeError, match="n_ubatch"):
        a.split_simple(arg)
    with pytest.raises(TypeError, match="n_keep_tail"):
        a.split_equal(2, n_keep_tail=arg)
    with pytest.raises(TypeError, match="batch"):
        a.init([1, 2], n_seq_max=1)


def test_huge_n_ubatch_is_clamped():
    a = BatchAllocator()
    a.init(Batch.from_arrays(tokens=list(range(10))), n_seq_max=1)
    for kind in SPLITS:
        a.split_reset()
        assert do_split(a, kind, 2**70).n_tokens == 10


@pytest.mark.parametrize("s", [-1, 256, 2**40, -(2**70)])
def test_seq_pos_range_out_of_range(s):
    a = BatchAllocator()
    a.init(Batch.from_arrays(tokens=[1, 2]), n_seq_max=1)
    assert a.seq_pos_range(0) == (0, 1)
    assert a.seq_pos_range(s) == (-1, -1)
    with pytest.raises(TypeError, match="seq"):
        a.seq_pos_range("0")


@pytest.mark.parametrize("lo,hi", [(2**40, 2**40), (-(2**40), 3), ("x", None), (1.5, 2.5), (I32_MAX, I32_MAX)])
def test_memory_with_bad_bounds(lo, hi):
    a = BatchAllocator()
    a.init(Batch.from_arrays(tokens=[1, 2]), n_seq_max=1)
    before = snapshot(a)
    bad_max = not (isinstance(hi, int) and -1 <= hi < I32_MAX)
    if bad_max:                                        # seq_pos_max is read for every sequence in the batch
        with pytest.raises((ValueError, TypeError), match="memory|overflows"):
            a.init(Batch.from_arrays(tokens=[1, 2, 3]), n_seq_max=1, memory=ConstMemory(lo, hi))
        assert snapshot(a) == before
    else:                                              # a bad seq_pos_min is read (and refused) for coupled rows
        with pytest.raises((ValueError, TypeError), match="memory"):
            a.init(Batch.from_arrays(tokens=[1, 2], pos=[hi + 1, hi + 2], seq_ids=[[0, 1]] * 2), n_seq_max=2,
                   memory=ConstMemory(lo, hi))
        assert snapshot(a) == before
