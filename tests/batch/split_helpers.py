"""Shared helpers for the split tests: the two implementations, the mock memories, vector loading,
building a Batch from a recorded case, and a field-by-field ubatch comparison."""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ubatch.batch.allocator import BatchAllocator
from ubatch.batch.container import Batch
from ubatch.batch.reference import ReferenceAllocator

DATA = Path(__file__).resolve().parent.parent / "data"
VECTOR_FILES = ["split_hand.jsonl.gz", "split_invalid.jsonl.gz", "split_random.jsonl.gz"]


IMPLS = ["native", "reference"]


def allocator_factory(impl: str) -> Callable[..., object]:
    """The class implementing `impl` ("native" or "reference")."""
    if impl == "reference":
        return ReferenceAllocator
    return BatchAllocator


class SeqPosMemory:
    """A mock memory answering only seq_pos_min/max (llama_memory_seq_pos_min/max; -1 = empty)."""

    def __init__(self, ranges: Optional[Dict[int, Tuple[int, int]]] = None) -> None:
        self.ranges = dict(ranges or {})
        self.calls = 0

    def seq_pos_min(self, s: int) -> int:
        self.calls += 1
        return self.ranges.get(int(s), (-1, -1))[0]

    def seq_pos_max(self, s: int) -> int:
        self.calls += 1
        return self.ranges.get(int(s), (-1, -1))[1]


class FastSeqPosMemory(SeqPosMemory):
    """The same memory, also offering the native allocator's fast path `seq_pos_bounds`."""

    def __init__(self, ranges: Optional[Dict[int, Tuple[int, int]]] = None) -> None:
        super().__init__(ranges)
        self.fast_calls = 0

    def seq_pos_bounds(self, n_seq_max: int) -> Tuple[np.ndarray, np.ndarray]:
        self.fast_calls += 1
        lo = np.full(n_seq_max, -1, dtype=np.int32)
        hi = np.full(n_seq_max, -1, dtype=np.int32)
        for s, (a, b) in self.ranges.items():
            if 0 <= s < n_seq_max:
                lo[s], hi[s] = a, b
        return lo, hi


