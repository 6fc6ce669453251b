"""The decode scenario of the tiny-arch recordings (tests/model/record_arch.py records llama.cpp on it,
tests/model/test_arch_moe.py replays it on ubatch): N_SEQ sequences of LENGTHS random tokens prefilled in one call
(every row output), then GEN rounds of one fixed token per sequence. Rows in step order, within a step in
batch order."""
from __future__ import annotations

from typing import List, Tuple

import numpy as np

N_VOCAB = 260
N_CTX = 256
LENGTHS = (5, 9, 14, 19)
N_SEQ = len(LENGTHS)
GEN = 3
SEED = 77
CONFIGS = [dict(tag="u512_t2", n_ubatch=512, n_threads=2, kv_unified=False),
           dict(tag="u3_t1", n_ubatch=3, n_threads=1, kv_unified=False),
           dict(tag="u1_t2_unified", n_ubatch=1, n_threads=2, kv_unified=True)]


def prompts() -> List[List[int]]:
    rng = np.random.default_rng(SEED)
    return [rng.integers(0, N_VOCAB, size=n).tolist() for n in LENGTHS]


def steps() -> List[List[Tuple[int, int, int]]]:
    """[(token, pos, seq)] per llama_decode call."""
    ps = prompts()
    out = [[(t, p, s) for s, pr in enumerate(ps) for p, t in enumerate(pr)]]
    for g in range(GEN):
        out.append([((37 * s + 11 * g + 5) % N_VOCAB, LENGTHS[s] + g, s) for s in range(N_SEQ)])
    return out


def describe() -> dict:
    return {"lengths": list(LENGTHS), "gen": GEN, "seed": SEED, "n_ctx": N_CTX, "steps": steps()}
