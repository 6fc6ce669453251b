"""A hypothesis state machine of decodes and sequence operations on the two-cache memory (KVCacheISWA),
compared step by step with two independent single caches (a full KVCache and a sliding KVCache) that get the
same ubatches and the same operations: the pair's caches must stay bit-identical to them; a refused decode
must be refused by one of them too and change nothing; a RewindError must be exactly the case where the
single sliding cache would be left without a position of the next token's window that the full cache has."""
from __future__ import annotations

import numpy as np
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ubatch import Batch, BatchAllocator, KVCache, KVCacheFullError, RewindError
from ubatch.memory.iswa import KVCacheISWA
from ubatch.memory.protocol import split_all

SIZE, SIZE_SWA, N_SWA = 64, 24, 6


def window_hole(full: KVCache, slide: KVCache, s: int) -> bool:
    """True when the next token of s (at full max + 1) needs a position the full cache holds and the
    sliding one does not (checked position by position: the definition, not the memory's shortcut)."""
    p = full.seq_pos_max(s) + 1
    if p <= 0:
        return False
    held_full = {pos for _, pos, seqs in full.cells(full_stream(full, s)) if s in seqs}
    held_swa = {pos for _, pos, seqs in slide.cells(full_stream(slide, s)) if s in seqs}
    return any(q in held_full and q not in held_swa for q in range(max(0, p - N_SWA + 1), p))


def full_stream(kv: KVCache, s: int) -> int:
    return 0 if kv.n_stream == 1 else s


class ISWAMachine(RuleBasedStateMachine):
    @initialize(unified=st.booleans())
    def setup(self, unified):
        self.n_stream = 1 if unified else 2
        self.n_seq = 3 if unified else 2
        self.pair = KVCacheISWA(self.n_stream, SIZE, SIZE_SWA, n_swa=N_SWA)
        self.full = KVCache(self.n_stream, SIZE)
        self.slide = KVCache(self.n_stream, SIZE_SWA, swa_type="standard", n_swa=N_SWA)

    # ------------------------------------------------------------------ decodes
    def _batch(self, rows):
        pos = [p for _, p in rows]
        return Batch.from_arrays(tokens=[1] * len(rows), pos=pos, seq_ids=[s for s, _ in rows])

    def _place_single(self, kv, ubs):
        plan = kv.prepare(ubs)
        kv.begin(plan)
        for i in range(len(ubs)):
            kv.apply(plan, i)
        kv.commit(plan)

    @precondition(lambda self: hasattr(self, "pair"))
    @rule(seqs=st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True), n=st.integers(1, 9),
          n_ubatch=st.integers(1, 12))
    def decode(self, seqs, n, n_ubatch):
        seqs = [s for s in seqs if s < self.n_seq]
        if not seqs:
            return
        rows = [(s, self.pair.seq_pos_max(s) + 1 + t) for s in seqs for t in range(n)]
        batch = self._batch(rows)
        alloc = BatchAllocator()
        alloc.init(batch, n_seq_max=self.n_seq, memory=self.pair)
        snap = self.pair.snapshot()
        try:
            plan = self.pair.init_batch(alloc, n_ubatch)
        except KVCacheFullError:
            assert self.pair.equals(snap)
            splits = ["simple", "equal"] if self.n_stream == 1 else ["equal_sequential"]
            for split in splits:        # every split the pair tried is refused by one of the single caches
                ref = BatchAllocator()
                ref.init(batch, n_seq_max=self.n_seq)
                ubs = split_all(ref, n_ubatch, split)
                refused = False
                for kv in (self.full, self.slide):
                    try:
                        kv.prepare(ubs)
                    except KVCacheFullError:
                        refused = True
                assert refused, f"the pair refused {split} but both single caches accept it"
            return
        self.pair.begin(plan)
        for i in range(len(plan)):
            self.pair.apply(plan, i)
        self.pair.commit(plan)
        ref = BatchAllocator()
        ref.init(batch, n_seq_max=self.n_seq)
        ubs = split_all(ref, n_ubatch, plan.split)
        for kv in (self.full, self.slide):
            self._place_single(kv, ubs)

    # ------------------------------------------------------------------ sequence operations
    def _mirror(self, op, touched):
        snap = self.pair.snapshot()
        fs, ss = self.full.snapshot(), self.slide.snapshot()
        op(self.full)
        op(self.slide)
        hole = any(window_hole(self.full, self.slide, s) for s in touched)
        try:
            op(self.pair)
        except RewindError as e:
            assert hole, f"RewindError without a hole: {e}"
            assert self.pair.equals(snap)
            self.full.restore(fs)
            self.slide.restore(ss)
            return
        assert not hole, "the pair accepted an operation that leaves a window hole"

    @precondition(lambda self: hasattr(self, "pair"))
    @rule(s=st.integers(-1, 2), p0=st.integers(-1, 40), length=st.one_of(st.just(-1), st.integers(0, 20)))
    def seq_rm(self, s, p0, length):
        if s >= self.n_seq:
            return
        p1 = -1 if length < 0 else max(p0, 0) + length
        self._mirror(lambda kv: kv.seq_rm(s, p0, p1), range(self.n_seq) if s == -1 else [s])

    @precondition(lambda self: hasattr(self, "pair"))
    @rule(src=st.integers(0, 2), dst=st.integers(0, 2))
    def seq_cp(self, src, dst):
        if src >= self.n_seq or dst >= self.n_seq or src == dst:
            return
        if self.n_stream > 1:
            self.pair.seq_rm(dst)                     # a cross-stream copy replaces dst's stream
            self.full.seq_rm(dst)
            self.slide.seq_rm(dst)
        self._mirror(lambda kv: kv.seq_cp(src, dst), [dst])

    @precondition(lambda self: hasattr(self, "pair"))
    @rule(s=st.integers(0, 2))
    def seq_keep(self, s):
        if s < self.n_seq:
            self._mirror(lambda kv: kv.seq_keep(s), [s])

    @precondition(lambda self: hasattr(self, "pair"))
    @rule(s=st.integers(0, 2), p0=st.integers(0, 30), delta=st.integers(-8, 8))
    def seq_add(self, s, p0, delta):
        if s < self.n_seq:      # a moved cell moves for all its sequences: every one may get a hole
            self._mirror(lambda kv: kv.seq_add(s, p0, -1, delta), range(self.n_seq))

    # ------------------------------------------------------------------ the comparison
    @invariant()
    def same_as_single_caches(self):
        if not hasattr(self, "pair"):
            return
        for mine, ref in ((self.pair.base, self.full), (self.pair.swa, self.slide)):
            for stream in range(self.n_stream):
                a, b = mine.cell_arrays(stream), ref.cell_arrays(stream)
                for k in a:
                    np.testing.assert_array_equal(a[k], b[k], err_msg=f"{k} of stream {stream}")
                assert mine.head(stream) == ref.head(stream) and mine.used(stream) == ref.used(stream)
                assert mine.has_shift(stream) == ref.has_shift(stream)
            for s in range(self.n_seq):
                assert (mine.seq_pos_min(s), mine.seq_pos_max(s)) == (ref.seq_pos_min(s), ref.seq_pos_max(s))
        for s in range(self.n_seq):
            assert self.pair.seq_pos_max(s) == self.slide.seq_pos_max(s)


# each example is a whole run of up to 30 steps: a third of the profile's examples keeps this test near
# 10 s in the everyday suite (the fuzz profile gets 5000 / 3)
ISWAMachine.TestCase.settings = settings(max_examples=max(10, settings().max_examples // 3), stateful_step_count=30)
TestISWAMachine = ISWAMachine.TestCase
