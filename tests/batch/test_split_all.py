"""BatchAllocator.split_all (the whole split loop in one C call) against the loop of single splits and
against llama.cpp's recordings: every recorded run of tests/data/split_*.jsonl.gz, both allocators, both
strict modes; a refused split leaves the allocator split-reset; bad arguments name themselves."""
from __future__ import annotations

from typing import List

import numpy as np
import pytest

from ubatch import Batch, BatchAllocator
from ubatch.batch.reference import ReferenceAllocator
from ubatch.common.errors import BatchError, SplitError

from split_helpers import (VECTOR_FILES, build_batch, case_memory, diff_ubatches, expected_record, load_vectors,
                           split_all as split_loop, ubatch_record)

REFUSAL = "sequential split is not supported when there are coupled sequences"


def _bulk(a, run: dict, strict: bool):
    kw = {}
    if run["strategy"] == "equal":
        kw = dict(sequential=bool(run.get("sequential", False)), n_keep_tail=int(run.get("n_keep_tail", 0)),
                  strict=strict)
    return a.split_all(run["strategy"], run["n_ubatch"], **kw)


def _replay(cls, case: dict, run: dict, strict: bool) -> List[str]:
    where = f"{case['name']} {run['strategy']}({run['n_ubatch']}) strict={strict}"
    mk = lambda: cls(n_pos_per_embd=case.get("n_pos_per_embd", 1))     # noqa: E731
    loop, bulk = mk(), mk()
    for a in (loop, bulk):
        a.init(build_batch(case), n_seq_max=case["n_seq_max"], n_vocab=case.get("n_vocab", 256),
               output_all=bool(case.get("output_all", False)), memory=case_memory(case, False))
    try:
        want = [ubatch_record(u) for u in split_loop(loop, run, strict=strict)]
        want_err = None
    except SplitError as e:
        want, want_err = None, str(e)
    try:
        got = [ubatch_record(u) for u in _bulk(bulk, run, strict)]
    except SplitError as e:
        if want_err is None:
            return [f"{where}: split_all raised SplitError({e}) but the loop split the batch"]
        if str(e) != want_err:
            return [f"{where}: split_all says {e!r}, the loop {want_err!r}"]
        if bulk.n_used != 0 or len(bulk.out_ids) != 0:
            return [f"{where}: a refused split_all left n_used = {bulk.n_used}, out_ids {list(bulk.out_ids)}"]
        return []
    if want_err is not None:
        return [f"{where}: the loop raised SplitError({want_err}) but split_all returned {len(got)} ubatches"]
    errs = diff_ubatches(got, want, where)
    if not strict and REFUSAL not in run.get("split_log", ""):
        errs += diff_ubatches(got, [expected_record(u) for u in run["ubatches"]], where + " vs llama.cpp")
    for f in ("n_used", "n_outputs"):
        if getattr(bulk, f) != getattr(loop, f):
            errs.append(f"{where}: {f} = {getattr(bulk, f)}, the loop gives {getattr(loop, f)}")
    if list(bulk.out_ids) != list(loop.out_ids):
        errs.append(f"{where}: out_ids {list(bulk.out_ids)}, the loop gives {list(loop.out_ids)}")
    return errs


@pytest.mark.parametrize("cls", [BatchAllocator, ReferenceAllocator], ids=["native", "reference"])
@pytest.mark.parametrize("name", [f for f in VECTOR_FILES if f != "split_invalid.jsonl.gz"])
def test_split_all_equals_the_loop_and_llama_cpp(cls, name) -> None:
    errs: List[str] = []
    n = 0
    for rec in load_vectors(name):
        case = rec["case"]
        for run in rec["runs"]:
            if not run.get("init_ok") or run.get("skipped") or run.get("crashed"):
                continue
            for strict in ((False, True) if run["strategy"] == "equal" else (False,)):
                if cls is ReferenceAllocator and n % 7:       # the slow reference: every 7th run
                    n += 1
                    continue
                n += 1
                errs += _replay(cls, case, run, strict)
    assert n > 1000 and not errs, "\n".join(errs[:20])


def test_split_all_refusal_leaves_the_allocator_split_reset() -> None:
    a = BatchAllocator()
    a.init(Batch.from_arrays(tokens=[1, 2, 3, 4], pos=[0, 1, 2, 2], seq_ids=[[0, 1], [0, 1], [0], [1]]),
           n_seq_max=2)
    a.split_simple(1)
    with pytest.raises(SplitError, match="coupled"):
        a.split_all("equal", 8, sequential=True)
    assert a.n_used == 0 and len(a.out_ids) == 0
    ubs = a.split_all("equal", 8, sequential=False, strict=False)       # the allocator is still usable
    assert sum(u.n_tokens for u in ubs) == 4 and a.n_used == 4


def test_split_all_arguments_are_checked() -> None:
    a = BatchAllocator()
    with pytest.raises(ValueError, match="strategy must be one of"):
        a.split_all("fast", 8)
    from ubatch import CallOrderError
    with pytest.raises(CallOrderError, match="before a successful init"):
        a.split_all("simple", 8)
    a.init(Batch.from_arrays(tokens=[1, 2], pos=[0, 1]), n_seq_max=1)
    with pytest.raises(ValueError, match="n_ubatch must be >= 1"):
        a.split_all("simple", 0)
    with pytest.raises(BatchError, match="n_keep_tail = 8 must be >= 0 and < n_ubatch = 8"):
        a.split_all("equal", 8, n_keep_tail=8)
    with pytest.raises(TypeError):
        a.split_all("seq", 1.5)
    ubs = a.split_all("simple", 1)
    assert [u.n_tokens for u in ubs] == [1, 1] and np.array_equal(a.out_ids, [1])


def test_split_all_ubatches_outlive_the_allocator() -> None:
    a = BatchAllocator()
    a.init(Batch.from_arrays(tokens=list(range(10)), pos=list(range(10))), n_seq_max=1)
    ubs = a.split_all("simple", 3)
    a.close()
    del a
    assert [list(u.token) for u in ubs] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
