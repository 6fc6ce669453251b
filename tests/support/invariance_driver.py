"""Runs one target prompt through ubatch.Context under different batch configurations and returns the
target sequence's logits (its prompt's last row, then each greedy step), to compare bitwise."""
from __future__ import annotations

from typing import Optional, List, Sequence

import numpy as np

import ubatch
from ubatch import Batch


def run_target(m, target: Sequence[int], *, others: Sequence[Sequence[int]] = (), n_ubatch: int = 512,
               kv_unified: bool = False, n_threads: int = 2, chunks: Sequence[int] = (), n_greedy: int = 2,
               type_kv: str = "f32", n_ctx: int = 1024, type_k: Optional[str] = None,
               type_v: Optional[str] = None) -> List[np.ndarray]:
    """target = seq 0; others = seqs 1.. (prompt rows without outputs, then one fixed token per greedy round,
    no outputs either: they only share the batches). chunks = split points of the target's prompt (it is
    decoded in several calls; the others go with the first call)."""
    n_seq = 1 + len(others)
    ctx = ubatch.Context(m, n_ctx=n_ctx, n_batch=512, n_ubatch=n_ubatch, n_seq_max=n_seq,
                         kv_unified=kv_unified, n_threads=n_threads, type_k=type_k or type_kv, type_v=type_v or type_kv)
    cuts = [0] + list(chunks) + [len(target)]
    out: List[np.ndarray] = []
    for ci in range(len(cuts) - 1):
        toks, pos, seqs, outs = [], [], [], []
        for p in range(cuts[ci], cuts[ci + 1]):
            toks.append(int(target[p])); pos.append(p); seqs.append([0]); outs.append(int(p == len(target) - 1))
        if ci == 0:   # interleave the others after the target's first rows
            for s, o in enumerate(others, start=1):
                for p, t in enumerate(o):
                    toks.append(int(t)); pos.append(p); seqs.append([s]); outs.append(0)
        assert ctx.decode(Batch.from_arrays(tokens=toks, pos=pos, seq_ids=seqs, output=outs)) == 0
    last = ctx.get_logits_ith(int(np.flatnonzero(np.asarray(outs))[0]))
    out.append(last.copy())
    for g in range(n_greedy):
        tok = int(np.argmax(out[-1]))
        toks, pos, seqs, outs = [tok], [len(target) + g], [[0]], [1]
        for s, o in enumerate(others, start=1):
            toks.append((int(o[-1]) + 7 * g + s) % 200 + 10); pos.append(len(o) + g); seqs.append([s]); outs.append(0)
        order = np.random.default_rng(g).permutation(len(toks))   # the target is not always row 0
        b = Batch.from_arrays(tokens=[toks[i] for i in order], pos=[pos[i] for i in order],
                              seq_ids=[seqs[i] for i in order], output=[outs[i] for i in order])
        assert ctx.decode(b) == 0
        out.append(ctx.get_logits_ith(int(np.flatnonzero(order == 0)[0])).copy())
    return out


def others_for(n_vocab: int, lengths: Sequence[int], seed: int = 1) -> List[List[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(10, min(n_vocab, 5000), size=n).tolist() for n in lengths]
