"""Records llama.cpp's grammar sampler with llama-cpp-python 0.3.36 (python tests/grammar/record_grammar.py):

* allowed_<model>.json.gz: for every case of tests/grammar/grammar_cases.py and both test models, the tokens
  llama_sampler_apply (grammar sampler on the full vocabulary, id order) leaves allowed after each prefix of
  the valid strings (tokenized by llama.cpp, add_special=False) and along seeded random walks (each step a
  random allowed non-EOG token); each set stored as its size and the sha256 of its sorted int32 ids, the
  small ones (< 64 ids) also as the ids.
* converter.json.gz: llama_grammar.json_schema_to_gbnf's text for each schema of grammar_cases.SCHEMAS and the
  schemas of grammar_cases.CONVERTER_ONLY.
  (python tests/grammar/record_grammar.py --converter re-records only this file)
* parse.json.gz (--parse): whether llama_sampler_init_grammar accepts each grammar of tests/grammar/grammar_fuzz_corpus.py.
Needs llama-cpp-python 0.3.36 and the two models (ubatch.model.fetch)."""
import ctypes
import gzip
import hashlib
import json
import os
import random
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grammar_cases as C  # noqa: E402

import llama_cpp as L  # noqa: E402
from llama_cpp import llama_grammar as LG  # noqa: E402

OUT = os.path.join(C.DATA, "grammar")
TD = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])


def digest(ids: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(ids, dtype="<i4").tobytes()).hexdigest()[:24]


class Vocab:
    def __init__(self, path):
        mp = L.llama_model_default_params()
        mp.vocab_only = True
        self.model = L.llama_model_load_from_file(path.encode(), mp)
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n = L.llama_vocab_n_tokens(self.vocab)
        self.arr = (L.llama_token_data * self.n)()
        self.view = np.frombuffer(self.arr, dtype=TD)
        self.eog = {t for t in range(self.n) if L.llama_vocab_is_eog(self.vocab, t)}

    def tokenize(self, text, special=False):
        b = text.encode()
        buf = (L.llama_token * (len(b) + 8))()
        n = L.llama_tokenize(self.vocab, b, len(b), buf, len(b) + 8, False, special)
        return list(buf[:n])

    def allowed(self, smpl):
        self.view["id"] = np.arange(self.n)
        self.view["logit"] = 0.0
        self.view["p"] = 0.0
        cur = L.llama_token_data_array(data=self.arr, size=self.n, selected=-1, sorted=False)
        L.llama_sampler_apply(smpl, ctypes.byref(cur))
        return np.flatnonzero(np.isfinite(self.view["logit"])).astype(np.int32)


def rec_set(ids):
    r = {"n": int(len(ids)), "h": digest(ids)}
    if len(ids) < 64:
        r["ids"] = ids.tolist()
    return r


def record_case(v, gbnf, strings, seed, n_walks=3, walk_len=24, ours=None):
    smpl0 = L.llama_sampler_init_grammar(v.vocab, gbnf.encode(), b"root")
    if not smpl0:
        raise SystemExit(f"llama.cpp rejected a case grammar:\n{gbnf}")
    L.llama_sampler_free(smpl0)
    runs = []
    for s in strings or []:
        toks = v.tokenize(s, special=ours is not None)
        smpl = L.llama_sampler_init_grammar(v.vocab, gbnf.encode(), b"root")
        sets = []
        for t in toks + [None]:
            a = v.allowed(smpl)
            sets.append(rec_set(a))
            if t is None:
                break
            if t not in set(a.tolist()):
                raise SystemExit(f"string {s!r}: token {t} not allowed by llama.cpp")
            L.llama_sampler_accept(smpl, t)
        L.llama_sampler_free(smpl)
        runs.append({"text": s, "tokens": toks, "sets": sets})
    rng = random.Random(seed)
    for w in range(n_walks):
        smpl = L.llama_sampler_init_grammar(v.vocab, gbnf.encode(), b"root")
        # llama.cpp aborts when it accepts a token its apply allowed through a token element in the middle of
        # the token (accept drops such stacks): the walk only takes tokens ubatch's engine can accept too
        mine = ours(gbnf).state() if ours else None
        toks, sets = [], []
        for _ in range(walk_len):
            a = v.allowed(smpl)
            sets.append(rec_set(a))
            cand = [int(t) for t in a if int(t) not in v.eog]
            rng.shuffle(cand)
            t = None
            for c in cand:
                if mine is None:
                    t = c
                    break
                try:
                    mine.accept(c)
                    t = c
                    break
                except ValueError:
                    pass
            if t is None:
                break
            toks.append(t)
            L.llama_sampler_accept(smpl, t)
        else:
            sets.append(rec_set(v.allowed(smpl)))
        L.llama_sampler_free(smpl)
        runs.append({"walk": w, "tokens": toks, "sets": sets})
    return runs


