"""The allowed token sets of ubatch's grammar engine against llama.cpp's grammar sampler, recorded with
llama-cpp-python 0.3.36 by tests/grammar/record_grammar.py (tests/data/grammar/allowed_<model>.json.gz): every grammar
of llama.cpp's grammars/ folder, grammars for the engine's corners (UTF-8 split across tokens, tokens in
grammars, repetitions, negated classes) and GBNF made from JSON schemas, after each prefix of valid strings and
along random walks, on both real vocabularies. Identical sets (size and sha256 of the sorted ids) required."""
from __future__ import annotations

import gzip
import hashlib
import json
import os

import numpy as np
import pytest

import grammar_cases as C

pytestmark = pytest.mark.realmodel
from suite_paths import DATA  # noqa: E402


def _digest(ids):
    return hashlib.sha256(np.ascontiguousarray(ids, dtype="<i4").tobytes()).hexdigest()[:24]


@pytest.fixture(scope="module", params=["gemma3-270m", "qwen2.5-0.5b"])
def rec(request):
    from ubatch import Tokenizer
    from ubatch.grammar import GrammarVocab
    from ubatch.model import fetch
    with gzip.open(os.path.join(DATA, "grammar", f"allowed_{request.param}.json.gz"), "rt") as f:
        data = json.load(f)
    tok = Tokenizer.from_gguf(fetch.path(request.param))
    assert tok.n_vocab == data["n_vocab"] and sorted(tok.eog_ids) == data["eog"]
    return data, GrammarVocab.of(tok)


def _check_run(g, run, where):
    from ubatch.grammar import GrammarRejected
    s = g.state()
    sets = run["sets"]
    for i, want in enumerate(sets):
        got = s.allowed()
        if len(got) != want["n"] or _digest(got) != want["h"]:
            extra = ""
            if "ids" in want:
                extra = f" missing {sorted(set(want['ids']) - set(got.tolist()))[:10]} " \
                        f"extra {sorted(set(got.tolist()) - set(want['ids']))[:10]}"
            raise AssertionError(f"{where} step {i}: {len(got)} allowed, llama.cpp {want['n']}{extra}")
        # the single-token check and the candidate-array path agree with the full mask
        if i < len(run["tokens"]):
            t = run["tokens"][i]
            assert s.allows(t), f"{where} step {i}: token {t}"
            s.accept(t)
    assert len(sets) >= len(run["tokens"])


def test_allowed_sets_identical(rec):
    from ubatch.grammar import Grammar
    data, vocab = rec
    n_sets = 0
    for name, case in data["cases"].items():
        text = C.gbnf(case["gbnf"][1:]) if case["gbnf"].startswith("@") else case["gbnf"]
        g = Grammar(text, vocab)
        for k, run in enumerate(case["runs"]):
            _check_run(g, run, f"{data['model']} {name} run {k}")
            n_sets += len(run["sets"])
    assert n_sets > 500


def test_candidate_arrays_match_the_mask(rec):
    """llama_sampler_apply on a shuffled subset of the vocabulary (the per-token path) and on the whole
    vocabulary in a random order give the mask's answer for each candidate."""
    from ubatch.grammar import Grammar
    data, vocab = rec
    rng = np.random.default_rng(5)
    td = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
    for name in ("file:json", "own:utf8", "tok:tokens_id", "file:japanese"):
        case = data["cases"][name]
        text = C.gbnf(case["gbnf"][1:]) if case["gbnf"].startswith("@") else case["gbnf"]
        g = Grammar(text, vocab)
        s = g.state()
        for t in case["runs"][-1]["tokens"][:8]:
            m = s.mask()
            for n in (300, vocab.n_vocab):
                ids = rng.permutation(vocab.n_vocab)[:n].astype(np.int32)
                arr = np.zeros(n, td)
                arr["id"] = ids
                s.clone().apply_td(arr.ctypes.data, n)
                assert np.array_equal(np.isfinite(arr["logit"]), m[ids]), (name, n)
            s.accept(t)