def load_vectors(name: str) -> List[dict]:
    with gzip.open(DATA / name, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def case_memory(case: dict, fast: bool) -> Optional[SeqPosMemory]:
    if not case.get("mem"):
        return None
    ranges = {int(s): (int(lo), int(hi)) for s, lo, hi in case["mem"]}
    return FastSeqPosMemory(ranges) if fast else SeqPosMemory(ranges)


def build_batch(case: dict) -> Batch:
    """The case's llama_batch as a ubatch.Batch (from_arrays; raises BatchError for an empty batch)."""
    seq_ids = case["seq_ids"]
    n = len(seq_ids)
    n_vocab = case.get("n_vocab", 256)
    n_pos = case.get("n_pos_per_embd", 1)
    tokens = case.get("tokens")
    if tokens is None:
        tokens = [i % n_vocab for i in range(n)]
    pos = case.get("pos")
    if case.get("input", "token") == "embd":
        n_embd = case.get("n_embd", 2)
        embd = np.array([[100.0 * i + k for k in range(n_embd)] for i in range(n)], dtype=np.float32)
        if pos is not None and n and isinstance(pos[0], list):
            pos = np.array(pos, dtype=np.int64).T          # per token [n_pos] -> section-major [n_pos][n]
        return Batch.from_arrays(embd=embd.reshape(n, n_embd), pos=pos, seq_ids=seq_ids if n else None,
                                 output=case.get("output"), n_pos_per_embd=n_pos)
    if pos is not None and n and isinstance(pos[0], list):
        pos = [p[0] for p in pos]                          # token input: only the first value is used
    return Batch.from_arrays(tokens=np.array(tokens, dtype=np.int64), pos=pos,
                             seq_ids=seq_ids if n else None, output=case.get("output"),
                             n_pos_per_embd=n_pos)


def log_messages(log: str) -> List[Tuple[str, str]]:
    """llama.cpp log text -> [(level, message)] (multi-line messages kept whole, trailing newline dropped)."""
    out: List[Tuple[str, str]] = []
    for line in log.split("\n"):
        if len(line) >= 2 and line[0] in "EWID" and line[1] == " ":
            out.append((line[0], line[2:]))
        elif out and line:
            out[-1] = (out[-1][0], out[-1][1] + "\n" + line)
    return out


def init_error_text(run: dict) -> str:
    """The message BatchError must carry: llama.cpp's init error without "init: "."""
    errs = [m for lvl, m in log_messages(run.get("init_log", "")) if lvl == "E"]
    assert errs, f"run has init_ok=False but no error in its log: {run.get('init_log')!r}"
    msg = errs[-1]
    return msg[len("init: "):] if msg.startswith("init: ") else msg


def split_call(a, run: dict, *, strict: bool = False):
    st = run["strategy"]
    if st == "simple":
        return a.split_simple(run["n_ubatch"])
    if st == "seq":
        return a.split_seq(run["n_ubatch"])
    return a.split_equal(run["n_ubatch"], sequential=bool(run.get("sequential", False)),
                         n_keep_tail=int(run.get("n_keep_tail", 0)), strict=strict)


def split_all(a, run: dict, *, strict: bool = False, limit: int = 100000) -> Iterator:
    """Splits until None (a guard stops a split loop that never ends)."""
    for _ in range(limit):
        ub = split_call(a, run, strict=strict)
        if ub is None:
            return
        yield ub
    raise AssertionError(f"split loop did not end after {limit} ubatches")


def _seq_sets(ub) -> List[frozenset]:
    return [frozenset(int(x) for x in ub.seq_ids(r)) for r in range(ub.n_tokens)]


def ubatch_record(ub) -> dict:
    """A plain-Python snapshot of a ubatch (same fields as a recorded UBATCH, seq ids as sets)."""
    rec = {
        "batch_idxs": [int(x) for x in ub.batch_idxs],
        "n_tokens": int(ub.n_tokens), "n_seq_tokens": int(ub.n_seq_tokens), "n_seqs": int(ub.n_seqs),
        "n_seqs_unq": int(ub.n_seqs_unq), "n_pos": int(ub.n_pos), "equal_seqs": bool(ub.equal_seqs),
        "seq_id_unq": [int(x) for x in ub.seq_id_unq],
        "seq_idx": [[s, int(ub.seq_idx[s])] for s in range(256) if ub.seq_idx[s] >= 0],
        "pos": [[int(ub.pos[j, r]) for j in range(ub.n_pos)] for r in range(ub.n_tokens)],
        "seq_ids": _seq_sets(ub),
        "n_seq_id": [int(x) for x in ub.n_seq_id],
        "output": [int(x) for x in ub.output],
        "token": None if ub.token is None else [int(x) for x in ub.token],
        "embd0": None if ub.embd is None else [float(x) for x in ub.embd[:, 0]],
    }
    if len(ub.seq_idx) != 256:
        rec["seq_idx_len"] = len(ub.seq_idx)
    return rec


UB_FIELDS = ["n_tokens", "n_seq_tokens", "n_seqs", "n_seqs_unq", "n_pos", "equal_seqs", "batch_idxs",
             "seq_id_unq", "seq_idx", "pos", "seq_ids", "output", "token", "embd0"]


def expected_record(u: dict) -> dict:
    """A recorded UBATCH in the ubatch_record form (seq ids as sets)."""
    rec = {k: u[k] for k in UB_FIELDS if k in u and k not in ("seq_ids", "embd0", "token")}
    rec["seq_ids"] = [frozenset(r) for r in u["seq_ids"]]
    rec["token"] = u.get("token")
    rec["embd0"] = u.get("embd0")
    return rec


def diff_ubatches(got: List[dict], want: List[dict], where: str) -> List[str]:
    """Mismatch descriptions between two lists of ubatch records."""
    errs = []
    if len(got) != len(want):
        errs.append(f"{where}: {len(got)} ubatches, expected {len(want)} "
                    f"(got sizes {[g['n_tokens'] for g in got]}, expected {[w['n_tokens'] for w in want]})")
    for u, (g, w) in enumerate(zip(got, want)):
        for f in UB_FIELDS:
            if f not in w:
                continue
            if g.get(f) != w[f]:
                errs.append(f"{where} ubatch {u}: {f}: expected {_short(w[f])}, got {_short(g.get(f))}")
        if "seq_idx_len" in g:
            errs.append(f"{where} ubatch {u}: seq_idx has {g['seq_idx_len']} entries, expected 256")
        if g["n_seq_id"] != [len(s) for s in g["seq_ids"]]:
            errs.append(f"{where} ubatch {u}: n_seq_id {g['n_seq_id']} does not match seq_ids")
        if errs and len(errs) > 12:
            break
    return errs


def _short(v, lim: int = 300) -> str:
    if isinstance(v, list) and v and isinstance(v[0], frozenset):
        v = [sorted(x) for x in v]
    s = repr(v)
    return s if len(s) <= lim else s[:lim] + "..."


class ConstMemory:
    """A memory whose seq_pos_min/max return the same (possibly invalid) values for every seq."""

    def __init__(self, lo, hi):
        self.lo, self.hi = lo, hi

    def seq_pos_min(self, s):
        return self.lo

    def seq_pos_max(self, s):
        return self.hi
