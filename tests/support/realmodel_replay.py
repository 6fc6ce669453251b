"""Replays llama.cpp's recorded real-model decode scenarios (tests/data/realmodel/<tag>/decode) through
ubatch.Context and compares with the agreement rules of docs/models.md (Agreement with llama.cpp):

* M = max(0.2, the largest top-1/top-2 margin at which llama.cpp's own configurations disagreed
  (summary.json greedy.max_margin_at_divergence), the largest change of a row's margin between two of
  llama.cpp's own f32 configurations (margin_motion: qwen 0.239, gemma 0.551));
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
DATA = os.path.join(os.path.dirname(HERE), "data", "realmodel")
TAGS = {"qwen2.5-0.5b": "qwen2.5-coder-0.5b-q4_k_m", "gemma3-270m": "gemma3-270m-q4_k_m"}


def load_scenario(model: str, name: str):
    d = os.path.join(DATA, TAGS[model], "decode")
    with open(os.path.join(d, name + ".json")) as f:
        doc = json.load(f)
    return doc, np.load(os.path.join(d, name + ".npz"))


def margin_threshold(model: str) -> float:
    """M: below it a row is a near-tie that llama.cpp itself may answer either way. The largest of 0.2, the
    largest margin at which llama.cpp's own ways disagreed (summary.json) and the largest change of a row's
    top-1/top-2 margin between llama.cpp's own f32 configurations of the same rows (margin_motion)."""
    with open(os.path.join(DATA, "summary.json")) as f:
        s = json.load(f)
    return max(0.2, float(s["models"][TAGS[model]]["greedy"]["max_margin_at_divergence"]), margin_motion(model))


_MOTION: Dict[str, float] = {}


def margin_motion(model: str) -> float:
    """The largest |change| of llama.cpp's top-1/top-2 margin (of the first configuration's top two ids) on
    the same row between two of its recorded f32 configurations of the same prompts: llama.cpp's own
    margin noise. A row whose margin is below it is one llama.cpp could flip by changing only n_ubatch."""
    if model not in _MOTION:
        d = os.path.join(DATA, TAGS[model], "decode")
        fams: Dict[str, list] = {}
        for f in sorted(os.listdir(d)):
            if not f.endswith(".json") or f == "checks.json":
                continue
            doc, ref = load_scenario(model, f[:-5])
            if doc["scenario"]["ctx"]["type_k"] != "f32":
                continue
            rows = {}
            for si, st in enumerate(doc["result"]["steps"]):
                if f"s{si}_top_vals" not in ref:
                    continue
                tag = doc["scenario"]["steps"][si].get("tag")
                ids, vals = ref[f"s{si}_top_ids"], ref[f"s{si}_top_vals"]
                for r, row in enumerate(st["rows"]):
                    rows[(row["seq"], row["pos"], row["token"], tag)] = dict(zip(ids[r].tolist(), vals[r].tolist()))
            fams.setdefault(_family(f[:-5]), []).append(rows)
        worst = 0.0
        for confs in fams.values():
            for i, a_rows in enumerate(confs):
                for b_rows in confs[i + 1:]:
                    for k in a_rows.keys() & b_rows.keys():
                        a, b = a_rows[k], b_rows[k]
                        t1, t2 = sorted(a, key=a.get, reverse=True)[:2]
                        if t1 in b and t2 in b:
                            worst = max(worst, abs((b[t1] - b[t2]) - (a[t1] - a[t2])))
        _MOTION[model] = worst
    return _MOTION[model]


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


