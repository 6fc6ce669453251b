"""The two-cache sliding-window memory (KVCacheISWA, llama.cpp's llama_kv_cache_iswa) through planning-only
Contexts and the memory protocol: sizes (docs/llama-cpp-behaviours.md §M4.2), the worked 3,000-token example (§M4.6), rewind
refusal (§M4.7, beyond llama.cpp), one transaction for both caches under injected failures, seq ops on both."""
from __future__ import annotations

import numpy as np
import pytest

import ubatch
from ubatch import Batch, Context, KVCacheFullError, RewindError
from ubatch.memory.iswa import KVCacheISWA, swa_cache_size


def seq_batch(s, p0, n, out_last=True):
    return Batch.from_arrays(tokens=[1] * n, pos=list(range(p0, p0 + n)), seq_ids=[s] * n,
                             output=[0] * (n - 1) + [1 if out_last else 0])


def gemma_ctx(**kw):
    """Gemma 3 270M's window (512) on a 4096 context, n_ubatch 512, one sequence, swa_full = false."""
    args = dict(n_ctx=4096, n_batch=4096, n_ubatch=512, n_seq_max=1, n_swa=512, swa_full=False)
    args.update(kw)
    return Context(None, **args)


def both_cells(mem):
    return ([mem.base.cell_arrays(s) for s in range(mem.n_stream)], [mem.swa.cell_arrays(s) for s in range(mem.n_stream)])


def test_sizes_follow_llama_cpp():
    # docs/llama-cpp-behaviours.md §M4.2: size_swa = pad256(min(size, n_swa * (unified ? n_seq_max : 1) + n_ubatch)), swa_full: size
    assert swa_cache_size(4096, 512, n_seq_max=1, unified=False, n_ubatch=512, swa_full=False) == 1024
    assert swa_cache_size(512, 512, n_seq_max=1, unified=False, n_ubatch=512, swa_full=False) == 512
    assert swa_cache_size(4096, 512, n_seq_max=1, unified=False, n_ubatch=512, swa_full=True) == 4096
    assert swa_cache_size(8192, 512, n_seq_max=4, unified=True, n_ubatch=512, swa_full=False) == 2560
    assert swa_cache_size(4096, 100, n_seq_max=1, unified=False, n_ubatch=7, swa_full=False) == 256
    c = gemma_ctx()
    assert isinstance(c.memory, KVCacheISWA) and c.n_ctx_swa == 1024 and c.memory.size == 4096
    d = c.memory.describe()["caches"]
    assert [(x["name"], x["size"], x["n_swa"]) for x in d] == [("full", 4096, 0), ("sliding", 1024, 512)]
    assert Context(None, n_ctx=4096, n_swa=512).n_ctx_swa == 4096          # swa_full defaults to True (C API)
    assert isinstance(Context(None, n_ctx=512).memory, ubatch.KVCache)      # no window: one cache


def test_swa_pattern_gives_layers():
    c = Context(None, n_ctx=512, n_swa=512, swa_pattern=6, n_layer=18)
    assert [i for i, x in enumerate(c.swa_layers) if not x] == [5, 11, 17]   # gemma 270M's global layers
    assert c.memory.describe()["swa_layers"] == [i for i in range(18) if i % 6 != 5]


def test_worked_example_3000_tokens():
    """§M4.6: a 3,000-token prompt in ubatches of 512 into a 1024-cell sliding cache: it keeps 1976..2999 (the
    cells of the table), the full cache keeps 0..2999; positions are answered from the sliding cache."""
    c = gemma_ctx()
    c.decode(seq_batch(0, 0, 3000))
    mem = c.memory
    assert len(c.last_ubatches) == 6
    assert (mem.base.seq_pos_min(0), mem.base.seq_pos_max(0)) == (0, 2999)
    assert (mem.swa.seq_pos_min(0), mem.swa.seq_pos_max(0)) == (1976, 2999)
    assert (mem.seq_pos_min(0), mem.seq_pos_max(0)) == (1976, 2999)
    swa_cells = [cells for _, cells in c.last_placements_swa]
    for k, (first, last) in enumerate([(0, 511), (512, 1023), (0, 511), (512, 1023), (0, 511), (512, 951)]):
        assert swa_cells[k].ravel().tolist() == list(range(first, last + 1)), k
    full_cells = np.concatenate([cells.ravel() for _, cells in c.last_placements])
    assert full_cells.tolist() == list(range(3000))
    # decoding on is fine: the window of 3000 (2489..2999) is held
    c.decode(seq_batch(0, 3000, 1))
    assert mem.seq_pos_max(0) == 3000