def record_converter():
    conv = {k: LG.json_schema_to_gbnf(json.dumps(s)) for k, (s, _) in C.SCHEMAS.items()}
    for k, s in C.CONVERTER_ONLY.items():
        try:
            conv[k] = LG.json_schema_to_gbnf(json.dumps(s))
        except Exception as e:  # noqa: BLE001 - recorded: the converter's own failure
            conv[k] = {"error": type(e).__name__ + ": " + str(e)}
    with gzip.open(os.path.join(OUT, "converter.json.gz"), "wt") as f:
        json.dump({"schemas": {k: (C.SCHEMAS[k][0] if k in C.SCHEMAS else C.CONVERTER_ONLY[k]) for k in conv},
                   "gbnf": conv}, f)


def main():
    from ubatch.model import fetch
    schema_gbnf = {k: LG.json_schema_to_gbnf(json.dumps(s)) for k, (s, _) in C.SCHEMAS.items()}
    for model in ("gemma3-270m", "qwen2.5-0.5b"):
        v = Vocab(str(fetch.path(model)))
        cases = {}
        seed = 0
        for name, strings in C.FILE_CASES.items():
            cases["file:" + name] = {"gbnf": "@" + name, "runs": record_case(v, C.gbnf(name), strings, seed)}
            seed += 1
        for name, (g, strings) in C.OWN_CASES.items():
            cases["own:" + name] = {"gbnf": g, "runs": record_case(v, g, strings, seed)}
            seed += 1
        from ubatch.grammar import Grammar, GrammarVocab
        from ubatch.tokenizer import Tokenizer
        gv = GrammarVocab.of(Tokenizer.from_gguf(str(fetch.path(model))))
        for name, (g, strings) in C.TOKEN_CASES[model].items():
            cases["tok:" + name] = {"gbnf": g, "runs": record_case(v, g, strings, seed, n_walks=6,
                                                                     ours=lambda t: Grammar(t, gv))}
            seed += 1
        for name, (s, inst) in C.SCHEMAS.items():
            cases["schema:" + name] = {"gbnf": schema_gbnf[name], "runs": record_case(v, schema_gbnf[name], inst, seed)}
            seed += 1
        with gzip.open(os.path.join(OUT, f"allowed_{model}.json.gz"), "wt") as f:
            json.dump({"model": model, "n_vocab": v.n, "eog": sorted(v.eog), "cases": cases}, f)
        print(model, "done", file=sys.stderr)
    record_converter()


def record_parse():
    """parse.json.gz: llama.cpp's verdict on each grammar of grammar_fuzz_corpus (grammars ubatch refuses for
    left recursion through empty rules are skipped: llama.cpp expands their stacks forever)."""
    import grammar_fuzz_corpus as F
    from ubatch.grammar import Grammar, GrammarError, GrammarVocab
    from ubatch.model import fetch
    from ubatch.tokenizer import Tokenizer
    path = str(fetch.path("gemma3-270m"))
    v = Vocab(path)
    gv = GrammarVocab.of(Tokenizer.from_gguf(path))
    rows = []
    for text in F.corpus():
        try:
            Grammar(text, gv)
        except GrammarError as e:
            if "through rules that may be empty" in e.message:
                continue
        smpl = L.llama_sampler_init_grammar(v.vocab, text.encode(), b"root")
        rows.append({"text": text, "ok": bool(smpl)})
        if smpl:
            L.llama_sampler_free(smpl)
    with gzip.open(os.path.join(OUT, "parse.json.gz"), "wt") as f:
        json.dump({"model": "gemma3-270m", "rows": rows}, f)


if __name__ == "__main__":
    if "--parse" in sys.argv:
        record_parse()
    elif "--converter" in sys.argv:
        record_converter()
    else:
        main()
