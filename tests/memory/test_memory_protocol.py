"""Both memories implement the memory protocol (ubatch.memory.protocol.Memory) publicly: isinstance through
typing's runtime check, and every method's parameters match the protocol's (names, kinds, defaults), so a
caller written against the protocol works on either. Also: nothing outside a memory reaches into it."""
from __future__ import annotations

import inspect
import pathlib
import re
import threading

import pytest

from ubatch.memory.iswa import KVCacheISWA
from ubatch.memory.kv_cache import KVCache
from ubatch.memory.protocol import Memory

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _members():
    return [n for n, v in vars(Memory).items() if not n.startswith("_") and (callable(v) or isinstance(v, property))]


def _params(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.fixture(params=["kv", "iswa"])
def memory(request):
    m = KVCache(2, 32) if request.param == "kv" else KVCacheISWA(2, 32, 16, n_swa=4)
    yield m
    m.close()


def test_isinstance(memory):
    assert isinstance(memory, Memory)
    assert not isinstance(object(), Memory)


def test_signatures_match_the_protocol(memory):
    names = _members()
    assert {"lock", "closed", "seq_pos_bounds", "init_batch", "begin", "apply", "placement", "commit",
            "rollback"} <= set(names)
    cls = type(memory)
    for name in names:
        want = vars(Memory)[name]
        have = inspect.getattr_static(cls, name)
        if isinstance(want, property):
            assert isinstance(have, property), f"{cls.__name__}.{name} must be a property"
            continue
        got = _params(have)
        exp = _params(want)
        # the memory may add trailing optional parameters; the protocol's must come first, identical
        assert got[:len(exp)] == exp, f"{cls.__name__}.{name}{inspect.signature(have)} != protocol {inspect.signature(want)}"
        assert all(p[2] is not inspect.Parameter.empty or p[1] == inspect.Parameter.VAR_KEYWORD
                   for p in got[len(exp):]), f"{cls.__name__}.{name}: extra parameters must be optional"


def test_lock_and_closed(memory):
    assert isinstance(memory.lock, type(threading.RLock()))
    with memory.lock:                      # re-entrant: the memory's own methods take it again
        assert memory.seq_pos_max(0) == -1
    assert not memory.closed
    memory.close()
    assert memory.closed


def test_two_cache_memory_shares_one_lock():
    m = KVCacheISWA(1, 32, 16, n_swa=4)
    assert m.lock is m.base.lock is m.swa.lock


PRIVATE = re.compile(r"\b(?:_kv|kv|memory|mem|base|swa)\.(_[a-z][a-z_]*)\b")


@pytest.mark.parametrize("path", ["ubatch/engine/context.py", "ubatch/memory/iswa.py", "ubatch/batch/allocator.py"])
def test_no_private_reach_into_a_memory(path):
    """Context, the two-cache memory and the allocator use the memory's public surface only."""
    src = (ROOT / path).read_text()
    hits = sorted({m.group(0) for m in PRIVATE.finditer(src)})
    assert not hits, f"{path} reaches into a memory's privates: {hits}"
