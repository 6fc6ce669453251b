"""Workload families of the split-strategy suite: one synthetic batch per family, seeded, in two sizes
(quick and full). Every batch is built once; the sweep re-plans it many times."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List

import numpy as np

from ubatch.batch.container import Batch
from ubatch.batch.workload import layout_batch

N_VOCAB = 32000


@dataclass
class Workload:
    """One batch to plan, with the allocator settings it needs."""
    family: str
    desc: str
    batch: Batch
    n_seq_max: int
    n_pos_per_embd: int = 1
    output_all: bool = False
    n_vocab: int = N_VOCAB
    info: Dict[str, object] = field(default_factory=dict)

    @property
    def n_tokens(self) -> int:
        return self.batch.n_tokens

    def describe(self) -> Dict[str, object]:
        return {"desc": self.desc, "n_tokens": self.n_tokens, "n_seq_max": self.n_seq_max,
                "n_pos_per_embd": self.n_pos_per_embd, "output_all": self.output_all,
                "input": "embd" if self.batch.token is None else "token", **self.info}


def _ragged(rng: np.random.Generator, n: int, lo: int, hi: int) -> List[int]:
    return [int(x) for x in rng.integers(lo, hi + 1, size=n)]


def decode_heavy(quick: bool, rng: np.random.Generator) -> Workload:
    n = 32 if quick else 64
    b = layout_batch([1] * n, "interleaved", "last", pos0=100, n_vocab=N_VOCAB)
    return Workload("decode", f"decode step: {n} seqs x 1 token each", b, n_seq_max=n, info={"n_seqs": n})


def prefill_heavy(quick: bool, rng: np.random.Generator) -> Workload:
    n, length = (4, 128) if quick else (4, 512)
    b = layout_batch([length] * n, "contiguous", "last", n_vocab=N_VOCAB)
    return Workload("prefill", f"prompt prefill: {n} seqs x {length} tokens, contiguous", b, n_seq_max=n,
                    info={"n_seqs": n})


def ragged_mixed(quick: bool, rng: np.random.Generator) -> Workload:
    """A server step: most sequences decode one token, a few bring prompt chunks of ragged length."""
    n, hi = (24, 96) if quick else (48, 256)
    lengths = [1 if rng.random() < 0.7 else int(rng.integers(8, hi + 1)) for _ in range(n)]
    b = layout_batch(lengths, "contiguous", "last", n_vocab=N_VOCAB)
    return Workload("ragged", f"server step: {n} seqs, 70% decode (1 token), 30% prompt chunks of 8..{hi}", b,
                    n_seq_max=n, info={"n_seqs": n, "lengths": lengths})


def shared_prefix(quick: bool, rng: np.random.Generator) -> Workload:
    n, prefix, lo, hi = (8, 32, 8, 32) if quick else (8, 128, 16, 64)
    lengths = _ragged(rng, n, lo, hi)
    b = layout_batch(lengths, "contiguous", "last", shared_prefix=prefix, n_vocab=N_VOCAB)
    return Workload("shared-prefix", f"{n} seqs behind a {prefix}-token shared prefix, suffixes {lo}..{hi}", b,
                    n_seq_max=n, info={"n_seqs": n, "prefix": prefix, "lengths": lengths})


def embeddings(quick: bool, rng: np.random.Generator) -> Workload:
    """Non-causal embedding job: whole documents, every row an output (output_all, like cparams.embeddings)."""
    n, lo, hi = (16, 16, 64) if quick else (32, 16, 128)
    lengths = _ragged(rng, n, lo, hi)
    b = layout_batch(lengths, "contiguous", "all", n_vocab=N_VOCAB)
    return Workload("embeddings", f"embedding job: {n} documents of {lo}..{hi} tokens, output_all", b,
                    n_seq_max=n, output_all=True, info={"n_seqs": n, "lengths": lengths})


def mrope_embd(quick: bool, rng: np.random.Generator) -> Workload:
    """M-RoPE image rows (n_pos_per_embd = 4, embedding input): each sequence is an h x w grid of patch
    embeddings at sections (t, t + row, t + col, 0) with t the sequence's next position."""
    n, side, n_embd = (4, 8, 16) if quick else (4, 16, 16)
    rows = side * side
    t0 = [int(x) for x in rng.integers(0, 64, size=n)]
    pos = np.zeros((4, n * rows), np.int32)
    r, c = np.divmod(np.arange(rows), side)
    for s in range(n):
        sl = slice(s * rows, (s + 1) * rows)
        pos[0, sl] = t0[s]
        pos[1, sl] = t0[s] + r
        pos[2, sl] = t0[s] + c
    seq = np.repeat(np.arange(n, dtype=np.int32), rows)
    out = np.zeros(n * rows, np.int8)
    out[rows - 1::rows] = 1
    emb = rng.standard_normal((n * rows, n_embd)).astype(np.float32)
    b = Batch.from_arrays(embd=emb, pos=pos, seq_ids=seq, output=out, n_pos_per_embd=4)
    return Workload("mrope-embd", f"M-RoPE image rows: {n} seqs x {side}x{side} patch embeddings (n_embd {n_embd}), "
                    "n_pos_per_embd 4", b, n_seq_max=n, n_pos_per_embd=4, info={"n_seqs": n, "grid": [side, side]})


FAMILIES: Dict[str, Callable[[bool, np.random.Generator], Workload]] = {
    "decode": decode_heavy,
    "prefill": prefill_heavy,
    "ragged": ragged_mixed,
    "shared-prefix": shared_prefix,
    "embeddings": embeddings,
    "mrope-embd": mrope_embd,
}


def build(names: List[str], quick: bool, seed: int = 0) -> List[Workload]:
    """The workloads of `names` (keys of FAMILIES), each from its own seeded generator."""
    out = []
    for k, name in enumerate(names):
        if name not in FAMILIES:
            raise ValueError(f"unknown workload family {name!r}; choose from {', '.join(FAMILIES)}")
        out.append(FAMILIES[name](quick, np.random.default_rng([seed, k])))
    return out
