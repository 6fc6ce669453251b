"""Agreement of ubatch with llama.cpp on a model re-quantised to another weight type (ubatch.bench.quantised:
IQ4_XS, IQ3_S, ...), by the real-model rule of tests/realmodel_replay.py, held to llama.cpp's own noise:

* llama.cpp decodes each prompt (every row an output) in four configurations that differ only in n_ubatch
  (512 = the whole prompt in one ubatch, 1, 4, 8), f32 K/V, flash attention off, 2 threads;
* spread = the largest |logit change| over the single-ubatch run's top-64 ids between it and the others
  (llama.cpp moves a logit that much by changing only the batch layout);
* M = max(0.2, the largest change of a row's top-1/top-2 margin between llama.cpp's configurations, the largest
  margin at which two of them disagree on the argmax); a row is "clear" when its margin is >= M in every
  configuration;
* ubatch (one decode of the prompt, n_ubatch 512) must give the same argmax on every clear row and a per-row
  max |dlogit| over the top-64 ids within the spread on >= 99 % of the rows.

``record(...)`` makes llama.cpp's side (needs llama-cpp-python; ``--record DIR`` keeps it); ``compare(...)`` runs
ubatch against a recording. Not a test: the files themselves can only be made by llama.cpp's quantiser, which a
fresh install (and CI) does not have.
``python -m ubatch.bench.quant_agreement`` records live and compares, for both models and IQ4_XS / IQ3_S.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from typing import Dict, List, Optional

import numpy as np

TOP = 64
CONFIGS = (512, 1, 4, 8)   # n_ubatch of llama.cpp's configurations; the first is the reference
# our own prompt texts (tokenised by the model's tokenizer)
PROMPTS = (
    "The quick brown fox jumps over the lazy dog. A second sentence follows the first one, and then the "
    "story goes on: the fox runs into the forest, where it meets an old owl sitting on a branch.",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    a, b = 0, 1\n    for _ in range(n):\n"
    "        a, b = b, a + b\n    return a\n\n\nprint(fibonacci(10))\n",
    "Water boils at one hundred degrees Celsius at sea level. At higher altitudes the air pressure is lower, "
    "so water boils at a lower temperature, which is why cooking takes longer in the mountains.",
)


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def _tokens(path: str) -> List[List[int]]:
    from ubatch.tokenizer import Tokenizer
    tok = Tokenizer.from_gguf(path)
    return [list(tok.encode(p, add_special=True)) for p in PROMPTS]


def llama_rows(lc, tokens: List[int], n_ubatch: int) -> np.ndarray:
    """llama.cpp's logits of every row of one prompt, float32 [n, n_vocab] (lc: models_bench.LlamaCpp)."""
    L = lc.L
    n = len(tokens)
    ctx = lc._ctx(max(256, n + 16), 512, n_ubatch, 1, False)
    b = lc._batch(tokens, range(n), [0] * n, [1] * n)
    try:
        assert L.llama_decode(ctx, b) == 0
        return np.stack([np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), shape=(lc.n_vocab,)).copy()
                         for i in range(n)])
    finally:
        L.llama_batch_free(b)
        L.llama_free(ctx)


def record(path: str, tokens: Optional[List[List[int]]] = None) -> Dict:
    """llama.cpp's side for the quantised file `path`: per prompt the reference run's top-64 ids / values, and
    the spread, margin motion, disagreement margin and per-row minimum margins over the configurations."""
    from ubatch.bench.models_bench import LlamaCpp
    lc = LlamaCpp(path)
    try:
        return _record(lc, path, tokens or _tokens(path))
    finally:
        lc.L.llama_model_free(lc.model)


def _record(lc, path: str, tokens: List[List[int]]) -> Dict:
    out: Dict = {"file": os.path.basename(path), "sha256": sha256(path), "configs": list(CONFIGS), "prompts": []}
    spread = motion = diverge = 0.0
    for toks in tokens:
        runs = [llama_rows(lc, toks, u) for u in CONFIGS]
        ref = runs[0]
        ids = np.argsort(-ref, axis=1, kind="stable")[:, :TOP]
        vals = np.take_along_axis(ref, ids, axis=1)
        t1, t2 = ids[:, 0], ids[:, 1]
        r = np.arange(len(toks))
        min_margin = vals[:, 0] - vals[:, 1]
        for other in runs[1:]:
            spread = max(spread, float(np.abs(np.take_along_axis(other, ids, axis=1) - vals).max()))
            m_other = other[r, t1] - other[r, t2]
            motion = max(motion, float(np.abs(m_other - (vals[:, 0] - vals[:, 1])).max()))
            min_margin = np.minimum(min_margin, m_other)
            am = other.argmax(axis=1)
            srt = np.sort(other, axis=1)
            for i in np.flatnonzero(am != t1):
                diverge = max(diverge, float(srt[i, -1] - srt[i, -2]), float(vals[i, 0] - vals[i, 1]))
        out["prompts"].append({"tokens": toks, "top_ids": ids.astype(np.int32), "top_vals": vals.astype(np.float32),
                               "min_margin": min_margin.astype(np.float32)})
    out.update(spread=spread, margin_motion=motion, max_margin_at_divergence=diverge,
               M=max(0.2, motion, diverge))
    return out


