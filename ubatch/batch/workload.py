"""Synthetic batches for the CLI and benchmarks: sequences of given lengths laid out contiguously,
interleaved by position, or behind a shared prefix."""
from __future__ import annotations

from typing import List, Sequence

import numpy as np

from ubatch.batch.container import Batch


def layout_batch(lengths: Sequence[int], layout: str = "contiguous", outputs: str = "last",
                 shared_prefix: int = 0, pos0: int = 0, n_vocab: int = 256) -> Batch:
    """A token batch: seq s gets lengths[s] tokens at positions pos0.. (after an optional prefix of
    `shared_prefix` tokens that belong to every seq). outputs: "last" (each seq's last token) or "all"."""
    if any(n < 0 for n in lengths):
        raise ValueError(f"sequence lengths must be >= 0, got {list(lengths)}")
    seq_rows: List[list] = []
    pos: List[int] = []
    n_seqs = len(lengths)
    for p in range(shared_prefix):
        seq_rows.append(list(range(n_seqs)))
        pos.append(pos0 + p)
    start = pos0 + shared_prefix
    if layout == "contiguous":
        for s, n in enumerate(lengths):
            for k in range(n):
                seq_rows.append([s]); pos.append(start + k)
    elif layout == "interleaved":
        for k in range(max(lengths, default=0)):
            for s, n in enumerate(lengths):
                if k < n:
                    seq_rows.append([s]); pos.append(start + k)
    else:
        raise ValueError(f"layout must be 'contiguous' or 'interleaved', got {layout!r}")
    n = len(pos)
    if n == 0:
        raise ValueError("the workload has no tokens")
    if outputs == "all":
        out = np.ones(n, np.int8)
    elif outputs == "last":
        last = {}
        for i, ss in enumerate(seq_rows):
            for s in ss:
                last[s] = i
        out = np.zeros(n, np.int8)
        out[list(set(last.values()))] = 1
    else:
        raise ValueError(f"outputs must be 'last' or 'all', got {outputs!r}")
    tokens = (np.arange(n) * 7 + 3) % n_vocab
    return Batch.from_arrays(tokens=tokens, pos=np.asarray(pos), seq_ids=seq_rows, output=out)
