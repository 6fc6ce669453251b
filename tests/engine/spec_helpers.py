"""Helpers of the speculative-decoding tests: the whole KV state of a context (cells, heads, used counts of
every cache, and the K/V data of every cell in use), and prompts that prompt lookup can copy from."""
from __future__ import annotations

import numpy as np


def kv_state(ctx):
    """A comparable picture of a ubatch Context's memory: per cache and stream (head, used, cells) and the
    K/V bytes of every cell in use, per layer."""
    mem = ctx.memory
    mems = [mem.base, mem.swa] if hasattr(mem, "swa") else [mem]
    cells = []
    for m in mems:
        for st in range(m.n_stream):
            cells.append((m.head(st), m.used(st), m.cells(st)))
    data = []
    r = getattr(ctx, "_runner", None)
    if r is not None:
        for l in range(len(r.k)):
            store = r._store_of(l)
            m = mems[r.stores.index(store)] if len(mems) > 1 else mems[0]
            for st in range(m.n_stream):
                idx = np.array([c[0] for c in m.cells(st)], np.int64)
                data.append(r.k[l][st, idx].tobytes() + r.v[l][st, idx].tobytes())
    return cells, data


def repetitive_prompts(n: int, seed: int = 0, lo: int = 20, hi: int = 48, vocab: int = 256):
    """Token prompts made of a repeated random block, so that the model's output often repeats it."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        base = rng.integers(8, vocab, int(rng.integers(6, 14))).tolist()
        out.append((base * 8)[:int(rng.integers(lo, hi + 1))])
    return out