def test_rewind_refused_and_allowed():
    """§M4.7: llama.cpp silently computes wrong logits after seq_rm(s, 2000, -1) and restarts automatic
    positions at 0 after seq_rm(s, 1000, -1); here both raise RewindError and change nothing."""
    c = gemma_ctx()
    c.decode(seq_batch(0, 0, 3000))
    mem = c.memory
    assert mem.seq_rewind_min(0) == 1976 + 511
    snap = mem.snapshot()
    for p0 in (2000, 1000, 2486):
        with pytest.raises(RewindError) as ei:
            mem.seq_rm(0, p0, -1)
        e = ei.value
        assert e.seq_id == 0 and e.first_available == 1976 and e.rewind_min == 2487
        assert "sequence 0" in str(e) and "1976" in str(e) and "2487" in str(e)
        assert mem.equals(snap)
    assert isinstance(ei.value, ubatch.UbatchError) and isinstance(ei.value, ValueError)
    mem.seq_rm(0, 2500, -1)                                   # the window of 2500 (1989..2499) is held
    assert (mem.seq_pos_min(0), mem.seq_pos_max(0)) == (1976, 2499)
    c.decode(seq_batch(0, 2500, 1))
    mem.seq_rm(0, 2487, -1)                                   # exactly the limit
    assert mem.seq_rewind_min(0) == 2487
    c.decode(seq_batch(0, 2487, 1))
    mem.seq_rm(0, 100, 200)                                   # a middle range leaves the end alone: fine
    mem.seq_rm(0, 0, -1)                                      # removing the whole sequence is always fine
    assert mem.seq_pos_max(0) == -1 and mem.base.seq_pos_max(0) == -1 and mem.seq_rewind_min(0) == -1
    c.decode(seq_batch(0, 0, 4))


def test_rewind_refused_for_all_sequences_and_at_decode():
    c = gemma_ctx(n_seq_max=2, kv_unified=True, n_ctx=8192)
    c.decode(seq_batch(0, 0, 1500))
    c.decode(seq_batch(1, 0, 10))
    mem = c.memory
    if mem.seq_pos_min(0) > 0:          # the sliding cache cut sequence 0
        snap = mem.snapshot()
        with pytest.raises(RewindError, match="sequence 0"):
            mem.seq_rm(-1, 600, -1)
        assert mem.equals(snap)
    # a hole made behind the memory's back (through one cache only) is caught by decode, nothing changed
    c2 = gemma_ctx()
    c2.decode(seq_batch(0, 0, 3000))
    c2.memory.base.seq_rm(0, 2000, -1)
    c2.memory.swa.seq_rm(0, 2000, -1)
    snap = c2.memory.snapshot()
    with pytest.raises(RewindError, match="sequence 0 would continue at position 2000"):
        c2.decode(seq_batch(0, 2000, 1))
    assert c2.memory.equals(snap)


def test_allocator_sees_the_sliding_view():
    """Continuity is checked against the sliding cache's seq_pos_max (llama.cpp), automatic positions too."""
    c = gemma_ctx()
    c.decode(seq_batch(0, 0, 600))
    with pytest.raises(ubatch.BatchError, match="X = 599"):
        c.decode(seq_batch(0, 700, 1))
    c.decode(Batch.from_arrays(tokens=[1, 2]))
    assert c.memory.seq_pos_max(0) == 601


