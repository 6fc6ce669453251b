"""Grammar benchmark: one application of a grammar to the whole vocabulary (a llama_token_data array of every
token, id order), ubatch's engine beside llama.cpp's grammar sampler (llama-cpp-python 0.3.36,
llama_sampler_apply), on both real vocabularies, for llama.cpp's json.gbnf / c.gbnf / japanese.gbnf and a JSON
schema's grammar, at the positions reached along a valid text. The two are timed alternately at each position
(paired: the machine is shared), the ratio is the median of the per-pair ratios. ubatch is timed twice:
`walk` = every apply walks the vocabulary trie (the per-state allowed-set cache off; transitions cached as in
use), `cached` = the allowed set of a state seen before (what a generation reaching the same state again, or
another sequence with the same grammar, pays).

    ubatch bench grammar [--reps 5] [--models gemma3-270m,qwen2.5-0.5b] [--json out.json]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time
from typing import Dict, List

import numpy as np

TD = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                           "tags": {"type": "array", "items": {"type": "string"}}},
          "required": ["name", "age"]}
TEXTS = {
    "json": '{"name": "Ada Lovelace", "born": 1815, "fields": ["math", "computing"], "note": "first \\u00e9"}',
    "c": "int main(){int x = 3;while(x<10){x = x+1;}return x;}",
    "japanese": "こんにちは 世界 カタカナ、ひらがな",
    "schema": '{"name": "Ada", "age": 36, "tags": ["math", "engines"]}',
}


def _grammar_texts() -> Dict[str, str]:
    from ubatch.grammar.schema import json_schema_to_gbnf
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.join(os.path.dirname(os.path.dirname(here)), "tests", "data", "grammar", "gbnf")
    out = {}
    for name in ("json", "c", "japanese"):
        p = os.path.join(root, name + ".gbnf")
        if os.path.exists(p):
            out[name] = open(p, encoding="utf-8").read()
    if "json" not in out:
        from ubatch.llama_cpp.llama_grammar import JSON_GBNF
        out["json"] = JSON_GBNF
    out["schema"] = json_schema_to_gbnf(SCHEMA)
    return out


def bench_model(model: str, reps: int, max_pos: int) -> List[dict]:
    import llama_cpp as L
    from ubatch import Tokenizer
    from ubatch.grammar import Grammar, GrammarVocab
    from ubatch.model import fetch
    path = str(fetch.path(model))
    mp = L.llama_model_default_params()
    mp.vocab_only = True
    lm = L.llama_model_load_from_file(path.encode(), mp)
    lv = L.llama_model_get_vocab(lm)
    n = L.llama_vocab_n_tokens(lv)
    tok = Tokenizer.from_gguf(path)
    gv = GrammarVocab.of(tok)
    arr = (L.llama_token_data * n)()
    view = np.frombuffer(arr, dtype=TD)
    ids = np.arange(n, dtype=np.int32)

    def fresh():
        view["id"] = ids
        view["logit"] = 0.0
        view["p"] = 0.0
        return L.llama_token_data_array(data=arr, size=n, selected=-1, sorted=False)

    rows = []
    for gname, gtext in _grammar_texts().items():
        text = TEXTS[gname]
        toks = tok.encode(text, add_special=False)
        smpl = L.llama_sampler_init_grammar(lv, gtext.encode(), b"root")
        g = Grammar(gtext, gv)
        st = g.state()
        t_first = None
        per_pos = []
        for i, t in enumerate(toks[:max_pos]):
            lc, walk, cached, r_walk, r_cached = [], [], [], [], []
            for r in range(reps):
                cur = fresh()
                t0 = time.perf_counter()
                L.llama_sampler_apply(smpl, ctypes.byref(cur))
                a = time.perf_counter() - t0
                ref = np.isfinite(view["logit"]).copy()
                g.set_mask_cache(False)
                fresh()
                t0 = time.perf_counter()
                st.apply_td(ctypes.addressof(arr), n)
                b = time.perf_counter() - t0
                if r == 0 and not np.array_equal(np.isfinite(view["logit"]), ref):
                    raise SystemExit(f"{model} {gname} position {i}: allowed sets differ")
                g.set_mask_cache(True)
                fresh()
                st.apply_td(ctypes.addressof(arr), n)          # fills the cache
                fresh()
                t0 = time.perf_counter()
                st.apply_td(ctypes.addressof(arr), n)
                c = time.perf_counter() - t0
                lc.append(a); walk.append(b); cached.append(c)
                r_walk.append(b / a); r_cached.append(c / a)
            per_pos.append((statistics.median(lc), statistics.median(walk), statistics.median(cached),
                            statistics.median(r_walk), statistics.median(r_cached)))
            L.llama_sampler_accept(smpl, t)
            st.accept(t)
        L.llama_sampler_free(smpl)
        # a fresh grammar's first apply (nothing cached: stacks, transitions and trie walk from scratch)
        g2 = Grammar(gtext, gv)
        s2 = g2.state()
        t0 = time.perf_counter()
        fresh()
        s2.apply_td(ctypes.addressof(arr), n)
        t_first = time.perf_counter() - t0
        m = np.array(per_pos)
        rows.append({"model": model, "grammar": gname, "n_vocab": n, "positions": len(per_pos),
                     "llama_cpp_ms": float(np.median(m[:, 0]) * 1e3), "walk_ms": float(np.median(m[:, 1]) * 1e3),
                     "cached_ms": float(np.median(m[:, 2]) * 1e3), "ratio_walk": float(np.median(m[:, 3])),
                     "ratio_cached": float(np.median(m[:, 4])), "ratio_walk_max": float(np.max(m[:, 3])),
                     "first_apply_ms": t_first * 1e3})
    L.llama_model_free(lm)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="ubatch bench grammar", description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--positions", type=int, default=12, help="positions along each text (its first tokens)")
    ap.add_argument("--models", default="gemma3-270m,qwen2.5-0.5b")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        print("ubatch bench grammar: needs llama-cpp-python (the comparison is the point)", file=sys.stderr)
        return 2
    rows = []
    for m in a.models.split(","):
        rows += bench_model(m.strip(), a.reps, a.positions)
    print(f"{'model':14} {'grammar':9} {'llama.cpp ms':>12} {'walk ms':>8} {'walk/lc':>8} {'max':>6} "
          f"{'cached ms':>9} {'cached/lc':>9} {'first ms':>8}")
    for r in rows:
        print(f"{r['model']:14} {r['grammar']:9} {r['llama_cpp_ms']:12.2f} {r['walk_ms']:8.2f} {r['ratio_walk']:8.3f} "
              f"{r['ratio_walk_max']:6.3f} {r['cached_ms']:9.3f} {r['ratio_cached']:9.4f} {r['first_apply_ms']:8.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": _cpu(), "rows": rows}, f, indent=1)
    return 0


def _cpu() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


if __name__ == "__main__":
    sys.exit(main())
