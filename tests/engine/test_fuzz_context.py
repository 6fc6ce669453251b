"""Fuzzing the KV cache and Context.decode: random programs of decodes (valid and hostile batches) and
KV sequence operations with hostile arguments (ids, ranges and deltas at int32 limits). Only the allowed
exceptions may come out; after every failure the KV cache is bit-identical to a snapshot taken before
(KVCache.equals) and the context's outputs are unchanged."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from ubatch import Batch, Context
from ubatch.common.errors import UbatchError

from harden_util import I32_MAX, I32_MIN, call, hostile_args, ub_summary, valid_spec, build_batch

# numpy overflow / complex-cast warnings from the library are bugs (an exception under -W error)
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

kv_ints = st.one_of(st.integers(-2, 20), st.sampled_from([I32_MIN, I32_MIN + 1, I32_MAX, I32_MAX - 1, 255, 256,
                                                          2**40, -(2**40)]))


def _ctx_state(ctx):
    """The observable output state of a context (the cache is compared with KVCache.equals)."""
    return (ctx.n_outputs, ctx.output_ids.tolist(), [ub_summary(u) for u in ctx.last_ubatches],
            [(ctx.memory.used(s), ctx.memory.head(s), ctx.memory.cells(s)) for s in range(ctx.memory.n_stream)])


@st.composite
def decode_batches(draw):
    if draw(st.booleans()):
        spec = draw(valid_spec(max_rows=12, max_seq=4))
        return build_batch(spec)
    n = draw(st.integers(1, 10))
    sets = draw(st.lists(st.lists(st.one_of(st.integers(0, 4), st.sampled_from([-1, 255, 256])), min_size=1,
                                  max_size=2), min_size=n, max_size=n))
    pos = draw(st.one_of(st.none(), st.lists(st.one_of(st.integers(0, 30),
                                                       st.sampled_from([I32_MAX, I32_MAX - 1, -1, I32_MIN])),
                                             min_size=n, max_size=n)))
    return Batch.from_arrays(tokens=draw(st.lists(st.integers(-1, 300), min_size=n, max_size=n)), pos=pos,
                             seq_ids=sets, output=draw(st.one_of(st.none(), st.lists(st.booleans(), min_size=n,
                                                                                      max_size=n))))


@st.composite
def ctx_ops(draw):
    k = draw(st.sampled_from(["decode", "decode", "decode", "rm", "cp", "keep", "add", "div", "clear", "query",
                              "junk"]))
    if k == "decode":
        return ("decode", draw(decode_batches()))
    if k == "rm":
        return ("seq_rm", draw(kv_ints), draw(kv_ints), draw(kv_ints))
    if k == "cp":
        return ("seq_cp", draw(kv_ints), draw(kv_ints), draw(kv_ints), draw(kv_ints))
    if k == "keep":
        return ("seq_keep", draw(kv_ints))
    if k == "add":
        return ("seq_add", draw(kv_ints), draw(kv_ints), draw(kv_ints), draw(kv_ints))
    if k == "div":
        return ("seq_div", draw(kv_ints), draw(kv_ints), draw(kv_ints), draw(kv_ints))
    if k == "clear":
        return ("clear",)
    if k == "query":
        return ("query", draw(kv_ints))
    return ("junk", draw(st.sampled_from(["seq_rm", "seq_cp", "seq_add", "seq_pos_min", "used", "cells", "decode"])),
            draw(hostile_args))


def _run(ctx, op):
    kv = ctx.memory
    name = op[0]
    if name == "decode":
        return ctx.decode(op[1])
    if name == "clear":
        return kv.clear()
    if name == "query":
        s = op[1]
        return (kv.seq_pos_min(s), kv.seq_pos_max(s), kv.used(s), kv.head(s), kv.cells(s))
    if name == "junk":
        target = ctx.decode if op[1] == "decode" else getattr(kv, op[1])
        n_args = {"seq_rm": 3, "seq_cp": 4, "seq_add": 4}.get(op[1], 1)
        return target(*([op[2]] * n_args))
    return getattr(kv, name)(*op[1:])


@given(n_stream_unified=st.sampled_from([(1, True), (2, False), (4, False)]),
       n_ctx=st.sampled_from([16, 64]), n_ubatch=st.sampled_from([1, 3, 8]),
       program=st.lists(ctx_ops(), min_size=1, max_size=15))
def test_context_random_programs(n_stream_unified, n_ctx, n_ubatch, program):
    n_seq, unified = n_stream_unified
    ctx = Context(None, n_ctx=n_ctx, n_batch=16, n_ubatch=n_ubatch, n_seq_max=n_seq, kv_unified=unified)
    kv = ctx.memory
    for op in program:
        snap = kv.snapshot()
        before = _ctx_state(ctx)
        ok, err = call(_run, ctx, op)
        if ok:
            continue
        assert kv.equals(snap), f"failed {op[0]} ({err!r}) changed the KV cache"
        if op[0] in ("decode", "junk"):
            assert _ctx_state(ctx) == before, f"failed {op[0]} ({err!r}) changed the context"


@given(program=st.lists(ctx_ops(), min_size=1, max_size=8), data=st.data())
def test_context_with_model_random_programs(program, data):
    """The same with the embedded tiny model (tokens >= n_vocab, pooled embeddings, compute)."""
    from ubatch.models import tiny_llama

    global _MODEL
    if _MODEL is None:
        _MODEL = tiny_llama()
    pooling = data.draw(st.sampled_from(["none", "mean", "last"]))
    ctx = Context(_MODEL, n_ctx=64, n_batch=16, n_ubatch=data.draw(st.sampled_from([4, 16])),
                  n_seq_max=data.draw(st.sampled_from([1, 4])), kv_unified=True,
                  embeddings=pooling != "none", pooling=pooling)
    kv = ctx.memory
    for op in program:
        snap = kv.snapshot()
        before = _ctx_state(ctx)
        logits = call(ctx.get_logits)[1]
        ok, err = call(_run, ctx, op)
        if ok:
            if op[0] == "decode" and not ctx.embeddings:
                out = ctx.get_logits()
                assert out.shape == (ctx.n_outputs, _MODEL.n_vocab) and np.isfinite(out).all()
            continue
        assert kv.equals(snap), f"failed {op[0]} ({err!r}) changed the KV cache"
        if op[0] in ("decode", "junk"):
            assert _ctx_state(ctx) == before
            after = call(ctx.get_logits)[1]
            assert type(after) is type(logits)
            if isinstance(logits, np.ndarray):
                assert np.array_equal(after, logits)


_MODEL = None


@pytest.mark.parametrize("kwargs,match", [
    (dict(n_ctx=-1), "n_ctx"), (dict(n_batch=0), "n_batch"), (dict(n_ubatch=-1), "n_ubatch"),
    (dict(n_seq_max=257), "n_seq_max"), (dict(n_seq_max=2**40), "n_seq_max"), (dict(pooling="max"), "pooling"),
    (dict(type_k="q4"), "type_k"), (dict(n_ctx=1.5), "n_ctx"), (dict(n_ctx=0), "n_ctx = 0"),
])
def test_context_constructor_rejects(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        Context(None, **kwargs)


def test_decode_wrong_order_and_closed_memory():
    ctx = Context(None, n_ctx=64, n_batch=8, n_ubatch=4)
    with pytest.raises(TypeError, match="batch"):
        ctx.decode([1, 2, 3])
    with pytest.raises(UbatchError, match="planning-only"):
        ctx.get_logits()
    with pytest.raises(ValueError, match="n_batch"):
        ctx.decode(Batch.from_arrays(tokens=list(range(9))))
    ctx.decode(Batch.from_arrays(tokens=[1, 2, 3]))
    ctx.memory.close()
    with pytest.raises(UbatchError, match="closed"):
        ctx.decode(Batch.from_arrays(tokens=[4], pos=[3]))
    with pytest.raises(UbatchError, match="closed"):
        ctx.memory.seq_rm(0)