@pytest.mark.parametrize("where", ["base_apply", "swa_apply", "swa_prepare"])
@pytest.mark.parametrize("unified", [False, True])
def test_injected_failure_leaves_both_caches_bit_identical(where, unified, monkeypatch):
    c = gemma_ctx(n_seq_max=2, kv_unified=unified, n_ctx=4096, n_ubatch=64)
    c.decode(seq_batch(0, 0, 300))
    c.decode(seq_batch(1, 0, 40))
    c.memory.seq_add(1, 0, -1, 5)                  # a pending K-shift in both caches
    mem = c.memory
    snap = mem.snapshot()
    cells = both_cells(mem)
    assert mem.base.has_pending_update() and mem.swa.has_pending_update()
    calls = {"n": 0}
    target = {"base_apply": mem.base, "swa_apply": mem.swa, "swa_prepare": mem.swa}[where]
    name = "prepare" if where.endswith("prepare") else "apply"
    orig = getattr(target, name)

    def failing(*a, **k):
        calls["n"] += 1
        if name == "prepare" or calls["n"] == 3:
            raise RuntimeError(f"injected failure in {where}")
        return orig(*a, **k)

    monkeypatch.setattr(target, name, failing)
    with pytest.raises(RuntimeError, match="injected"):
        c.decode(seq_batch(0, 300, 200))
    monkeypatch.undo()
    assert mem.equals(snap)
    after = both_cells(mem)
    for x, y in zip(cells[0] + cells[1], after[0] + after[1]):
        for k in x:
            np.testing.assert_array_equal(x[k], y[k])
    assert mem.base.has_pending_update() and mem.swa.has_pending_update()     # still pending
    c.decode(seq_batch(0, 300, 200))                                         # and the decode works afterwards
    assert not mem.has_pending_update()


def test_sliding_cache_full_fails_the_pair():
    """A ubatch the (smaller) sliding cache cannot hold fails the plan; the full cache, which could, is
    unchanged too (both dry runs happen before anything is applied). Unified: split_equal is tried too."""
    from kv_helpers import place

    for n_stream in (1, 2):
        mem = KVCacheISWA(n_stream, 256, 16, n_swa=8)
        place(mem, list(range(10)), [0] * 10)
        snap = mem.snapshot()
        with pytest.raises(KVCacheFullError, match="no KV slot|n_tokens = 20 > size = 16"):
            place(mem, list(range(10, 30)), [0] * 20, n_ubatch=64)
        assert mem.equals(snap)
        place(mem, list(range(10, 18)), [0] * 8)            # slides: 6 free cells + 3 outside the window
        assert mem.swa.seq_pos_min(0) > 0 and mem.base.seq_pos_min(0) == 0


def test_seq_ops_mirror_and_refusal_changes_nothing():
    c = Context(None, n_ctx=1024, n_batch=1024, n_ubatch=64, n_seq_max=4, n_swa=32, swa_full=False)
    for s in range(4):
        c.decode(seq_batch(s, 0, 50 + s))
    mem = c.memory
    mem.seq_cp(0, 1)        # cross-stream: a full copy in both caches
    assert mem.base.n_pending_copies == 1 and mem.swa.n_pending_copies == 1
    snap = mem.snapshot()
    with pytest.raises(ValueError, match="needs the full range"):
        mem.seq_cp(2, 3, 5, 10)
    assert mem.equals(snap)
    mem.seq_add(2, 0, -1, 3)
    assert mem.base.seq_pos_max(2) == mem.swa.seq_pos_max(2) == 54
    mem.seq_keep(3)
    mem.clear()
    assert all(mem.base.used(s) == mem.swa.used(s) == 0 for s in range(4))


def test_plan_kv_cli_shows_both_caches(capsys):
    from ubatch.cli import main
    assert main(["plan", "--seqs", "40", "--n-ubatch", "16", "--kv", "--n-swa", "8", "--no-swa-full"]) == 0
    out = capsys.readouterr().out
    assert "sliding cache: unified, 1 stream x 256 cells, window 8" in out
    assert "full cache:" in out and "sliding cache (window 8):" in out and "| swa cell" in out


class _SWAModel:
    n_vocab, n_embd, n_ctx_train, n_layer = 32, 4, 4096, 6
    n_swa = 8
    swa_layers = (True, True, False, True, True, False)


