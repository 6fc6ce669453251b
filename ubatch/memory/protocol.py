"""The memory protocol (llama.cpp's llama_memory_i + memory->init_batch): what the decode loop (Context),
the allocator, `ubatch plan --kv` and the tests use to drive a memory, whichever it is (KVCache,
KVCacheISWA). `Memory` below states it as a typing.Protocol; both caches implement it publicly.

    with memory.lock: ...                          # the memory's RLock (the Context shares it)
    memory.closed                                  # True once close() freed the C state
    mn, mx = memory.seq_pos_bounds(n)              # the allocator's bulk position bounds (int32[n] each)
    plan = memory.init_batch(alloc, n_ubatch, embd_all, whole_seqs=...)  # split (the rule this memory needs)
                                                   # + dry run of every ubatch; raises SplitError /
                                                   # KVCacheFullError / BatchError with the memory unchanged
    update = memory.begin(plan)                    # opens the one transaction; hands out the pending update
                                                   # (stream copies, K-shift) for the K/V data
    memory.apply(plan, i)                          # apply_ubatch of ubatch i
    place = memory.placement(plan, i, causal, swa) # where it went + each row's visible cells, written in C
                                                   # (Placement: .visible; .swa for the two-cache memory)
    memory.commit(plan) | memory.rollback(plan)    # rollback: every change since begin undone exactly,
                                                   # the pending update included
    memory.plan_record() / swa_plan_record()       # the plan's slots, copied cheaply (Context.last_placements)
    memory.seq_rm / seq_cp / seq_keep / seq_add / seq_div / clear, seq_pos_min / seq_pos_max, n_seq

Rollback has one path: the C journal of each cache (cells, heads, used counts, shifts, copy queue), opened
by begin and closed by commit or rollback.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Protocol, Tuple, runtime_checkable

import numpy as np

from ubatch.batch.ubatch_view import UBatch
from ubatch.common.errors import BatchError, SplitError
from ubatch.memory.placement import Placement


@dataclass
class MemoryUpdate:
    """The pending update handed out by begin(): what the K/V data must undergo before the first ubatch.

    copies:      (src_stream, dst_stream) stream copies, in order (full cache)
    shift:       int32[n_stream, size] per-cell RoPE delta, or None (full cache)
    swa_copies / swa_shift: the same for the sliding cache of a two-cache memory (None otherwise)
    """

    copies: List[Tuple[int, int]]
    shift: Optional[np.ndarray]
    swa_copies: Optional[List[Tuple[int, int]]] = None
    swa_shift: Optional[np.ndarray] = None

    @property
    def empty(self) -> bool:
        return not self.copies and self.shift is None and not self.swa_copies and self.swa_shift is None


class MemoryPlan:
    """What init_batch returns: the ubatches of one batch, each with a slot found by a successful dry run
    in every cache of the memory. Valid until the memory changes (the next init_batch or seq op)."""

    __slots__ = ("ubatches", "memory", "split")

    def __init__(self, ubatches: List[UBatch], memory, split: str) -> None:
        self.ubatches = ubatches
        self.memory = memory
        self.split = split            # the split used: "simple", "equal", "equal_sequential" or "seq"

    def __len__(self) -> int:
        return len(self.ubatches)

    def __repr__(self) -> str:
        return f"MemoryPlan({len(self.ubatches)} ubatches, split {self.split})"


@runtime_checkable
class Memory(Protocol):
    """What Context.decode, the allocator and the planning tools call on a memory. KVCache and KVCacheISWA
    implement it (tests/.. check isinstance and the signatures)."""

    @property
    def lock(self) -> threading.RLock: ...

    @property
    def closed(self) -> bool: ...

    @property
    def n_seq(self) -> int: ...

    def seq_pos_min(self, s: int) -> int: ...

    def seq_pos_max(self, s: int) -> int: ...

    def seq_pos_bounds(self, n: int) -> Tuple[np.ndarray, np.ndarray]: ...

    def init_batch(self, alloc: Any, n_ubatch: int, embd_all: bool = False, *,
                   whole_seqs: bool = False) -> "MemoryPlan": ...

    def begin(self, plan: "MemoryPlan") -> MemoryUpdate: ...

    def apply(self, plan: "MemoryPlan", i: int) -> None: ...

    def placement(self, plan: "MemoryPlan", i: int, causal: bool = True, swa: bool = True) -> Placement: ...

    def commit(self, plan: "MemoryPlan") -> None: ...

    def rollback(self, plan: "MemoryPlan") -> None: ...

    def plan_record(self) -> Tuple[Tuple[Tuple[int, int], ...], bytes]: ...

    def swa_plan_record(self) -> Optional[Tuple[Tuple[Tuple[int, int], ...], bytes]]: ...

    def seq_rm(self, s: int, p0: int = -1, p1: int = -1) -> bool: ...

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None: ...

    def seq_keep(self, s: int) -> None: ...

    def seq_add(self, s: int, p0: int, p1: int, delta: int) -> None: ...

    def seq_div(self, s: int, p0: int, p1: int, d: int) -> None: ...

    def clear(self) -> None: ...

    def describe(self) -> dict: ...

    def close(self) -> None: ...


SPLIT_NAMES = {"simple": "split_simple", "equal": "split_equal", "equal_sequential": "split_equal(sequential)",
               "seq": "split_seq"}


def split_all(alloc, n_ubatch: int, split: str) -> List[UBatch]:
    """Cuts the whole (initialised) batch with one strategy in one call (the allocator's split_all: one C
    call for BatchAllocator); SplitError when tokens are left over. split_equal is llama.cpp-exact
    (strict=False: a ubatch may hold n_ubatch + 1 tokens)."""
    if split.startswith("equal"):
        ubs = alloc.split_all("equal", n_ubatch, sequential=split == "equal_sequential", strict=False)
    else:
        ubs = alloc.split_all(split, n_ubatch)
    if alloc.n_used < alloc.n_tokens:
        raise SplitError(f"the batch could not be split: {alloc.n_used} of {alloc.n_tokens} tokens placed")
    return ubs


def check_coupled(alloc, n_stream: int) -> None:
    """Per-sequence streams cannot hold a row shared by several sequences (llama.cpp's message)."""
    if n_stream > 1 and alloc.has_coupled:
        raise SplitError("split_equal: sequential split is not supported when there are coupled sequences in "
                         "the input batch (you may need to use kv_unified=True)")


def whole_seqs_split(alloc, n_ubatch: int) -> List[UBatch]:
    """Pooled embeddings: split_seq, and every sequence must be whole in one ubatch (BatchError naming it;
    llama.cpp silently overwrites the pooled row of a sequence spanning several ubatches)."""
    ubs = split_all(alloc, n_ubatch, "seq")
    if len(ubs) > 1:
        seen: Dict[int, int] = {}
        for k, ub in enumerate(ubs):
            for s in ub.seq_id_unq.tolist():
                if s in seen:
                    raise BatchError(f"pooled embeddings: sequence {s} does not fit in one ubatch "
                                     f"(n_ubatch = {n_ubatch}); it spans ubatches {seen[s]} and {k}")
                seen[s] = k
    return ubs


def cache_split(n_stream: int) -> str:
    """The split a single KV cache needs (llama_kv_cache::init_batch): one stream -> split_simple,
    one stream per sequence -> split_equal(sequential)."""
    return "simple" if n_stream == 1 else "equal_sequential"


__all__ = ["Memory", "MemoryPlan", "MemoryUpdate", "SPLIT_NAMES", "cache_split", "check_coupled", "split_all",
           "whole_seqs_split"]
