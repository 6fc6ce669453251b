"""Limits: sizes that overflow or exceed the machine are refused up front with the size they would need;
int32 edges of positions and counts are handled in C without overflow; a real OOM inside init or a split
raises MemoryError and leaves the allocator as it was."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ubatch import Batch, BatchError
from ubatch._ffi import ffi, lib
from ubatch.batch.allocator import BatchAllocator
from ubatch.batch.container import MAX_TOKENS, batch_bytes

from harden_util import I32_MAX, I32_MIN, FakeMemory, snapshot

UNDER_ASAN = "asan" in os.environ.get("LD_PRELOAD", "")


@pytest.fixture
def sixteen_gib(monkeypatch):
    """The size checks compare with the machine's RAM: pretend it is 16 GiB so the tests do not depend
    on the machine."""
    import ubatch.common.limits

    monkeypatch.setattr(ubatch.common.limits, "physical_memory", lambda: 16 * 2**30)


@pytest.mark.parametrize("n,n_embd,n_pos,match", [
    (2**31 - 1, 4096, 1, r"would need 32\.0 TiB \(\d+ bytes\); at most 268435456 rows"),
    (MAX_TOKENS + 1, 0, 1, r"would need 4\.5 GiB .*at most 268435456 rows"),
    (2**27, 4096, 1, r"would need 2\.0 TiB .* more than this machine's"),
    (2**20, 2**31 - 1, 4, r"would need .* PiB"),
])
def test_oversized_batch_refused_up_front(n, n_embd, n_pos, match, sixteen_gib):
    with pytest.raises(ValueError, match=match):
        Batch(n, n_embd=n_embd, n_pos_per_embd=n_pos)


def test_batch_bytes_counts_every_array():
    b = Batch(1000, n_embd=16, n_pos_per_embd=3)
    arrays = [b._token, b._embd, b._pos, b._seq_off, b._seq_id, b._output, b._kind]
    assert batch_bytes(1000, 3, 16) == sum(x.nbytes for x in arrays)


def test_c_refuses_more_rows_than_its_limit():
    """The C entry point checks n_tokens before touching the (here far too short) arrays."""
    a = lib.ub_alloc_new(1)
    try:
        tok = np.zeros(4, np.int32)
        cin = ffi.new("ub_batch_in *")
        cin.n_tokens = MAX_TOKENS + 1
        cin.token = ffi.from_buffer("int32_t[]", tok)
        assert lib.ub_alloc_init(a, cin, 0, 1, 0, ffi.NULL, ffi.NULL) == lib.UB_E_BATCH
        assert b"exceeds the limit" in ffi.string(lib.ub_alloc_error(a))
        assert lib.ub_alloc_n_tokens(a) == 0
    finally:
        lib.ub_alloc_free(a)


def test_positions_at_int32_edges():
    a = BatchAllocator()
    # explicit positions at both ends of int32
    a.init(Batch.from_arrays(tokens=[1, 2], pos=[I32_MAX - 1, I32_MAX]), n_seq_max=1)
    assert a.seq_pos_range(0) == (I32_MAX - 1, I32_MAX)
    before = snapshot(a)
    # llama.cpp's C3 starts a sequence's running position at -1: a first position below -1 "decreases"
    with pytest.raises(BatchError, match="sequence 0 positions are decreasing"):
        a.init(Batch.from_arrays(tokens=[1, 2], pos=[I32_MIN, I32_MIN + 1]), n_seq_max=1)
    # max - min + 1 overflows int32: must still be seen as a gap
    with pytest.raises(BatchError, match="sequence 0 positions are not continuous"):
        a.init(Batch.from_arrays(tokens=[1, 2], pos=[I32_MIN, I32_MAX]), n_seq_max=1)
    with pytest.raises(BatchError, match="sequence 0 positions are decreasing"):
        a.init(Batch.from_arrays(tokens=[1, 2], pos=[I32_MIN + 1, I32_MIN]), n_seq_max=1)
    assert snapshot(a) == before
    # automatic positions continue the memory up to INT32_MAX, one more overflows
    mem = FakeMemory([0] * 256, [I32_MAX - 2] + [-1] * 255, fast=True)
    a.init(Batch.from_arrays(tokens=[1, 2]), n_seq_max=1, memory=mem)
    assert a.pos.tolist() == [[I32_MAX - 1, I32_MAX]]
    with pytest.raises(BatchError, match="automatic position of token 2 .* overflows int32"):
        a.init(Batch.from_arrays(tokens=[1, 2, 3]), n_seq_max=1, memory=mem)
    # Y = X + 1 with X = INT32_MAX is computed in 64 bits (no wrap to INT32_MIN)
    mem_full = FakeMemory([0] * 256, [I32_MAX] + [-1] * 255, fast=False)
    with pytest.raises(BatchError, match="X = 2147483647"):
        a.init(Batch.from_arrays(tokens=[1], pos=[I32_MIN]), n_seq_max=1, memory=mem_full)
    assert a.pos.tolist() == [[I32_MAX - 1, I32_MAX]]


def test_many_ids_per_row_and_all_256_seqs():
    rows = [list(range(256)) * 3, [255, 0, 0, 128]]   # duplicates collapse; every id allowed
    a = BatchAllocator()
    a.init(Batch.from_arrays(tokens=[1, 2], pos=[0, 1], seq_ids=rows), n_seq_max=256)
    ub = a.split_seq(8)
    assert ub.seq_ids(0).tolist() == list(range(256)) and ub.seq_ids(1).tolist() == [0, 128, 255]
    assert ub.n_seqs_unq == 256 and ub.seq_idx.tolist() == list(range(256))


def test_n_seq_max_and_n_vocab_bounds():
    b = Batch.from_arrays(tokens=[5])
    a = BatchAllocator()
    for bad in (0, -1, 257, I32_MAX, I32_MIN, 2**40, -(2**40)):
        with pytest.raises(ValueError, match=f"n_seq_max = {bad}"):
            a.init(b, n_seq_max=bad)
    with pytest.raises(BatchError, match=r"invalid token\[0\] = 5"):
        a.init(b, n_seq_max=1, n_vocab=5)
    for bad in (-1, 2**31, 2**70):
        with pytest.raises(ValueError, match="n_vocab"):
            a.init(b, n_seq_max=1, n_vocab=bad)
    a.init(b, n_seq_max=256, n_vocab=I32_MAX)


_OOM_SCRIPT = textwrap.dedent("""
    import resource, numpy as np
    from ubatch import Batch
    from ubatch.batch.allocator import BatchAllocator
    import sys; sys.path.insert(0, {tests!r})
    from harden_util import snapshot
    n, n_embd = 64, 1 << 18                       # 64 MiB of embeddings; a ubatch copy needs as much again
    b = Batch.from_arrays(embd=np.ones((n, n_embd), np.float32), seq_ids=np.arange(n) % 2)
    a = BatchAllocator()
    a.init(b, n_seq_max=2)
    first = a.split_equal(2)                      # 2 rows: small
    before = snapshot(a)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        vm = int(f.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (vm + (24 << 20), hard))
    try:
        a.split_equal(64)                         # needs ~62 MiB more: fails
        print("no-oom")
    except MemoryError as e:
        assert "out of memory while building a ubatch of 62 tokens" in str(e), e
        assert snapshot(a) == before, "failed split changed the allocator"
        try:
            a.init(b, n_seq_max=2)                # a second normalised copy (~80 MiB) does not fit either
            print("no-oom-init")
        except MemoryError as e:
            assert "out of memory while initialising a batch of 64 tokens" in str(e), e
        assert snapshot(a) == before, "failed init changed the allocator"
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        assert snapshot(a) == before
        rest = a.split_equal(64)
        assert rest.n_tokens == 62 and rest.embd[-1, -1] == 1.0 and a.split_equal(64) is None
        assert sorted(rest.batch_idxs.tolist() + first.batch_idxs.tolist()) == list(range(n))
        print("ok")