def _install_swa_runner(monkeypatch):
    """A runner with the two-cache surface of docs/memory.md: kv_size_swa, update(..., swa_copies, swa_shift)."""
    import sys
    import types

    from fake_runner import FakeRunner

    class SWARunner(FakeRunner):
        def __init__(self, model, *, kv_size_swa=None, **kw):
            super().__init__(model, **kw)
            self.kv_size_swa = kv_size_swa

        def update(self, copies, shift, swa_copies=None, swa_shift=None):
            self.updates.append((list(copies), shift is not None, list(swa_copies or []), swa_shift is not None))

        def compute(self, ub, place, saved=None):
            assert place.swa is not None and place.swa.cells.shape == place.cells.shape
            return super().compute(ub, place)

    mod = types.ModuleType("ubatch.engine.model_runner")
    mod.ModelRunner = SWARunner
    monkeypatch.setitem(sys.modules, "ubatch.engine.model_runner", mod)
    FakeRunner.instances.clear()
    return FakeRunner.instances


def test_context_with_a_sliding_model_drives_both_caches(monkeypatch):
    runners = _install_swa_runner(monkeypatch)
    c = Context(_SWAModel(), n_ctx=512, n_batch=512, n_ubatch=16, n_seq_max=2, swa_full=False)
    r = runners[-1]
    assert isinstance(c.memory, KVCacheISWA) and r.kv_size_swa == c.n_ctx_swa == 256 and c.n_swa == 8
    assert c.swa_layers == _SWAModel.swa_layers
    c.decode(seq_batch(0, 0, 40))
    assert len(r.placements) == 3 and all(p.swa is not None for p in r.placements)
    assert c.get_logits_ith(39)[-1] == 39
    c.memory.seq_add(0, 0, -1, 2)                 # K-shift pending in both caches -> update with both parts
    c.memory.seq_cp(0, 1)                         # a stream copy in both caches
    c.decode(seq_batch(1, 42, 1))
    assert r.updates[-1] == ([(0, 1)], True, [(0, 1)], True)
    # a compute failure rolls both caches back exactly, the pending update included
    c.memory.seq_add(0, 0, -1, 1)
    snap = c.memory.snapshot()
    r.fail_at = r.calls + 2
    with pytest.raises(RuntimeError, match="compute failed"):
        c.decode(seq_batch(0, 43, 20))
    assert c.memory.equals(snap) and c.memory.has_pending_update()
    with pytest.raises(ValueError, match="come from the model"):
        Context(_SWAModel(), n_ctx=512, n_swa=4)


def test_context_with_todays_runner_keeps_sliding_layers_on_the_full_cache(monkeypatch):
    """A runner without kv_size_swa gets place.swa = None (it applies the window itself, docs/memory.md)."""
    from fake_runner import install

    install(monkeypatch)
    c = Context(_SWAModel(), n_ctx=512, n_batch=512, n_ubatch=16, n_seq_max=1)
    c.decode(seq_batch(0, 0, 20))
    from fake_runner import FakeRunner
    assert all(p.swa is None for p in FakeRunner.instances[-1].placements)
    assert isinstance(c.memory, KVCacheISWA)


def test_call_order_is_one_error_type():
    """A call made in the wrong order raises CallOrderError (a UbatchError and a ValueError) everywhere."""
    from kv_helpers import plan as make_plan

    from ubatch import BatchAllocator, CallOrderError, KVCache

    with pytest.raises(CallOrderError, match="split called before a successful init"):
        BatchAllocator().split_simple(4)
    for mem in (KVCache(1, 64), KVCacheISWA(1, 64, 32, n_swa=4)):
        old = make_plan(mem, [0, 1, 2], [0, 0, 0])
        new = make_plan(mem, [0, 1], [1, 1])
        with pytest.raises(CallOrderError, match="current plan"):
            mem.begin(old)
        mem.begin(new)
        with pytest.raises(CallOrderError, match="already open"):
            mem.begin(new)
        mem.rollback(new)
        with pytest.raises(CallOrderError, match="no KV transaction"):
            mem.commit(new)
    assert issubclass(CallOrderError, ubatch.UbatchError) and issubclass(CallOrderError, ValueError)
