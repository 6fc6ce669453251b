"""Property tests (hypothesis): on random batches the native allocator and the pure-Python reference
agree ubatch by ubatch (or raise the same error), and the split invariants hold.

Batches are generated as a random walk over the active sequences: a row is given to a set of
sequences that all stand at the same next position (this yields shared prompts, nested sharing and
multi-id rows), in a random interleaving; a few examples are then corrupted on purpose so that the
error paths are compared too. HYPOTHESIS_PROFILE=fuzz runs many more examples (see conftest.py).
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np
from hypothesis import given, note
from hypothesis import strategies as st

from ubatch.batch.container import Batch
from ubatch.common.errors import UbatchError
from ubatch.batch.reference import ReferenceAllocator

from split_helpers import FastSeqPosMemory, SeqPosMemory, allocator_factory, ubatch_record

N_VOCAB = 256


@st.composite
def batch_cases(draw) -> dict:
    n_seq_max = draw(st.sampled_from([1, 2, 3, 4, 5, 8, 8, 16, 64, 256]))
    n_active = draw(st.integers(1, min(n_seq_max, 8)))
    seqs = draw(st.lists(st.integers(0, n_seq_max - 1), min_size=n_active, max_size=n_active, unique=True))
    use_mem = draw(st.booleans())
    auto_pos = draw(st.integers(0, 5)) == 0
    share = 0 if auto_pos and draw(st.booleans()) else draw(st.integers(0, 6))   # chance (of 10) of a multi-id row
    start = {s: draw(st.sampled_from([0, 0, 1, 4, 9])) for s in seqs}
    nxt = dict(start)
    n_rows = draw(st.integers(1, 48))
    rows: List[List[int]] = []
    pos: List[int] = []
    for _ in range(n_rows):
        groups: dict = {}
        for s in seqs:
            groups.setdefault(nxt[s], []).append(s)
        p = draw(st.sampled_from(sorted(groups)))
        members = groups[p]
        if len(members) > 1 and draw(st.integers(0, 9)) < share:
            ids = draw(st.lists(st.sampled_from(members), min_size=2, max_size=len(members), unique=True))
        else:
            ids = [draw(st.sampled_from(members))]
        listed = draw(st.permutations(ids))           # caller order is arbitrary
        if draw(st.integers(0, 14)) == 0:
            listed = listed + [listed[0]]              # a duplicated id collapses
        rows.append(listed)
        pos.append(p)
        if draw(st.integers(0, 19)) != 0:              # now and then a repeated position (allowed)
            for s in ids:
                nxt[s] = p + 1
    n = len(rows)
    # the memory holds [0, start-1] of every seq that does not start at 0 (coupled seqs stand at the same
    # position, hence have the same range, as C2 requires); without memory the starts are just offsets
    mem = {s: (0, b - 1) for s, b in start.items() if b > 0} if use_mem else None
    embd_input = draw(st.integers(0, 6)) == 0
    n_pos = draw(st.sampled_from([1, 1, 4]))
    case = {"n_seq_max": n_seq_max, "rows": rows, "pos": None if auto_pos else pos, "mem": mem,
            "n_pos": n_pos, "embd": embd_input, "n_embd": draw(st.integers(1, 3)),
            "tokens": draw(st.lists(st.integers(0, N_VOCAB - 1), min_size=n, max_size=n)),
            "output": draw(st.one_of(st.none(), st.lists(st.booleans(), min_size=n, max_size=n))),
            "output_all": draw(st.integers(0, 4)) == 0, "fast_mem": draw(st.booleans()),
            "seq_form": draw(st.sampled_from(["lists", "array", "none", "rows"]))}
    if embd_input and n_pos > 1:
        if case["pos"] is None:
            case["pos"] = pos                          # M-RoPE embeddings need explicit positions
        extra = draw(st.lists(st.integers(0, 50), min_size=3 * n, max_size=3 * n))
        case["pos"] = [case["pos"]] + [extra[k * n:(k + 1) * n] for k in range(3)]
    # corrupt a few examples so that both error paths are compared too
    bad = draw(st.integers(0, 11))
    if bad == 0 and case["pos"] is not None:
        i = draw(st.integers(0, n - 1))
        d = draw(st.sampled_from([-3, -1, 1, 2]))
        if n_pos > 1 and embd_input:
            case["pos"][0][i] += d
        else:
            case["pos"][i] += d
    elif bad == 1:
        i = draw(st.integers(0, n - 1))
        case["rows"][i] = case["rows"][i] + [draw(st.sampled_from([-1, n_seq_max, n_seq_max + 3]))]
    elif bad == 2:
        case["tokens"][draw(st.integers(0, n - 1))] = draw(st.sampled_from([-1, N_VOCAB]))
    elif bad == 3 and seqs:
        s = draw(st.sampled_from(seqs))
        mem = dict(case["mem"] or {})
        lo, hi = mem.get(s, (-1, -1))
        mem[s] = (draw(st.integers(0, 3)), max(-1, max(hi, 0) + draw(st.integers(-2, 2))))
        case["mem"] = mem
    return case


def _batch(case: dict) -> Batch:
    n = len(case["rows"])
    if case["seq_form"] == "rows" and case["pos"] is not None and case["output"] is not None:
        # built row by row (add_token / add_embd), every row carrying all n_pos sections
        b = Batch(n, n_pos_per_embd=case["n_pos"], n_embd=case["n_embd"] if case["embd"] else 0)
        for i in range(n):
            p = [sec[i] for sec in case["pos"]] if isinstance(case["pos"][0], list) else case["pos"][i]
            if case["embd"]:
                b.add_embd([100.0 * i + k for k in range(case["n_embd"])], p, case["rows"][i], case["output"][i])
            else:
                b.add_token(case["tokens"][i], p, case["rows"][i], case["output"][i])
        return b
    if case["seq_form"] == "array" and all(len(r) == 1 for r in case["rows"]):
        seq_ids = np.array([r[0] for r in case["rows"]], dtype=np.int32)
    elif case["seq_form"] == "none" and all(r == [0] for r in case["rows"]):
        seq_ids = None
    else:
        seq_ids = case["rows"]
    pos = case["pos"]
    if case["embd"]:
        embd = np.array([[100.0 * i + k for k in range(case["n_embd"])] for i in range(n)], dtype=np.float32)
        return Batch.from_arrays(embd=embd, pos=pos, seq_ids=seq_ids, output=case["output"],
                                 n_pos_per_embd=case["n_pos"])
    return Batch.from_arrays(tokens=case["tokens"], pos=pos, seq_ids=seq_ids, output=case["output"],
                             n_pos_per_embd=case["n_pos"])


def _memory(case: dict) -> Optional[SeqPosMemory]:
    if case["mem"] is None:
        return None
    return (FastSeqPosMemory if case["fast_mem"] else SeqPosMemory)(case["mem"])


def _init(cls, case: dict):
    a = cls(n_pos_per_embd=case["n_pos"])
    try:
        a.init(_batch(case), n_seq_max=case["n_seq_max"], n_vocab=N_VOCAB, output_all=case["output_all"],
               memory=_memory(case))
    except UbatchError as e:
        return a, e
    return a, None


split_plans = st.fixed_dictionaries({
    "strategy": st.sampled_from(["simple", "equal", "equal", "seq"]),
    "n_ubatch": st.one_of(st.integers(1, 8), st.integers(1, 64)),
    "sequential": st.booleans(),
    "keep_tail": st.integers(0, 3),
    "strict": st.booleans(),
})


def _split_loop(a, plan: dict):
    """(records, raw ubatches, error) of a whole split loop."""
    recs, ubs = [], []
    try:
        for _ in range(10000):
            if plan["strategy"] == "simple":
                ub = a.split_simple(plan["n_ubatch"])
            elif plan["strategy"] == "seq":
                ub = a.split_seq(plan["n_ubatch"])
            else:
                ub = a.split_equal(plan["n_ubatch"], sequential=plan["sequential"],
                                   n_keep_tail=min(plan["keep_tail"], plan["n_ubatch"] - 1), strict=plan["strict"])
            if ub is None:
                return recs, ubs, None
            ubs.append(ub)
            rec = ubatch_record(ub)
            rec["seq_lists"] = [[int(x) for x in ub.seq_ids(r)] for r in range(ub.n_tokens)]
            recs.append(rec)
        raise AssertionError("split loop does not end")
    except UbatchError as e:
        return recs, ubs, e


def _check_invariants(a, recs: List[dict], plan: dict) -> None:
    n = a.n_tokens
    out = [int(x) for x in a.output]
    pos = np.asarray(a.pos)
    used = [i for r in recs for i in r["batch_idxs"]]
    assert sorted(used) == list(range(n)), "every token must be used exactly once"
    assert a.n_used == n
    assert sorted(int(x) for x in a.out_ids) == [i for i in range(n) if out[i]], "out_ids = the output rows"
    assert [int(x) for x in a.out_ids] == [b for r in recs for b, o in zip(r["batch_idxs"], r["output"]) if o]
    limit = plan["n_ubatch"] + (0 if plan["strict"] or plan["strategy"] != "equal" else 1)
    for r in recs:
        assert 1 <= r["n_tokens"] <= limit
        sets = r["seq_ids"]
        assert all(lst == sorted(set(lst)) for lst in r["seq_lists"]), "seq ids ascending and distinct"
        union = sorted(set().union(*sets))
        assert r["seq_id_unq"] == union and r["n_seqs_unq"] == len(union)
        assert r["seq_idx"] == [[s, k] for k, s in enumerate(union)]
        assert r["pos"] == [[int(pos[j, b]) for j in range(pos.shape[0])] for b in r["batch_idxs"]]
        assert r["output"] == [out[b] for b in r["batch_idxs"]]
        if plan["strategy"] == "simple":
            b = r["batch_idxs"]
            assert b == list(range(b[0], b[0] + len(b))) and not r["equal_seqs"] and r["n_seqs"] == r["n_tokens"]
        elif plan["strategy"] == "seq":
            assert r["equal_seqs"] and r["n_seqs"] == 1
            assert all(sets[k + 1] <= sets[k] for k in range(len(sets) - 1)), "the allowed set only shrinks"
        else:
            ns, nst = r["n_seqs"], r["n_seq_tokens"]
            assert r["equal_seqs"] and r["n_tokens"] == ns * nst, "split_equal ubatches are rectangles"
            groups = [sets[k * nst:(k + 1) * nst] for k in range(ns)]
            assert all(len(set(g)) == 1 for g in groups), "each group is one sequence set"
            gs = [g[0] for g in groups]
            assert all(gs[x].isdisjoint(gs[y]) for x in range(ns) for y in range(x + 1, ns)), "groups disjoint"
            for g in range(ns):
                idx = r["batch_idxs"][g * nst:(g + 1) * nst]
                assert idx == sorted(idx), "a group keeps batch order"
            if plan["sequential"]:
                prim = [min(s) for s in gs]
                assert prim == list(range(prim[0], prim[0] + ns)), "sequential: consecutive primary ids"


@given(case=batch_cases(), plan=split_plans)
def test_native_and_reference_agree(case: dict, plan: dict) -> None:
    native = allocator_factory("native")
    note(f"case={case}\nplan={plan}")
    a, ea = _init(native, case)
    r, er = _init(ReferenceAllocator, case)
    assert (type(ea), str(ea)) == (type(er), str(er)), f"init: native {ea!r} vs reference {er!r}"
    if er is not None:
        return
    assert a.n_tokens == r.n_tokens and a.n_outputs == r.n_outputs
    assert np.array_equal(a.pos, r.pos) and np.array_equal(a.output, r.output)
    ra, _, ea = _split_loop(a, plan)
    rr, _, er = _split_loop(r, plan)
    assert (type(ea), str(ea)) == (type(er), str(er)), f"split: native {ea!r} vs reference {er!r}"
    assert len(ra) == len(rr), f"{len(ra)} ubatches vs reference {len(rr)}"
    for k, (x, y) in enumerate(zip(ra, rr)):
        assert x == y, f"ubatch {k}: native {x} vs reference {y}"
    assert [int(v) for v in a.out_ids] == [int(v) for v in r.out_ids]
    assert a.n_used == r.n_used
    if er is None:
        _check_invariants(r, rr, plan)
        _check_invariants(a, ra, plan)
        # a re-split after split_reset starts over and gives the same ubatches
        a.split_reset()
        again, _, e2 = _split_loop(a, plan)
        assert e2 is None and again == ra
    else:   # the only split failure: a sequential split_equal of a batch with coupled sequences
        assert plan["strategy"] == "equal" and plan["sequential"] and r.has_coupled and not rr and r.n_used == 0


@given(case=batch_cases(), n_ubatch=st.integers(1, 12), keep=st.integers(0, 3))
def test_strict_never_exceeds_n_ubatch(case: dict, n_ubatch: int, keep: int) -> None:
    """strict=True: at most n_ubatch tokens; where llama.cpp's loop (strict=False) never overflowed,
    the two loops are identical."""
    for impl in ("reference", "native"):
        cls = allocator_factory(impl)
        a, e = _init(cls, case)
        if e is not None:
            return
        plan = {"strategy": "equal", "n_ubatch": n_ubatch, "sequential": False, "keep_tail": keep, "strict": False}
        loose, _, e1 = _split_loop(a, plan)
        a.split_reset()
        strict, _, e2 = _split_loop(a, dict(plan, strict=True))
        assert e1 is None and e2 is None
        assert all(r["n_tokens"] <= n_ubatch for r in strict)
        _check_invariants(a, strict, dict(plan, strict=True))
        if all(r["n_tokens"] <= n_ubatch for r in loose):
            assert strict == loose


def test_generator_yields_valid_and_coupled_batches() -> None:
    """Guards the generator itself: most examples must be valid and some must share prompts."""
    from hypothesis import Phase, find, settings

    quick = settings(max_examples=2000, database=None, phases=[Phase.generate])

    find(batch_cases(), lambda c: _init(ReferenceAllocator, c)[1] is None
         and sum(len(set(r)) > 1 for r in c["rows"]) >= 3 and len(c["rows"]) >= 10, settings=quick)
    find(batch_cases(), lambda c: _init(ReferenceAllocator, c)[1] is not None, settings=quick)
    find(batch_cases(), lambda c: c["pos"] is None and _init(ReferenceAllocator, c)[1] is None, settings=quick)
