"""Shared helpers of the hardening tests: the allowed exceptions, allocator snapshots, ubatch summaries,
hypothesis strategies for valid and hostile batches."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ubatch import Batch
from ubatch.batch.allocator import BatchAllocator
from ubatch.common.errors import UbatchError

# the only exceptions the public API may raise on bad input (MemoryError only for a real OOM)
ALLOWED = (UbatchError, ValueError, TypeError, IndexError, MemoryError)
I32_MIN, I32_MAX = -(2**31), 2**31 - 1


def call(fn, *args, **kwargs):
    """(True, result) or (False, exception) for an allowed exception; any other exception propagates.
    Every allowed exception must carry a message."""
    try:
        return True, fn(*args, **kwargs)
    except ALLOWED as e:
        assert str(e).strip(), f"{type(e).__name__} raised without a message"
        return False, e


def snapshot(a: BatchAllocator):
    """Everything observable about an allocator's state (not its C pointers)."""
    if a._h is None:
        return ("closed",)
    return (
        a.n_tokens, a.n_used, a.n_outputs, a.has_coupled, a.warning, a._inited,
        a.out_ids.tolist(), a.pos.tolist(), a.output.tolist(),
        tuple(a.seq_pos_range(s) for s in range(256)),
    )


def ub_summary(ub):
    """Every field of a UBatch as plain Python values (None stays None)."""
    if ub is None:
        return None
    return (
        ub.n_tokens, ub.n_seq_tokens, ub.n_seqs, ub.n_seqs_unq, ub.n_pos, ub.equal_seqs,
        None if ub.token is None else ub.token.tolist(),
        None if ub.embd is None else ub.embd.tolist(),
        ub.pos.tolist(), ub.output.tolist(), ub.n_seq_id.tolist(),
        [ub.seq_ids(r).tolist() for r in range(ub.n_tokens)],
        ub.seq_id_unq.tolist(), ub.seq_idx.tolist(), ub.batch_idxs.tolist(),
    )


SPLITS = ("simple", "equal", "equal_seq", "seq")


def do_split(a: BatchAllocator, kind: str, n_ubatch, n_keep_tail=0, strict=True):
    if kind == "simple":
        return a.split_simple(n_ubatch)
    if kind == "equal":
        return a.split_equal(n_ubatch, n_keep_tail=n_keep_tail, strict=strict)
    if kind == "equal_seq":
        return a.split_equal(n_ubatch, sequential=True, n_keep_tail=n_keep_tail, strict=strict)
    return a.split_seq(n_ubatch)


def drain(a: BatchAllocator, kind: str, n_ubatch: int, limit: int = 10_000):
    """Summaries of every remaining ubatch of one split kind, then ('error', type, msg) if it failed."""
    out = []
    for _ in range(limit):
        ok, ub = call(do_split, a, kind, n_ubatch)
        if not ok:
            out.append(("error", type(ub).__name__, str(ub)))
            break
        if ub is None:
            break
        out.append(ub_summary(ub))
    return out


class FakeMemory:
    """A memory module with fixed per-sequence position bounds (optionally the fast path)."""

    def __init__(self, pmin, pmax, fast: bool):
        self.pmin, self.pmax = list(pmin), list(pmax)
        if fast:
            self.seq_pos_bounds = lambda n: (np.array(self.pmin[:n], np.int64), np.array(self.pmax[:n], np.int64))

    def seq_pos_min(self, s):
        return self.pmin[s]

    def seq_pos_max(self, s):
        return self.pmax[s]


# ---------------------------------------------------------------------------------------------- strategies
@st.composite
def valid_spec(draw, max_rows: int = 24, max_seq: int = 6, n_pos: int = 1):
    """A batch description that llama.cpp's init accepts (w/o memory): per-seq step intervals; at every
    step the active seqs are partitioned into rows (coupled when a part has several seqs); positions are
    base + step, or automatic when no row is coupled (then base = 0)."""
    n_seq = draw(st.integers(1, max_seq))
    n_steps = draw(st.integers(1, max(1, max_rows // n_seq)))
    spans = []
    for _ in range(n_seq):
        a = draw(st.integers(0, n_steps - 1))
        b = draw(st.integers(a, n_steps - 1))
        spans.append((a, b))
    coupled = draw(st.booleans())
    base = draw(st.sampled_from([0, 0, 5, 1000, I32_MAX - n_steps])) if coupled or draw(st.booleans()) else None
    rows = []   # (seq set, pos)
    for t in range(n_steps):
        active = [s for s, (a, b) in enumerate(spans) if a <= t <= b]
        active = draw(st.permutations(active))
        while active:
            k = draw(st.integers(1, len(active))) if coupled else 1
            rows.append((sorted(active[:k]), t))
            active = active[k:]
    n = len(rows)
    seq_perm = draw(st.permutations(range(max_seq)))  # seq ids need not be 0..n_seq-1
    seq_sets = [[seq_perm[s] for s in r] for r, _ in rows]
    if base is None:
        # automatic positions need single-id rows
        seq_sets = [[s[0]] for s in seq_sets]
        pos = None
    else:
        pos = [base + t for _, t in rows]
    kind = draw(st.sampled_from(["token", "embd"] if n_pos == 1 or base is not None else ["token"]))
    out = draw(st.one_of(st.none(), st.lists(st.booleans(), min_size=n, max_size=n)))
    return dict(n=n, seq_sets=seq_sets, pos=pos, kind=kind, output=out, n_pos=n_pos,
                n_seq_max=max_seq, tokens=draw(st.lists(st.integers(0, 99), min_size=n, max_size=n)))


def build_batch(spec: dict, via: str = "arrays") -> Batch:
    """Builds a Batch from a valid_spec, either with from_arrays or row by row."""
    n = spec["n"]
    rng = np.random.default_rng(n)
    embd = rng.standard_normal((n, 3)).astype(np.float32) if spec["kind"] == "embd" else None
    tokens = spec["tokens"] if spec["kind"] == "token" else None
    n_pos = spec["n_pos"]
    pos = spec["pos"]
    if via == "arrays" or pos is None or spec["output"] is None:
        p = None if pos is None else (pos if n_pos == 1 else [pos] * n_pos)
        return Batch.from_arrays(tokens=tokens, embd=embd, pos=p, seq_ids=spec["seq_sets"],
                                 output=spec["output"], n_pos_per_embd=n_pos)
    b = Batch(n, n_pos_per_embd=n_pos, n_embd=3 if embd is not None else 0)
    for i in range(n):
        p = pos[i] if n_pos == 1 else [pos[i]] * n_pos
        if embd is not None:
            b.add_embd(embd[i], p, spec["seq_sets"][i], spec["output"][i])
        else:
            b.add_token(tokens[i], p, spec["seq_sets"][i], spec["output"][i])
    return b


# hostile scalars for integer arguments
hostile_ints = st.one_of(
    st.integers(-3, 40),
    st.sampled_from([I32_MIN, I32_MIN + 1, -1, 0, 1, 255, 256, 257, I32_MAX - 1, I32_MAX, I32_MAX + 1,
                     2**40, -(2**40), 2**63, 2**70]),
)
hostile_args = st.one_of(
    hostile_ints,
    st.sampled_from([None, 1.5, float("nan"), float("inf"), "3", b"3", True, False, [1], (2,), {}, object(),
                     np.int64(3), np.int8(-1), np.uint64(2**64 - 1), np.float32(2.0), np.array(3), np.array([3])]),
)