""")


@pytest.mark.skipif(UNDER_ASAN, reason="ASan reserves terabytes of address space: RLIMIT_AS cannot be used")
def test_real_oom_in_split_leaves_no_trace():
    code = _OOM_SCRIPT.format(tests=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(os.path.abspath(p) for p in sys.path if p))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                       cwd=os.path.dirname(os.path.abspath(__file__)))   # not the repo root: its ubatch/ is unbuilt
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "ok", r.stdout + r.stderr[-2000:]


def test_swa_window_of_a_sequence_ending_at_int32_max():
    """find_slot computed a sequence's max position + 1 in int32 (UB at INT32_MAX; with Python's -fwrapv it
    wrapped to INT32_MIN, so cells outside the SWA window were never reused: KV cache full)."""
    from ubatch.memory.kv_cache import KVCache

    kv = KVCache(1, 12, swa_type="standard", n_swa=4)
    a = BatchAllocator()

    def decode(b):
        a.init(b, n_seq_max=2, memory=kv)
        plan = kv.init_batch(a, 16)
        kv.begin(plan)
        for i in range(len(plan)):
            kv.apply(plan, i)
        kv.commit(plan)

    decode(Batch.from_arrays(tokens=[1] * 11, pos=list(range(I32_MAX - 10, I32_MAX + 1))))
    decode(Batch.from_arrays(tokens=[2, 3], pos=[0, 1], seq_ids=[1, 1]))   # 1 free cell + 1 reused
    assert sorted(p for _, p, ids in kv.cells(0) if ids == (1,)) == [0, 1]
    assert kv.used(0) == 12 and kv.seq_pos_max(0) == I32_MAX


@pytest.mark.parametrize("make,match", [
    (lambda: __import__("ubatch").Context(None, n_ctx=2**31 - 1), r"n_ctx = 2147483648 \(padded to 256\) gives 1 x 2147483648"),
    (lambda: __import__("ubatch").Context(None, n_ctx=2**30), r"n_ctx = 1073741824 .* would need 68\.0 GiB"),
    (lambda: __import__("ubatch").Context(None, n_ctx=2**30, n_seq_max=256), r"256 stream\(s\) x 4194304 cells"),
    (lambda: __import__("ubatch.memory.kv_cache").memory.kv_cache.KVCache(1, 2**31 - 1), r"1 x 2147483647 cells would need 136\.0 GiB"),
    (lambda: __import__("ubatch.memory.kv_cache").memory.kv_cache.KVCache(256, 2**23), r"n_stream \* size = 2147483648"),
])
def test_oversized_context_and_cache_refused_up_front(make, match, sixteen_gib):
    with pytest.raises(ValueError, match=match):
        make()


def test_context_with_model_counts_kv_data(sixteen_gib):
    from ubatch import Context
    from ubatch.models import tiny_llama

    m = tiny_llama()
    # metadata alone (KV_CELL_BYTES per cell, 8.5 GiB at 2^27 cells) fits a 16 GiB machine; with the model's
    # K/V data it does not
    from ubatch.common.limits import KV_CELL_BYTES

    n_ctx = 2**27
    need = n_ctx * (KV_CELL_BYTES + m.n_layer * m.n_head_kv * m.head_dim * 8)
    with pytest.raises(ValueError, match=rf"K/V f32/f32\) would need .* \({need} bytes\)"):
        Context(m, n_ctx=n_ctx)