def save(rec: Dict, d: str, tag: str) -> None:
    os.makedirs(d, exist_ok=True)
    arrays = {}
    meta = {k: v for k, v in rec.items() if k != "prompts"}
    meta["prompts"] = []
    for i, p in enumerate(rec["prompts"]):
        arrays[f"p{i}_ids"], arrays[f"p{i}_vals"], arrays[f"p{i}_min"] = p["top_ids"], p["top_vals"], p["min_margin"]
        meta["prompts"].append({"tokens": p["tokens"]})
    np.savez_compressed(os.path.join(d, tag + ".npz"), **arrays)
    with open(os.path.join(d, tag + ".json"), "w") as f:
        json.dump(meta, f, indent=1)


def load(d: str, tag: str) -> Dict:
    with open(os.path.join(d, tag + ".json")) as f:
        rec = json.load(f)
    z = np.load(os.path.join(d, tag + ".npz"))
    for i, p in enumerate(rec["prompts"]):
        p.update(top_ids=z[f"p{i}_ids"], top_vals=z[f"p{i}_vals"], min_margin=z[f"p{i}_min"])
    return rec


def ubatch_rows(m, tokens: List[int]) -> np.ndarray:
    import ubatch
    n = len(tokens)
    ctx = ubatch.Context(m, n_ctx=max(256, n + 16), n_batch=512, n_ubatch=512, n_threads=2, type_k="f32",
                         type_v="f32")
    assert ctx.decode(ubatch.Batch.from_arrays(tokens=tokens, pos=list(range(n)), seq_ids=[0] * n,
                                               output=[1] * n)) == 0
    return np.stack([ctx.get_logits_ith(i) for i in range(n)])


def compare(m, rec: Dict) -> Dict:
    """ubatch's model m against a recording: the agreement numbers (see the module docstring)."""
    M, spread = rec["M"], rec["spread"]
    rows = clear = ok = within = 0
    worst, bad = 0.0, []
    for pi, p in enumerate(rec["prompts"]):
        lg = ubatch_rows(m, p["tokens"])
        ids, vals = p["top_ids"], p["top_vals"]
        d = np.abs(np.take_along_axis(lg, ids, axis=1) - vals).max(axis=1)
        am = lg.argmax(axis=1)
        for i in range(len(p["tokens"])):
            rows += 1
            worst = max(worst, float(d[i]))
            within += int(d[i] <= spread)
            if vals[i, 0] - vals[i, 1] >= M and p["min_margin"][i] >= M:
                clear += 1
                if am[i] == ids[i, 0]:
                    ok += 1
                else:
                    bad.append((pi, i, float(vals[i, 0] - vals[i, 1])))
    return dict(rows=rows, clear_rows=clear, argmax_ok=ok, bad_argmax=bad, frac_within=within / max(rows, 1),
                max_abs=worst, spread=spread, M=M)


def agrees(c: Dict) -> bool:
    return c["clear_rows"] >= 0.5 * c["rows"] and c["argmax_ok"] == c["clear_rows"] and c["frac_within"] >= 0.99


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ubatch.bench.quant_agreement", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="qwen2.5-0.5b,gemma3-270m")
    ap.add_argument("--types", default="IQ4_XS,IQ3_S")
    ap.add_argument("--record", default=None, help="also write llama.cpp's side here (DIR/<model>-<type>.npz/json)")
    ap.add_argument("--json", default=None, help="write every file's agreement numbers to this JSON file")
    a = ap.parse_args(argv)
    from ubatch.bench import quantised
    from ubatch.model.model import Model
    fails = 0
    results = []
    for name in a.models.split(","):
        for ft in a.types.split(","):
            path = str(quantised.path(name, ft))
            rec = record(path)
            if a.record:
                save(rec, a.record, f"{name}-{ft}")
            c = compare(Model.from_gguf(path), rec)
            fails += not agrees(c)
            print(f"{name} {ft}: {'agrees' if agrees(c) else 'DISAGREES'} {c}", flush=True)
            results.append(dict(model=name, type=ft, file=rec["file"], sha256=rec["sha256"], agrees=agrees(c), **c))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
