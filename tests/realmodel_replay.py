"""Replays llama.cpp's recorded real-model decode scenarios (tests/data/realmodel/<tag>/decode) through
ubatch.Context and compares with the agreement rules of issue 11 item 4 / issue 12 item 5:

* M = max(0.2, the largest top-1/top-2 margin at which llama.cpp's own configurations disagreed:
  summary.json greedy.max_margin_at_divergence);
* on every output row where llama.cpp's margin >= M: the same argmax;
* per-row max |dlogit| over llama.cpp's stored top-64 ids <= llama.cpp's own spread across n_ubatch values
  (checks.json: max of single32_vs_ub1/ub4/ub8 max_abs_diff) on >= 99 % of the rows."""
from __future__ import annotations

import json
import os
from typing import Dict, List, Tuple

import numpy as np

import ubatch
from ubatch import Batch

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data", "realmodel")
TAGS = {"qwen2.5-0.5b": "qwen2.5-coder-0.5b-q4_k_m", "gemma3-270m": "gemma3-270m-q4_k_m"}


def load_scenario(model: str, name: str):
    d = os.path.join(DATA, TAGS[model], "decode")
    with open(os.path.join(d, name + ".json")) as f:
        doc = json.load(f)
    return doc, np.load(os.path.join(d, name + ".npz"))


def margin_threshold(model: str) -> float:
    with open(os.path.join(DATA, "summary.json")) as f:
        s = json.load(f)
    return max(0.2, float(s["models"][TAGS[model]]["greedy"]["max_margin_at_divergence"]))


def ubatch_spread(model: str) -> float:
    with open(os.path.join(DATA, TAGS[model], "decode", "checks.json")) as f:
        c = json.load(f)["cross"]
    return max(float(c[f"single32_vs_{u}"]["max_abs_diff"]) for u in ("ub1", "ub4", "ub8"))


def make_context(m, ctx: dict, **over) -> ubatch.Context:
    kw = dict(n_ctx=ctx["n_ctx"], n_batch=ctx["n_batch"], n_ubatch=ctx["n_ubatch"], n_seq_max=ctx["n_seq_max"],
              kv_unified=ctx["kv_unified"], type_k=ctx["type_k"], type_v=ctx["type_v"],
              n_threads=ctx.get("n_threads", 2))
    kw.update(over)
    return ubatch.Context(m, **kw)


def replay(m, doc: dict, **over) -> Dict[int, Tuple[np.ndarray, np.ndarray]]:
    """step index -> (batch indices of the output rows, float32 logits [R, n_vocab]) for each decode step."""
    ctx = make_context(m, doc["scenario"]["ctx"], **over)
    out = {}
    for si, st in enumerate(doc["scenario"]["steps"]):
        if st["op"] == "seq_rm":
            ctx.memory.seq_rm(st["seq_id"], st["p0"], st["p1"])
            continue
        assert st["op"] == "decode", st["op"]
        b = Batch.from_arrays(tokens=st["tokens"], pos=st["pos"], seq_ids=[list(s) for s in st["seq_ids"]],
                              output=st["logits"])
        assert ctx.decode(b) == 0
        rows = np.flatnonzero(np.asarray(st["logits"]) != 0)
        out[si] = (rows, np.stack([ctx.get_logits_ith(int(i)) for i in rows]))
    return out


def compare(model: str, doc: dict, ref, got) -> dict:
    """Agreement numbers of one replay against llama.cpp's recording."""
    M = margin_threshold(model)
    spread = ubatch_spread(model)
    n_rows = n_clear = argmax_ok = within = 0
    worst = 0.0
    bad_argmax: List[tuple] = []
    for si, (rows, logits) in got.items():
        np.testing.assert_array_equal(rows, ref[f"s{si}_rows"])
        ids, vals = ref[f"s{si}_top_ids"], ref[f"s{si}_top_vals"]
        margin = vals[:, 0] - vals[:, 1]
        mine = logits[np.arange(len(rows))[:, None], ids]
        d = np.abs(mine - vals).max(axis=1)
        am = logits.argmax(axis=1)
        for r in range(len(rows)):
            n_rows += 1
            worst = max(worst, float(d[r]))
            within += int(d[r] <= spread)
            if margin[r] >= M:
                n_clear += 1
                if am[r] == ids[r, 0]:
                    argmax_ok += 1
                else:
                    bad_argmax.append((si, int(rows[r]), float(margin[r])))
    return dict(rows=n_rows, clear_rows=n_clear, argmax_ok=argmax_ok, bad_argmax=bad_argmax,
                within_spread=within, frac_within=within / max(n_rows, 1), max_abs=worst, M=M, spread=spread)
