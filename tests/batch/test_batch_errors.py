"""Bad inputs of every kind raise the right exception, with a message naming the culprit, and a failed
init leaves the allocator exactly as it was (its previous batch still splits identically)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from ubatch import Batch, BatchError, SplitError, UbatchError

from split_helpers import IMPLS, ConstMemory, FastSeqPosMemory, SeqPosMemory, allocator_factory

I32_MAX = 2**31 - 1


def _tok(n=3, **kw) -> Batch:
    return Batch.from_arrays(tokens=list(range(1, n + 1)), **kw)


def _raises(exc, pattern, fn, *args, **kw):
    with pytest.raises(exc) as ei:
        fn(*args, **kw)
    assert re.search(pattern, str(ei.value)), f"message {str(ei.value)!r} does not match {pattern!r}"
    return ei.value


# ============================================================== Batch construction
@pytest.mark.parametrize("kw, exc, pattern", [
    (dict(tokens=[1.0, 2.0]), TypeError, r"tokens.*dtype float"),
    (dict(tokens=[True, False]), TypeError, r"tokens.*dtype bool"),
    (dict(tokens=["a", "b"]), TypeError, r"tokens"),
    (dict(tokens=[[1, 2], [3, 4]]), BatchError, r"tokens must be 1-D"),
    (dict(tokens=[1, 2**31]), BatchError, r"tokens\[1\] = 2147483648 does not fit in int32"),
    (dict(tokens=[-(2**31) - 1]), BatchError, r"tokens\[0\] = -2147483649"),
    (dict(tokens=[]), BatchError, r"n_tokens == 0"),
    (dict(), BatchError, r"neither token ids nor embeddings"),
    (dict(embd=np.zeros(4, np.float32)), BatchError, r"embd must have shape \[n, n_embd\]"),
    (dict(embd=np.zeros((2, 0), np.float32)), BatchError, r"embd must have shape"),
    (dict(embd=np.array([["x"]])), TypeError, r"embd must be a float array"),
    (dict(embd=np.zeros((0, 3), np.float32)), BatchError, r"n_tokens == 0"),
    (dict(tokens=[1, 2], embd=np.zeros((3, 2), np.float32)), BatchError, r"embd has 3 rows but tokens has 2"),
    (dict(embd=np.array([[0.0, 1.0], [np.nan, 0.0]], np.float32)), BatchError, r"row 1 .*column 0"),
    (dict(embd=np.array([[0.0, np.inf]], np.float32)), BatchError, r"row 0 .*column 1"),
    (dict(tokens=[1, 2], pos=[0, 1, 2]), BatchError, r"pos must have shape \(2,\)"),
    (dict(tokens=[1, 2], pos=[[0, 1], [0, 1]]), BatchError, r"pos must have shape"),
    (dict(tokens=[1, 2], pos=[0.0, 1.0]), TypeError, r"pos.*dtype float"),
    (dict(tokens=[1, 2], pos=[0, 2**31]), BatchError, r"pos\[1\] = 2147483648 does not fit in int32"),
    (dict(tokens=[1, 2], seq_ids=[0]), BatchError, r"seq_ids has 1 rows, expected 2"),
    (dict(tokens=[1, 2], seq_ids=np.zeros(3, np.int32)), BatchError, r"seq_ids must have shape"),
    (dict(tokens=[1, 2], seq_ids=[[0], []]), BatchError, r"row 1 has no sequence id"),
    (dict(tokens=[1, 2], seq_ids=[[0], [2**31]]), BatchError, r"seq_ids\[1\]\[0\] = 2147483648 does not fit"),
    (dict(tokens=[1, 2], seq_ids=[[0], [1.5]]), TypeError, r"seq_ids\[1\]\[0\] must be an int"),
    (dict(tokens=[1, 2], seq_ids=np.array([0.0, 1.0])), TypeError, r"seq_ids.*dtype float"),
    (dict(tokens=[1, 2], seq_ids=5), TypeError, r"seq_ids must be an array or a list"),
    (dict(tokens=[1, 2], output=[1]), BatchError, r"output must have shape \(2,\)"),
    (dict(tokens=[1, 2], output=[0.5, 1.0]), TypeError, r"output must be a bool or integer"),
    (dict(tokens=[1, 2], pos=[0, 1], n_pos_per_embd=2), ValueError, r"n_pos_per_embd must be 1, 3 or 4"),
])
def test_from_arrays_rejects(kw, exc, pattern) -> None:
    _raises(exc, pattern, Batch.from_arrays, **kw)


def test_add_rows_rejects() -> None:
    b = Batch(2, n_embd=3)
    _raises(TypeError, r"token of row 0 must be an int", b.add_token, 1.5, 0, 0)
    _raises(BatchError, r"token of row 0 = 2147483648 does not fit", b.add_token, 2**31, 0, 0)
    _raises(BatchError, r"row 0: 2 position values given, the batch has n_pos_per_embd = 1", b.add_token, 1, [0, 1], 0)
    _raises(BatchError, r"row 0 has no sequence id", b.add_token, 1, 0, [])
    _raises(TypeError, r"seq_ids\[0\]\[0\] must be an int", b.add_token, 1, 0, ["x"])
    _raises(BatchError, r"embedding row 0 has shape \(2,\), expected \(3,\)", b.add_embd, [1.0, 2.0], 0, 0)
    _raises(BatchError, r"embedding row 0 has a non-finite value at column 1", b.add_embd, [1.0, np.nan, 0], 0, 0)
    _raises(TypeError, r"embedding row 0 must be numeric", b.add_embd, ["a", "b", "c"], 0, 0)
    assert b.n_tokens == 0, "a rejected row must not be added"
    b.add_token(1, 0, 0)
    b.add_token(2, 1, 0)
    _raises(BatchError, r"batch is full: n_tokens_max = 2", b.add_token, 3, 2, 0)
    nb = Batch(3)      # llama.cpp's container: n_embd 0 takes the width of the first embedding row
    _raises(BatchError, r"embedding row 0 has a non-finite value", nb.add_embd, [1.0, np.inf], 0, 0)
    assert nb.n_embd == 0 and nb.n_tokens == 0, "a rejected first row must not fix the width"
    nb.add_embd([1.0, 2.0], 0, 0)
    assert nb.n_embd == 2
    _raises(BatchError, r"embedding row 1 has shape \(3,\), expected \(2,\).*set by its first embedding row",
            nb.add_embd, [1.0, 2.0, 3.0], 1, 0)
    assert nb.n_tokens == 1
    nb.add_embd([3.0, 4.0], 1, 0)
    np.testing.assert_array_equal(nb.embd, [[1.0, 2.0], [3.0, 4.0]])
    _raises(ValueError, r"n_tokens_max must be >= 1", Batch, 0)
    _raises(TypeError, r"n_tokens_max must be an int", Batch, 2.0)


def test_add_token_float_pos_names_culprit() -> None:
    _raises(TypeError, r"pos.*row 0", Batch(2).add_token, 1, 0.5, 0)


# ============================================================== allocator: init
@pytest.fixture(params=IMPLS)
def alloc_cls(request):
    return allocator_factory(request.param)


@pytest.mark.parametrize("make, kw, exc, pattern", [
    (lambda: Batch(4), dict(n_seq_max=1), BatchError, r"n_tokens == 0"),
    (lambda: _tok(), dict(n_seq_max=257), BatchError, r"^n_seq_max = 257 > 256$"),
    (lambda: _tok(), dict(n_seq_max=0), BatchError, r"^n_seq_max = 0 < 1$"),
    (lambda: _tok(), dict(n_seq_max=2.0), TypeError, r"n_seq_max must be an int"),
    (lambda: _tok(), dict(n_seq_max=1, n_vocab=2), BatchError, r"^invalid token\[1\] = 2$"),
    (lambda: _tok(), dict(n_seq_max=1, n_vocab=-1), ValueError, r"n_vocab"),
    (lambda: _tok(), dict(n_seq_max=1, n_vocab="256"), TypeError, r"n_vocab"),
    (lambda: Batch.from_arrays(tokens=[-1, 0]), dict(n_seq_max=1, n_vocab=256), BatchError, r"^invalid token\[0\] = -1$"),
    (lambda: _tok(seq_ids=[0, 1, 2]), dict(n_seq_max=2), BatchError, r"^invalid seq_id\[2\]\[0\] = 2 >= 2$"),
    (lambda: _tok(seq_ids=[0, -4, 1]), dict(n_seq_max=2), BatchError, r"^invalid seq_id\[1\]\[0\] = -4 >= 2$"),
    (lambda: _tok(seq_ids=[[0], [1, 0, 7], [1]]), dict(n_seq_max=2), BatchError, r"^invalid seq_id\[1\]\[2\] = 7 >= 2$"),
    (lambda: _tok(pos=[0, 2, 1]), dict(n_seq_max=1), BatchError, r"^sequence 0 positions are decreasing \(not allowed\)$"),
    (lambda: _tok(pos=[0, 2, 3]), dict(n_seq_max=1), BatchError, r"^sequence 0 positions are not continuous$"),
    (lambda: _tok(pos=[0, 1, 1], seq_ids=[1, 1, 0]), dict(n_seq_max=2, memory=SeqPosMemory({1: (0, 4)})),
     BatchError, r"^the tokens of sequence 1 .*\n.* sequence 1 is X = 4\n.* sequence 1 .* Y = 0\n it is required "
                 r"that the sequence positions remain consecutive: Y = X \+ 1$"),
    (lambda: _tok(pos=[5, 6, 7], seq_ids=[[0, 1], [0, 1], [0, 1]]),
     dict(n_seq_max=2, memory=SeqPosMemory({0: (0, 4), 1: (1, 4)})),
     BatchError, r"^sequence 0 is coupled to 1 in the input batch, but have divereged$"),
    (lambda: _tok(pos=[5, 6, 7], seq_ids=[[1, 0], [0, 1], [0, 1]]),
     dict(n_seq_max=2, memory=FastSeqPosMemory({0: (0, 4), 1: (1, 4)})),
     BatchError, r"^sequence 0 is coupled to 1 in the input batch, but have divereged$"),
    (lambda: _tok(), dict(n_seq_max=1, memory=SeqPosMemory({0: (0, I32_MAX)})),
     BatchError, r"automatic position of token 0 \(seq 0\) overflows int32"),
])
def test_init_rejects(alloc_cls, make, kw, exc, pattern) -> None:
    a = alloc_cls()
    e = _raises(exc, pattern, a.init, make(), **kw)
    if isinstance(e, BatchError):
        assert e.code == -1
    _raises(UbatchError, r"before a successful init", a.split_simple, 4)   # still nothing to split


def test_init_rejects_non_batch(alloc_cls) -> None:
    _raises(TypeError, r"batch must be a ubatch.Batch", alloc_cls().init, [1, 2, 3], n_seq_max=1)


def test_mrope_rules(alloc_cls) -> None:
    a = alloc_cls(n_pos_per_embd=4)
    mem = SeqPosMemory({0: (0, 9)})
    _raises(BatchError, r"X = 9\n.*Y = 9\n for M-RoPE, it is required that the position satisfies: X < Y$",
            a.init, _tok(1, pos=[9]), n_seq_max=1, memory=mem)
    a.init(Batch.from_arrays(tokens=[1, 2], pos=[20, 30]), n_seq_max=1, memory=mem)  # jumps are fine
    ub = a.split_simple(8)
    assert ub.pos.tolist() == [[20, 30]] * 4, "a token position is broadcast to every section"
    embd = np.zeros((2, 2), np.float32)
    _raises(BatchError, r"Y = 8\n for M-RoPE, it is required that the position satisfies: X <= Y$", a.init,
            Batch.from_arrays(embd=embd, pos=np.full((4, 2), 8), n_pos_per_embd=4), n_seq_max=1, memory=mem)
    a.init(Batch.from_arrays(embd=embd, pos=np.array([[9, 9], [1, 2], [3, 4], [5, 6]]), n_pos_per_embd=4),
           n_seq_max=1, memory=mem)
    assert a.split_simple(8).pos.tolist() == [[9, 9], [1, 2], [3, 4], [5, 6]]
    # embeddings on an M-RoPE model need explicit positions (llama.cpp reads out of bounds)
    _raises(BatchError, r"embedding batch .*4 position sections needs explicit positions", a.init,
            Batch.from_arrays(embd=embd, n_pos_per_embd=4), n_seq_max=1)
    _raises(BatchError, r"embedding batch has 1 position section\(s\) per row, the allocator needs "
            r"n_pos_per_embd = 4", a.init, Batch.from_arrays(embd=embd, pos=[0, 1]), n_seq_max=1)
    _raises(BatchError, r"embedding batch has 4 position section\(s\) per row, the allocator needs "
            r"n_pos_per_embd = 1", alloc_cls().init,
            Batch.from_arrays(embd=embd, pos=np.zeros((4, 2), int), n_pos_per_embd=4), n_seq_max=1)


@pytest.mark.parametrize("lo, hi, exc, pattern", [
    (0, -2, ValueError, r"memory.seq_pos_max\(0\) = -2 is outside \[-1, 2147483647\]"),
    (-5, 3, ValueError, r"memory.seq_pos_min\(0\) = -5 is outside"),
    (0, 2**31, ValueError, r"memory.seq_pos_max\(0\) = 2147483648 is outside"),
    (0, 1.5, TypeError, r"memory.seq_pos_max\(0\) returned float, expected an int"),
])
def test_memory_bounds_are_checked(alloc_cls, lo, hi, exc, pattern) -> None:
    a = alloc_cls()
    a.init(_tok(2), n_seq_max=1)
    coupled = Batch.from_arrays(tokens=[1, 2, 3], pos=[5, 6, 7], seq_ids=[[0, 1]] * 3)   # seq_pos_min is read
    _raises(exc, pattern, a.init, coupled, n_seq_max=2, memory=ConstMemory(lo, hi))
    assert a.n_tokens == 2 and a.split_simple(8).n_tokens == 2


class _CountingMemory:
    def __init__(self):
        self.asked = []

    def seq_pos_min(self, s):
        self.asked.append(("min", s))
        return -1

    def seq_pos_max(self, s):
        self.asked.append(("max", s))
        return -1


def test_plain_memory_is_asked_only_what_llama_cpp_asks(alloc_cls) -> None:
    """seq_pos_max of the batch's sequences (all of [0, n_seq_max) for automatic positions), seq_pos_min of
    the coupled ones only: the cost follows the batch, not n_seq_max."""
    m = _CountingMemory()
    alloc_cls().init(Batch.from_arrays(tokens=[1, 2, 3], pos=[0, 0, 1], seq_ids=[[3], [7], [3]]), n_seq_max=256,
                     memory=m)
    assert sorted(m.asked) == [("max", 3), ("max", 7)]
    m = _CountingMemory()
    alloc_cls().init(Batch.from_arrays(tokens=[1, 2], pos=[0, 1], seq_ids=[[1, 2], [1, 2]]), n_seq_max=4, memory=m)
    assert sorted(m.asked) == [("max", 1), ("max", 2), ("min", 1), ("min", 2)]
    m = _CountingMemory()
    alloc_cls().init(Batch.from_arrays(tokens=[1, 2]), n_seq_max=5, memory=m)
    assert sorted(m.asked) == [("max", s) for s in range(5)]


def test_native_memory_fast_path_is_checked() -> None:
    a = allocator_factory("native")()

    class Fast(FastSeqPosMemory):
        def __init__(self, lo, hi):
            super().__init__()
            self.arrays = (lo, hi)

        def seq_pos_bounds(self, n_seq_max):
            return self.arrays

    _raises(ValueError, r"seq_pos_bounds\(\)\[0\] has shape \(1,\), expected \(2,\)", a.init, _tok(), n_seq_max=2,
            memory=Fast(np.zeros(1, np.int64), np.zeros(2, np.int64)))
    _raises(ValueError, r"seq_pos_bounds\(\)\[1\]\[1\] = -3 is outside", a.init, _tok(), n_seq_max=2,
            memory=Fast(np.zeros(2, np.int64), np.array([0, -3])))
    _raises(TypeError, r"seq_pos_bounds\(\)\[0\] has dtype float64", a.init, _tok(), n_seq_max=2,
            memory=Fast(np.zeros(2), np.zeros(2, np.int64)))


def test_mixed_content_types(alloc_cls) -> None:
    b = Batch(4, n_embd=2)
    b.add_token(1, 0, 0)
    b.add_token(2, 1, 0)
    b.add_embd([1.0, 2.0], 2, 0)
    _raises(BatchError, r"^all entries in the batch must have the same content types \(row 2 has an embedding, "
            r"row 0 has a token id\)$", alloc_cls().init, b, n_seq_max=1)
    e = Batch(4, n_embd=2)
    e.add_embd([1.0, 2.0], 0, 0)
    e.add_token(7, 1, 0)
    _raises(BatchError, r"row 1 has a token id, row 0 has an embedding", alloc_cls().init, e, n_seq_max=1)


@pytest.mark.parametrize("impl", IMPLS)
def test_n_vocab_zero_rejects_every_token(impl) -> None:
    """llama.cpp's semantics (its own allocator test uses vocab 0): n_vocab = 0 is an empty vocabulary, so
    every token id is invalid (BatchError naming the first token), never a disabled check."""
    _raises(BatchError, r"^invalid token\[0\] = 0$", allocator_factory(impl)().init,
            Batch.from_arrays(tokens=[0, 1]), n_seq_max=1, n_vocab=0)
    _raises(BatchError, r"^invalid token\[0\] = 1$", allocator_factory(impl)().init, _tok(), n_seq_max=1, n_vocab=0)


@pytest.mark.parametrize("impl", IMPLS)
def test_only_null_tokens_is_neither(impl) -> None:
    """Rows added with LLAMA_TOKEN_NULL (-1) carry no token id (llama.cpp's container): a batch of only
    such rows has neither token ids nor embeddings; mixed with token rows the content types differ."""
    b = Batch(2)
    b.add_token(-1, 0, 0)
    b.add_token(-1, 1, 0)
    _raises(BatchError, r"^batch has neither token ids nor embeddings$", allocator_factory(impl)().init, b,
            n_seq_max=1, n_vocab=10)
    m = Batch(2)
    m.add_token(3, 0, 0)
    m.add_token(-1, 1, 0)
    _raises(BatchError, r"row 1 has neither, row 0 has a token id", allocator_factory(impl)().init, m, n_seq_max=1)


@pytest.mark.parametrize("impl", IMPLS)
def test_first_position_below_minus_one(impl) -> None:
    """llama.cpp's C3 starts every seq's running position at -1, so a first position < -1 is 'decreasing'."""
    a = allocator_factory(impl)()
    _raises(BatchError, r"^sequence 1 positions are decreasing \(not allowed\)$", a.init,
            _tok(2, pos=[0, -2], seq_ids=[0, 1]), n_seq_max=2)
    a.init(_tok(2, pos=[-1, 0]), n_seq_max=1)     # -1 itself is allowed
    assert a.split_simple(4).pos.tolist() == [[-1, 0]]


# ============================================================== allocator: splits
def test_split_argument_errors(alloc_cls) -> None:
    a = alloc_cls()
    _raises(UbatchError, r"split called before a successful init", a.split_equal, 4)
    _raises(UbatchError, r"before a successful init", a.split_reset)
    a.init(_tok(4, seq_ids=[0, 1, 0, 1]), n_seq_max=2)
    for bad in (0, -1):
        for split in (a.split_simple, a.split_seq, a.split_equal):
            e = _raises(ValueError, rf"n_ubatch must be >= 1, got {bad}", split, bad)
            assert not isinstance(e, BatchError)
    for split in (a.split_simple, a.split_seq, a.split_equal):
        _raises(TypeError, r"n_ubatch must be an int", split, 2.0)
    _raises(BatchError, r"n_keep_tail = 4 must be >= 0 and < n_ubatch = 4", a.split_equal, 4, n_keep_tail=4)
    _raises(BatchError, r"n_keep_tail = 5 must be >= 0 and < n_ubatch = 4", a.split_equal, 4, n_keep_tail=5)
    _raises(BatchError, r"n_keep_tail = -1 must be >= 0", a.split_equal, 4, n_keep_tail=-1)
    _raises(TypeError, r"n_keep_tail must be an int", a.split_equal, 4, n_keep_tail=1.0)
    assert a.n_used == 0, "a rejected split consumes nothing"
    assert a.split_equal(4).batch_idxs.tolist() == [0, 2, 1, 3]


def test_sequential_split_refuses_coupled(alloc_cls) -> None:
    a = alloc_cls()
    a.init(_tok(3, pos=[0, 1, 1], seq_ids=[[0, 1], [0], [1]]), n_seq_max=2)
    e = _raises(SplitError, r"sequential split is not supported when there are coupled sequences in the input "
                r"batch \(you may need to use the -kvu flag\)", a.split_equal, 8, sequential=True)
    assert e.code == 1 and a.n_used == 0 and a.out_ids.tolist() == []
    assert a.split_equal(8).batch_idxs.tolist() == [0]          # the non-sequential split works
    # {0, 0} is one id, not a coupling
    a.init(_tok(2, seq_ids=[[0, 0], [0]]), n_seq_max=1)
    assert a.split_equal(8, sequential=True).n_tokens == 2


# ============================================================== a failed init changes nothing
GOOD = dict(pos=[0, 0, 1, 1, 2, 2], seq_ids=[0, 1, 0, 1, 0, 1], output=[0, 1, 0, 1, 1, 1])
BAD_INITS = [
    (lambda: _tok(3, pos=[0, 2, 1]), dict(n_seq_max=2)),
    (lambda: _tok(3, seq_ids=[0, 5, 0]), dict(n_seq_max=2)),
    (lambda: _tok(3), dict(n_seq_max=300)),
    (lambda: _tok(3), dict(n_seq_max=1, n_vocab=2)),
    (lambda: Batch(2), dict(n_seq_max=1)),
    (lambda: _tok(3, pos=[7, 8, 9]), dict(n_seq_max=1, memory=SeqPosMemory({0: (0, 3)}))),
    (lambda: _tok(1, pos=[5], seq_ids=[[0, 1]]), dict(n_seq_max=2, memory=FastSeqPosMemory({0: (0, 4), 1: (2, 4)}))),
]


def _records(a, n):
    out = []
    for _ in range(n):
        ub = a.split_equal(2, strict=True)
        if ub is None:
            break
        out.append((ub.batch_idxs.tolist(), ub.token.tolist(), ub.pos.tolist(), ub.output.tolist(),
                    [ub.seq_ids(r).tolist() for r in range(ub.n_tokens)], ub.n_seqs, ub.n_seq_tokens))
    return out


@pytest.mark.parametrize("bad", range(len(BAD_INITS)))
def test_failed_init_leaves_state(alloc_cls, bad) -> None:
    ref = alloc_cls()
    ref.init(_tok(6, **GOOD), n_seq_max=2, output_all=False)
    expected = _records(ref, 100)
    assert len(expected) == 3

    a = alloc_cls()
    a.init(_tok(6, **GOOD), n_seq_max=2, output_all=False)
    first = _records(a, 1)                        # mid-way through a split loop
    before = (a.n_tokens, a.n_used, a.n_outputs, a.out_ids.tolist(), a.pos.tolist(), a.output.tolist())
    make, kw = BAD_INITS[bad]
    with pytest.raises(BatchError):
        a.init(make(), **kw)
    assert (a.n_tokens, a.n_used, a.n_outputs, a.out_ids.tolist(), a.pos.tolist(), a.output.tolist()) == before
    assert first + _records(a, 100) == expected, "the split continues where it was"
    a.split_reset()
    assert _records(a, 100) == expected, "and re-splits identically"


def test_allocator_owns_its_copy(alloc_cls) -> None:
    """Changing the Batch after init does not change what the allocator splits."""
    b = Batch(3)
    for i in range(3):
        b.add_token(10 + i, i, 0, output=True)
    a = alloc_cls()
    a.init(b, n_seq_max=1)
    b.clear()
    b.add_token(99, 5, 0)
    ub = a.split_simple(8)
    assert ub.token.tolist() == [10, 11, 12] and ub.pos.tolist() == [[0, 1, 2]] and a.out_ids.tolist() == [0, 1, 2]
