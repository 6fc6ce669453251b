"""Fuzzing Batch: hostile arguments to from_arrays / add_token / add_embd. Only the allowed exceptions may
come out, each naming its culprit; a failed add leaves the batch as it was; whatever is accepted can be
inited and split without a crash."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from ubatch import Batch, BatchError
from ubatch.batch.allocator import BatchAllocator

from harden_util import I32_MAX, I32_MIN, SPLITS, call, drain, hostile_args

# numpy overflow / complex-cast warnings from the library are bugs (an exception under -W error)
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32, np.uint64, np.float16, np.float32,
           np.float64, np.bool_, np.complex64, object, "U3"]
_INT_EDGE = [0, 1, -1, 7, 255, 256, I32_MAX, I32_MIN, I32_MAX + 1, I32_MIN - 1, 2**63 - 1, -(2**63)]
_FLOAT_EDGE = [0.0, -1.5, 3.25, 1e30, -1e30, 1e300, float("nan"), float("inf"), float("-inf"), 5e-324]


@st.composite
def arrays(draw, n, ndim_choices=(1,), values=_INT_EDGE):
    """A numpy array (or list) of a random dtype/shape near n, filled with edge values."""
    ndim = draw(st.sampled_from(ndim_choices))
    shape = tuple(draw(st.sampled_from([n, n, n, 0, n + 1, max(n - 1, 0), 2])) for _ in range(ndim))
    size = int(np.prod(shape)) if shape else 1
    vals = draw(st.lists(st.sampled_from(values), min_size=size, max_size=size))
    dtype = draw(st.sampled_from(_DTYPES))
    try:
        arr = np.array(vals, dtype=object).reshape(shape)
        with np.errstate(all="ignore"):
            arr = arr.astype(dtype)
    except (ValueError, TypeError, OverflowError):
        arr = np.array(vals, dtype=object).reshape(shape)
    return draw(st.sampled_from([arr, arr.tolist()]))


@st.composite
def seq_id_inputs(draw, n):
    return draw(st.one_of(
        st.none(),
        arrays(n, (1, 2), _INT_EDGE[:8]),
        st.lists(st.one_of(st.integers(-2, 300), st.sampled_from([2**70, -(2**70)]),
                           st.lists(st.one_of(st.integers(-1, 9), st.sampled_from([I32_MAX, 2**40])), max_size=4),
                           st.sampled_from([None, "ab", 1.5, (), set(), frozenset({2, 2, 3}), range(3)])),
                 min_size=max(n - 1, 0), max_size=n + 1),
        hostile_args,
    ))


@given(data=st.data())
def test_from_arrays_hostile(data):
    n = data.draw(st.integers(0, 6))
    kwargs = {}
    if data.draw(st.booleans()):
        kwargs["tokens"] = data.draw(st.one_of(arrays(n, (1, 1, 2)), hostile_args))
    if data.draw(st.booleans()):
        kwargs["embd"] = data.draw(st.one_of(arrays(n, (2, 2, 1, 3), _FLOAT_EDGE), hostile_args))
    if data.draw(st.booleans()):
        kwargs["pos"] = data.draw(st.one_of(arrays(n, (1, 2)), hostile_args))
    if data.draw(st.booleans()):
        kwargs["seq_ids"] = data.draw(seq_id_inputs(n))
    if data.draw(st.booleans()):
        kwargs["output"] = data.draw(st.one_of(arrays(n, (1,), [0, 1, 2, -1]), hostile_args))
    if data.draw(st.booleans()):
        kwargs["n_pos_per_embd"] = data.draw(st.one_of(st.sampled_from([1, 3, 4]), hostile_args))
    ok, b = call(Batch.from_arrays, **kwargs)
    if not ok:
        return
    _init_and_split(b, data)


def _init_and_split(b, data):
    """Whatever Batch accepted must init and split without a crash (errors allowed)."""
    assert b.n_tokens >= 1
    if b.embd is not None:
        assert np.isfinite(b.embd).all()
    a = BatchAllocator(n_pos_per_embd=data.draw(st.sampled_from([1, 3, 4])))
    ok, err = call(a.init, b, n_seq_max=data.draw(st.sampled_from([1, 4, 256])),
                   n_vocab=data.draw(st.sampled_from([None, 10, I32_MAX])), output_all=data.draw(st.booleans()))
    if ok:
        for kind in SPLITS:
            a.split_reset()
            drain(a, kind, data.draw(st.integers(1, 4)))


_ROW_ARGS = st.one_of(st.integers(-1, 9), hostile_args, st.lists(st.integers(-1, 9), max_size=5),
                      st.lists(hostile_args, max_size=3))


@given(data=st.data(), cap=st.integers(1, 5), n_embd=st.sampled_from([0, 0, 2]), n_pos=st.sampled_from([1, 3]))
def test_add_rows_hostile(data, cap, n_embd, n_pos):
    b = Batch(cap, n_pos_per_embd=n_pos, n_embd=n_embd)
    for _ in range(data.draw(st.integers(1, 8))):
        before = (b.n_tokens, None if b.token is None else b.token.copy(), b.pos.copy(), b.output.copy(),
                  [b.seq_ids(i) for i in range(b.n_tokens)], None if b.embd is None else b.embd.copy())
        if data.draw(st.booleans()):
            row = data.draw(st.one_of(arrays(n_embd, (1, 1, 2), _FLOAT_EDGE), hostile_args))
            ok, r = call(b.add_embd, row, data.draw(_ROW_ARGS), data.draw(_ROW_ARGS), data.draw(st.booleans()))
        else:
            ok, r = call(b.add_token, data.draw(_ROW_ARGS), data.draw(_ROW_ARGS), data.draw(_ROW_ARGS),
                         data.draw(st.booleans()))
        if ok:
            assert r == before[0] and b.n_tokens == r + 1
            continue
        after = (b.n_tokens, None if b.token is None else b.token.copy(), b.pos.copy(), b.output.copy(),
                 [b.seq_ids(i) for i in range(b.n_tokens)], None if b.embd is None else b.embd.copy())
        assert repr(after) == repr(before), f"failed add ({r!r}) changed the batch"
    if b.n_tokens:
        _init_and_split(b, data)


# ------------------------------------------------------------------------------------ named culprits
@pytest.mark.parametrize("kwargs,match", [
    (dict(), "neither token ids nor embeddings"),
    (dict(tokens=[]), "empty"),
    (dict(tokens=[[1, 2], [3]]), "tokens"),
    (dict(tokens=[1.5, 2]), "tokens.*float64"),
    (dict(tokens=[True]), "tokens.*bool"),
    (dict(tokens=[2**31]), r"tokens\[0\] = 2147483648"),
    (dict(tokens=[1, 2], pos=[0, 2**31]), r"pos\[1\] = 2147483648"),
    (dict(tokens=[1, 2], pos=[0, 1, 2]), r"pos must have shape"),
    (dict(tokens=[1, 2], seq_ids=[0, 2**70]), r"seq_ids\[1\] = "),
    (dict(tokens=[1, 2], seq_ids=[[0], []]), "row 1 has no sequence id"),
    (dict(tokens=[1, 2], seq_ids=[[0], ["a"]]), r"seq_ids\[1\]\[0\]"),
    (dict(tokens=[1, 2], seq_ids=[0]), "seq_ids has 1 rows"),
    (dict(tokens=[1, 2], output=[1]), "output must have shape"),
    (dict(tokens=[1, 2], output=[0.5, 1.0]), "output must be"),
    (dict(embd=[[1.0, float("nan")]]), "embedding row 0 .* column 1"),
    (dict(embd=[[1.0], [1e300]]), "embedding row 1 .* column 0"),
    (dict(embd=[[1.0], [2.0]], tokens=[1]), "embd has 2 rows but tokens has 1"),
    (dict(embd=np.zeros((2, 0))), "n_embd >= 1"),
    (dict(embd=[1.0, 2.0]), "embd must have shape"),
    (dict(embd=[[1j]]), "embd must be a float array"),
    (dict(tokens=[1], n_pos_per_embd=2), "n_pos_per_embd must be 1, 3 or 4"),
    (dict(tokens=[1], n_pos_per_embd=2.0), "n_pos_per_embd must be an int"),
])
def test_from_arrays_errors_name_the_culprit(kwargs, match):
    with pytest.raises((BatchError, ValueError, TypeError), match=match):
        Batch.from_arrays(**kwargs)


def test_add_rows_errors_name_the_culprit():
    b = Batch(2, n_embd=2, n_pos_per_embd=3)
    with pytest.raises(TypeError, match="token of row 0"):
        b.add_token(1.5, 0, 0)
    with pytest.raises(TypeError, match="pos of row 0"):
        b.add_token(1, 1.5, 0)
    with pytest.raises(BatchError, match="2 position values given.*n_pos_per_embd = 3"):
        b.add_token(1, [0, 1], 0)
    with pytest.raises(BatchError, match=r"pos\[2\] of row 0 = 2147483648"):
        b.add_token(1, [0, 1, 2**31], 0)
    with pytest.raises(TypeError, match="seq_ids of row 0"):
        b.add_token(1, 0, None)
    with pytest.raises(BatchError, match="row 0 has no sequence id"):
        b.add_token(1, 0, [])
    with pytest.raises(BatchError, match=r"seq_ids\[0\]\[1\] = -2147483649"):
        b.add_token(1, 0, [0, I32_MIN - 1])
    with pytest.raises(BatchError, match="embedding row 0 has shape"):
        b.add_embd([1.0], 0, 0)
    with pytest.raises(BatchError, match="embedding row 0 has a non-finite value at column 1"):
        b.add_embd([1.0, 1e39], 0, 0)
    with pytest.raises(TypeError, match="embedding row 0 must be numeric"):
        b.add_embd(["a", "b"], 0, 0)
    assert b.n_tokens == 0
    b.add_token(1, 0, 0)
    b.add_token(2, 1, 0)
    with pytest.raises(BatchError, match="batch is full: n_tokens_max = 2"):
        b.add_token(3, 2, 0)
    with pytest.raises(BatchError, match="the first embedding row of a batch created with n_embd = 0"):
        Batch(1).add_embd([[1.0]], 0, 0)
    full = Batch.from_arrays(tokens=[1, 2], pos=[0, 1], seq_ids=[0, 0], output=[1, 1])
    full.clear()
    with pytest.raises(BatchError, match="from_arrays"):
        full.add_token(1, 0, 0)


@pytest.mark.parametrize("arg,exc", [(0, ValueError), (-1, ValueError), (1.0, TypeError), ("4", TypeError),
                                     (None, TypeError), (2**31, ValueError)])
def test_batch_constructor_rejects(arg, exc):
    with pytest.raises(exc, match="n_tokens_max"):
        Batch(arg)
    with pytest.raises(exc if arg != 0 else ValueError, match="n_embd|n_tokens_max"):
        Batch(4, n_embd=arg if arg != 0 else -1)


def test_mixed_content_rows_are_rejected_at_init():
    b = Batch(2, n_embd=2)
    b.add_token(1, 0, 0)
    b.add_embd([1.0, 2.0], 1, 0)
    a = BatchAllocator()
    with pytest.raises(BatchError, match="same content types .*row 1 has an embedding"):
        a.init(b, n_seq_max=1)


@pytest.mark.parametrize("r,exc", [(-1, IndexError), (2, IndexError), (2**70, IndexError), ("a", TypeError),
                                   (1.0, TypeError), (None, TypeError), (True, TypeError)])
def test_row_accessors_name_the_row(r, exc):
    b = Batch.from_arrays(tokens=[1, 2])
    a = BatchAllocator()
    a.init(b, n_seq_max=1)
    u = a.split_simple(4)
    for f in (u.seq_ids, b.seq_ids):
        with pytest.raises(exc, match="row"):
            f(r)