def replay(m, doc: dict, keep=None, **over) -> Dict[int, Tuple[np.ndarray, np.ndarray]]:
    """step index -> (batch indices of the output rows, float32 logits [R, n_vocab]) for each decode step.
    keep(step_index, pos) -> bool, if given, drops the output flag of the other rows (ubatch's rows do not
    depend on which other rows are outputs, so the kept rows are the same; it saves lm-head work)."""
    ctx = make_context(m, doc["scenario"]["ctx"], **over)
    out = {}
    for si, st in enumerate(doc["scenario"]["steps"]):
        if st["op"] == "seq_rm":
            ctx.memory.seq_rm(st["seq_id"], st["p0"], st["p1"])
            continue
        assert st["op"] == "decode", st["op"]
        flags = list(st["logits"])
        if keep is not None:
            flags = [int(f and keep(si, p)) for f, p in zip(flags, st["pos"])]
        b = Batch.from_arrays(tokens=st["tokens"], pos=st["pos"], seq_ids=[list(s) for s in st["seq_ids"]],
                              output=flags)
        assert ctx.decode(b) == 0
        rows = np.flatnonzero(np.asarray(flags) != 0)
        if rows.size == 0:
            continue
        out[si] = (rows, np.stack([ctx.get_logits_ith(int(i)) for i in rows]))
    return out


FAMILIES = {"single32": "single32", "parallel3": "three", "oneseq3": "three", "long900": "long900",
            "rollback": "rollback"}


def _family(scen: str) -> str:
    return FAMILIES[scen.split("_")[0]]


_MIN_MARGIN: Dict[tuple, Dict[tuple, float]] = {}


def llama_min_margins(model: str, scen: str) -> Dict[tuple, float]:
    """(seq, pos, input token, tag) -> the smallest top-1/top-2 margin llama.cpp gave that row over all its
    recorded f32 configurations of the same data (the scenarios of one family: same prompts)."""
    key = (model, _family(scen))
    if key not in _MIN_MARGIN:
        d = os.path.join(DATA, TAGS[model], "decode")
        out: Dict[tuple, float] = {}
        for f in sorted(os.listdir(d)):
            if not f.endswith(".json") or f == "checks.json" or _family(f[:-5]) != key[1]:
                continue
            doc, ref = load_scenario(model, f[:-5])
            if doc["scenario"]["ctx"]["type_k"] != "f32":
                continue
            for si, st in enumerate(doc["result"]["steps"]):
                if f"s{si}_top_vals" not in ref:
                    continue
                tag = doc["scenario"]["steps"][si].get("tag")
                vals = ref[f"s{si}_top_vals"]
                for r, row in enumerate(st["rows"]):
                    k = (row["seq"], row["pos"], row["token"], tag)
                    out[k] = min(out.get(k, np.inf), float(vals[r, 0] - vals[r, 1]))
        _MIN_MARGIN[key] = out
    return _MIN_MARGIN[key]


def compare(model: str, doc: dict, ref, got) -> dict:
    """Agreement numbers of one replay against llama.cpp's recording. A row is "clear" when llama.cpp's
    margin is >= M in this recording and in every other recorded configuration of the same row (where
    llama.cpp's own margin drops below M in one of its configurations, its answer there is a near-tie)."""
    M = margin_threshold(model)
    mins = llama_min_margins(model, doc["scenario"]["name"])
    spread = ubatch_spread(model)
    n_rows = n_clear = argmax_ok = within = 0
    worst = 0.0
    per_row: List[float] = []
    bad_argmax: List[tuple] = []
    for si, (rows, logits) in got.items():
        sel = np.searchsorted(ref[f"s{si}_rows"], rows)
        rec = doc["result"]["steps"][si]["rows"]
        tag = doc["scenario"]["steps"][si].get("tag")
        keys = [(rec[j]["seq"], rec[j]["pos"], rec[j]["token"], tag) for j in sel]
        np.testing.assert_array_equal(ref[f"s{si}_rows"][sel], rows)
        ids, vals = ref[f"s{si}_top_ids"][sel], ref[f"s{si}_top_vals"][sel]
        margin = vals[:, 0] - vals[:, 1]
        mine = logits[np.arange(len(rows))[:, None], ids]
        d = np.abs(mine - vals).max(axis=1)
        am = logits.argmax(axis=1)
        for r in range(len(rows)):
            n_rows += 1
            worst = max(worst, float(d[r]))
            per_row.append(float(d[r]))
            within += int(d[r] <= spread)
            if margin[r] >= M and mins.get(keys[r], margin[r]) >= M:
                n_clear += 1
                if am[r] == ids[r, 0]:
                    argmax_ok += 1
                else:
                    bad_argmax.append((si, int(rows[r]), float(margin[r])))
    return dict(rows=n_rows, clear_rows=n_clear, argmax_ok=argmax_ok, bad_argmax=bad_argmax,
                within_spread=within, frac_within=within / max(n_rows, 1), max_abs=worst, M=M, spread=spread,
                p50_abs=float(np.median(per_row)) if per_row else 0.0)


