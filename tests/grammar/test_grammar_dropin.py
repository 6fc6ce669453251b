"""ubatch.llama_cpp's grammar surface: LlamaGrammar, llama_sampler_init_grammar(_lazy/_lazy_patterns) in a
sampler chain (NULL for a grammar llama.cpp rejects, any candidate array), grammar= and response_format in
create_completion / create_chat_completion, against the converter recordings of llama-cpp-python 0.3.36."""
from __future__ import annotations

import ctypes
import gzip
import json
import os

import numpy as np
import pytest

from suite_paths import DATA  # noqa: E402


def test_converter_text_identical_to_llama_cpp_python():
    from ubatch.llama_cpp.llama_grammar import json_schema_to_gbnf
    with gzip.open(os.path.join(DATA, "grammar", "converter.json.gz"), "rt") as f:
        rec = json.load(f)
    n = 0
    for name, want in rec["gbnf"].items():
        schema = rec["schemas"][name]
        if name.startswith("BROKEN_"):      # llama-cpp-python's text is broken there: see below
            continue
        assert json_schema_to_gbnf(json.dumps(schema)) == want, name
        n += 1
    assert n >= 28


def test_converter_where_llama_cpp_python_is_broken():
    """Its text fails to parse (regex escapes in literals, a quote in a property name), matches other strings
    (backslashes of enum values) or it raises (a root $ref with references inside): ours parses and matches
    exactly the JSON the schema means."""
    from ubatch.grammar import Grammar, GrammarError
    from ubatch.llama_cpp.llama_grammar import json_schema_to_gbnf
    with gzip.open(os.path.join(DATA, "grammar", "converter.json.gz"), "rt") as f:
        rec = json.load(f)
    theirs, schemas = rec["gbnf"], rec["schemas"]
    ours = {k: Grammar(json_schema_to_gbnf(schemas[k])) for k in theirs if k.startswith("BROKEN_")}
    for k in ("BROKEN_regex_escape", "BROKEN_quote_in_name"):
        with pytest.raises(GrammarError):
            Grammar(theirs[k])
    assert ours["BROKEN_regex_escape"].state().matches('"123.ab_9"')
    assert not ours["BROKEN_regex_escape"].state().matches('"12a.ab"')
    assert ours["BROKEN_quote_in_name"].state().matches(json.dumps({'a"b': 5}))
    assert ours["BROKEN_backslash_enum"].state().matches(json.dumps("a\\b"))
    assert ours["BROKEN_backslash_enum"].state().matches(json.dumps("line\nbreak"))
    assert Grammar(theirs["BROKEN_backslash_enum"]).state().matches('"line\nbreak"')   # a raw newline: not JSON
    assert not ours["BROKEN_backslash_enum"].state().matches('"line\nbreak"')
    assert "KeyError" in theirs["BROKEN_root_ref"]["error"]
    assert ours["BROKEN_root_ref"].state().matches('{"c": {"c": {}}}')


def test_llama_grammar_checks_the_text():
    from ubatch.grammar import GrammarError
    from ubatch.llama_cpp.llama_grammar import JSON_GBNF, LlamaGrammar
    g = LlamaGrammar.from_string(JSON_GBNF)
    assert g._root == "root" and g._grammar == JSON_GBNF
    with pytest.raises(GrammarError, match=r"line 2, column 11.*expecting newline or end at \)"):
        LlamaGrammar.from_string('root ::= x\nx ::= "a" )')
    with pytest.raises(ValueError, match="params_grammer is empty"):
        p = os.path.join(DATA, "grammar", "gbnf", "json.gbnf")
        LlamaGrammar.from_file(p)._grammar and LlamaGrammar.from_file(os.devnull)
    s = LlamaGrammar.from_json_schema(json.dumps({"type": "integer"}))
    assert "integral-part" in s._grammar


@pytest.mark.realmodel
def test_sampler_chain_and_completions():
    import ubatch.llama_cpp as L
    from ubatch.model import fetch
    llm = L.Llama(str(fetch.path("gemma3-270m")), n_ctx=512, verbose=False)
    vocab = L.llama_model_get_vocab(llm.model)
    assert not L.llama_sampler_init_grammar(vocab, b'root ::= "a', b"root")        # NULL, as llama.cpp
    assert not L.llama_sampler_init_grammar(vocab, b'root ::= root "a"', b"root")  # left recursion
    smpl = L.llama_sampler_init_grammar(vocab, b'root ::= "yes" | "no"', b"root")
    chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    L.llama_sampler_chain_add(chain, smpl)
    n = L.llama_vocab_n_tokens(vocab)
    ids = np.random.default_rng(1).permutation(n)[:500].astype(np.int32)
    arr = (L.llama_token_data * 500)()
    view = np.frombuffer(arr, dtype=[("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
    view["id"] = ids
    cur = L.llama_token_data_array(data=arr, size=500, selected=-1, sorted=False)
    L.llama_sampler_apply(chain, ctypes.byref(cur))
    ok = ids[np.isfinite(view["logit"])]
    for t in ok.tolist():
        piece = llm.detokenize([t]).decode("utf-8", "replace")
        assert "yes".startswith(piece) or "no".startswith(piece), piece
    L.llama_sampler_free(chain)

    llm.eval(llm.tokenize(b"The answer is"))
    t = llm.sample(temp=0.0, grammar=L.LlamaGrammar.from_string('root ::= " maybe"'))
    piece = llm.detokenize([t]).decode()
    assert piece and " maybe".startswith(piece)
    llm.reset()
    out = llm.create_completion("Is the sky blue? Answer:", max_tokens=6, temperature=0,
                                grammar=L.LlamaGrammar.from_string('root ::= " " ("yes" | "no")'))
    assert out["choices"][0]["text"] in (" yes", " no")
    chat = llm.create_chat_completion([{"role": "user", "content": "Give me a JSON object with a key a."}],
                                      response_format={"type": "json_object",
                                                       "schema": {"type": "object", "properties": {
                                                           "a": {"type": "integer"}}, "required": ["a"]}},
                                      max_tokens=40, temperature=0)
    obj = json.loads(chat["choices"][0]["message"]["content"])
    assert isinstance(obj["a"], int)


@pytest.mark.realmodel
def test_lazy_grammar_waits_for_its_trigger():
    import ubatch.llama_cpp as L
    from ubatch.model import fetch
    llm = L.Llama(str(fetch.path("gemma3-270m")), n_ctx=256, verbose=False)
    vocab = L.llama_model_get_vocab(llm.model)
    words = (ctypes.c_char_p * 1)(b"CALL")
    smpl = L.llama_sampler_init_grammar_lazy(vocab, b'root ::= "CALL(" [0-9]+ ")"', b"root", words, 1, None, 0)
    n = L.llama_vocab_n_tokens(vocab)
    arr = (L.llama_token_data * n)()
    view = np.frombuffer(arr, dtype=[("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])

    def allowed():
        view["id"] = np.arange(n)
        view["logit"] = 0
        L.llama_sampler_apply(smpl, ctypes.byref(L.llama_token_data_array(data=arr, size=n, selected=-1,
                                                                           sorted=False)))
        return int(np.isfinite(view["logit"]).sum())

    assert allowed() == n                       # awaiting the trigger: unconstrained
    for t in llm.tokenize(b"hello CALL(", add_bos=False):
        L.llama_sampler_accept(smpl, t)
    a = allowed()
    assert 0 < a < 100                          # triggered: "CALL(" replayed, digits only now
    L.llama_sampler_free(smpl)
