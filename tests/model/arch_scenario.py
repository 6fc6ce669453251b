"""The decode scenario of the tiny-arch recordings (tests/model/record_arch.py records llama.cpp on it,
tests/model/test_arch_moe.py replays it on ubatch): N_SEQ sequences of LENGTHS random tokens prefilled in one call
(every row output), then GEN rounds of one fixed token per sequence. Rows in step order, within a step in
batch order."""
from __future__ import annotations

from typing import Dict, List, Tuple

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


def replay(m, cfg: dict) -> np.ndarray:
    """ubatch's logits float32[rows, n_vocab] of the scenario on model m under one configuration of CONFIGS
    (f32 K/V), rows in scenario order (the tests' counterpart of record_arch.run)."""
    import ubatch   # here, not at the top: the recorders import this module without needing ubatch
    ctx = ubatch.Context(m, n_ctx=N_CTX, n_batch=512, n_ubatch=cfg["n_ubatch"], n_seq_max=N_SEQ,
                         kv_unified=cfg["kv_unified"], n_threads=cfg["n_threads"], type_k="f32", type_v="f32")
    out = []
    for st in steps():
        b = ubatch.Batch.from_arrays(tokens=[t for t, _, _ in st], pos=[p for _, p, _ in st],
                                     seq_ids=[[s] for *_, s in st], output=[1] * len(st))
        assert ctx.decode(b) == 0
        out += [ctx.get_logits_ith(i).copy() for i in range(len(st))]
    return np.stack(out)


def summarise(runs: Dict[str, np.ndarray]) -> Tuple[Dict[str, np.ndarray], float]:
    """A recording's arrays from each configuration's logits (runs: tag -> float32[rows, n_vocab], the first
    the reference): logits, top2_<tag> / top2v_<tag>, maxdiff_<tag>; and the spread (max of every maxdiff)."""
    first = next(iter(runs.values()))
    arrs = {"logits": first}
    spread = 0.0
    for tag, lg in runs.items():
        top = np.argsort(-lg, axis=1, kind="stable")[:, :2].astype(np.int32)
        arrs[f"top2_{tag}"] = top
        arrs[f"top2v_{tag}"] = np.take_along_axis(lg, top, axis=1)
        arrs[f"maxdiff_{tag}"] = np.abs(lg - first).max(axis=1).astype(np.float32)
        spread = max(spread, float(arrs[f"maxdiff_{tag}"].max()))
    return arrs, spread


def margins_motion(z, tags: List[str]) -> Tuple[np.ndarray, float]:
    """From a recording z (summarise's arrays): the top-1/top-2 margins float[len(tags), rows] per configuration
    and the largest motion of the first configuration's top-two margin between configurations (rows where a
    configuration has the same top two ids)."""
    margins = np.stack([z[f"top2v_{t}"][:, 0] - z[f"top2v_{t}"][:, 1] for t in tags])
    motion = 0.0
    for t in tags[1:]:
        same = (z[f"top2_{t}"] == z[f"top2_{tags[0]}"]).all(axis=1)
        motion = max(motion, float(np.abs(margins[0] - margins[tags.index(t)])[same].max(initial=0.0)))
    return margins, motion