def load_greedy(model: str) -> List[dict]:
    with open(os.path.join(DATA, TAGS[model], "greedy.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def greedy_check(m, model: str, n_prompts: int = 4, n_steps: int = 32, kv_unified: bool = False) -> List[dict]:
    """All prompts decoded together (one batch, then one token per sequence per round; ubatch is
    batch-invariant, so this is also the single-sequence answer), compared with llama.cpp's `sequential`
    way up to the first index where llama.cpp's margin is below M."""
    M = margin_threshold(model)
    recs = load_greedy(model)[:n_prompts]
    ctx = ubatch.Context(m, n_ctx=1024, n_batch=512, n_ubatch=512, n_seq_max=4, kv_unified=kv_unified,
                         n_threads=2)
    toks, pos, seqs, outs = [], [], [], []
    for s, r in enumerate(recs):
        p = r["prompt_tokens"]
        toks += p; pos += list(range(len(p))); seqs += [[s]] * len(p); outs += [0] * (len(p) - 1) + [1]
    assert ctx.decode(Batch.from_arrays(tokens=toks, pos=pos, seq_ids=seqs, output=outs)) == 0
    last = np.cumsum([len(r["prompt_tokens"]) for r in recs]) - 1
    gen = [[int(np.argmax(ctx.get_logits_ith(int(i))))] for i in last]
    for step in range(1, n_steps):
        b = Batch.from_arrays(tokens=[g[-1] for g in gen],
                              pos=[len(r["prompt_tokens"]) + step - 1 for r in recs],
                              seq_ids=[[s] for s in range(len(recs))], output=[1] * len(recs))
        assert ctx.decode(b) == 0
        for s in range(len(recs)):
            gen[s].append(int(np.argmax(ctx.get_logits_ith(s))))
    res = []
    for r, g in zip(recs, gen):
        ref = r["sequential"]
        margins = np.asarray(ref["margins"][:n_steps])
        low = np.flatnonzero(margins < M)
        upto = int(low[0]) + 1 if low.size else n_steps   # the low-margin token itself may still differ
        first_diff = next((i for i in range(n_steps) if g[i] != ref["tokens"][i]), None)
        res.append(dict(prompt=r.get("id", r["prompt_tokens"][:4]), compared=upto, first_diff=first_diff,
                        ok=first_diff is None or first_diff >= upto - (1 if low.size else 0),
                        margin_at_diff=None if first_diff is None else float(margins[first_diff])))
    return res


def main() -> None:  # the thorough check: every scenario and all greedy prompts of both models
    import sys
    import time
    from ubatch.model import fetch
    names = sys.argv[1:] or list(TAGS)
    for name in names:
        m = ubatch.Model.from_gguf(fetch.path(name))
        d = os.path.join(DATA, TAGS[name], "decode")
        for scen in sorted(f[:-5] for f in os.listdir(d) if f.endswith(".json") and f != "checks.json"):
            doc, ref = load_scenario(name, scen)
            if doc["scenario"]["ctx"]["type_k"] != "f32":
                continue
            t = time.time()
            c = compare(name, doc, ref, replay(m, doc))
            print(f"{name:14s} {scen:22s} rows {c['rows']:4d} clear {c['clear_rows']:4d} argmax_ok "
                  f"{c['argmax_ok']:4d} within_spread {c['frac_within']:.3f} max|d| {c['max_abs']:.3f} "
                  f"p50 {c['p50_abs']:.3f} (M {c['M']:.3f}, spread {c['spread']:.3f}) bad {c['bad_argmax']} "
                  f"{time.time() - t:.1f}s", flush=True)
        for g in greedy_check(m, name):
            print(f"{name:14s} greedy {g}", flush=True)


if __name__ == "__main__":
    main()
