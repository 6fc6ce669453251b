"""The C grammar engine without a model: llama.cpp's parser errors (message and position), matching, partial
UTF-8 across tokens, tokens in grammars, left recursion refused, the trie walk against the per-token check on a
synthetic vocabulary, and fuzzing (random and mutated grammars: an error or a grammar, never a crash or a hang)."""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, strategies as st

from ubatch.grammar import Grammar, GrammarError, GrammarRejected, GrammarVocab

from suite_paths import DATA  # noqa: E402
JSON = open(os.path.join(DATA, "grammar", "gbnf", "json.gbnf"), encoding="utf-8").read()


@pytest.mark.parametrize("text,msg,pos", [
    ('root ::= "a', "unexpected end of input", 11),
    ("root ::= [a-", "unexpected end of input", 12),
    ('root ::= "\\q"', "unknown escape at \\q", 10),
    ('root ::= "\\x4"', "expecting 2 hex chars at 4", 12),
    ("root ::= x{3", "expecting ',' at ", 12),
    ("root ::= x{3,a}", "expecting '}' at a}", 13),
    ("root ::= *", "expecting preceding item to */+/?/{ at ", 10),
    ("root ::= (a", "expecting ')' at ", 11),
    ("root :: a", "expecting ::= at :: a", 5),
    ("root ::= a )", "expecting newline or end at )", 11),
    ("root ::= <[12", "expecting ']' at ", 13),
    ("root ::= <foo>", "no vocab to parse token at <foo>", 9),
    ("root ::= x{2001}", "number of repetitions exceeds sane defaults", 16),
    ("root ::= foo", "Undefined rule identifier 'foo'", -1),
    ("a ::= \"x\"", "grammar does not contain a 'root' symbol", -1),
    ("# only a comment\n", "failed to parse grammar", -1),
    ('root ::= root "a" | "b"', "left recursion detected for nonterminal at index 0", -1),
    ('root ::= a root "x" | "y"\na ::= b\nb ::= "" | "z"', "left recursion (through rules that may be empty)", -1),
])
def test_parse_errors_name_the_position(text, msg, pos):
    with pytest.raises(GrammarError) as e:
        Grammar(text)
    assert msg in e.value.message and e.value.pos == pos


def test_matching_and_elements():
    g = Grammar(JSON)
    s = g.state()
    assert s.matches('{"a": [1, 2.5e3, true, null, "\\u00e9"]}') and not s.matches('{"a" 1}')
    assert Grammar('root ::= "ab"{2,3} [^x-z]').state().matches("ababq")
    assert not Grammar('root ::= "ab"{2,3} [^x-z]').state().matches("ababy")
    assert Grammar("root ::= [\u00e9-\u00ff]+ .").state().matches("\u00e9\u00ff\u65e5")
    assert Grammar('root ::= "a" <[5]> !<[7]>').rule(0)[1:3] == [(8, 5), (9, 7)]
    # symbol ids as llama.cpp gives them: nested groups and repetitions become generated rules
    g = Grammar('root ::= ("a" | "b")+ c\nc ::= "c"?')
    assert g.n_rules == 5 and g.rule(1) == [(3, 97), (1, 0), (3, 98), (0, 0)]


def _vocab(pieces, eog=()):
    bs = [p.encode() if isinstance(p, str) else p for p in pieces]
    off = np.concatenate([[0], np.cumsum([len(b) for b in bs])]).astype(np.int64)
    e = np.zeros(len(bs), np.uint8)
    e[list(eog)] = 1
    return GrammarVocab(b"".join(bs), off, e)


PIECES = ["", "a", "ab", "b", "{", '{"', '"', "\u00e9", b"\xc3", b"\xa9", "\u65e5", b"\xe6", b"\x97\xa5", b"\x97",
          b"\xff", "1", "12", " ", "}", '":', "x\x00y", "<eos>", "\u00e9a", "a\u00e9", ",", "true", "t", "[", "]"]


def test_trie_walk_equals_per_token_check_and_partial_utf8():
    v = _vocab(PIECES, eog=[21])
    for text in (JSON, 'root ::= "a" <[3]> "b" | !<[1]> "x"*', "root ::= [\u00e0-\u00ff]+ \"\u65e5\"",
                 'root ::= ([^a] | "ab")* "}"'):
        g = Grammar(text, v)
        s = g.state()
        rng = np.random.default_rng(0)
        for _ in range(12):
            m = s.mask()
            assert [s.allows(t) for t in range(len(PIECES))] == m.tolist()
            ok = [t for t in np.flatnonzero(m) if t != 21]
            if not ok:
                break
            s.accept(int(rng.choice(ok)))
    # a code point split across two tokens: C3 then A9 (e-acute) is allowed, then matches
    g = Grammar('root ::= "\u00e9" "1"', v)
    s = g.state()
    assert s.allows(8) and not s.allows(9) and not s.allows(14)
    s.accept(8)
    assert s.allows(9) and not s.allows(15)
    s.accept(9)
    assert s.allows(15)
    with pytest.raises(GrammarRejected):
        s.accept(1)
    s.accept(15)
    assert s.can_end and s.allows(21)
    # an empty piece or a piece starting with a NUL is never allowed; a NUL ends a piece
    assert not Grammar("root ::= .*", v).state().allows(0)


def _walk_matches_checks(g, n, steps=10, seed=0):
    s = g.state()
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        m = s.mask()
        assert [s.allows(t) for t in range(n)] == m.tolist()
        ok = np.flatnonzero(m)
        if not ok.size:
            break
        s.accept(int(rng.choice(ok)))


def test_walk_paths_many_classes_and_deep_pieces():
    """The trie walk's paths against the per-token check: the code-point trie (clean UTF-8 state), the byte trie
    (a partial sequence pending, and a vocabulary with a piece too deep for the code-point trie), dense
    per-set transition tables and the hash table of a grammar with more code-point classes than they hold."""
    cjk = [chr(0x4E00 + k) for k in range(2300)]
    pieces = PIECES + cjk + [a + b for a, b in zip(cjk[::7], cjk[3::7])] + [c.encode()[:2] for c in cjk[::11]]
    many = "root ::= [" + "".join(cjk[::2]) + "]+ \"}\""       # 2300 breakpoints: the hash table
    few = 'root ::= ([\u4e00-\u4eff] | [^\u4e10-\u4e20] "a")* "}"'
    even = set(cjk[::2])

    def first_ok(p):                      # an independent answer for `many`'s first token
        b = p.encode() if isinstance(p, str) else p
        if not b or b"\x00" in b[:1]:
            return False
        try:
            return all(c in even for c in b.decode())
        except UnicodeDecodeError:        # a cut 3-byte sequence: allowed iff it may complete into the class
            done = [(b + bytes([x])).decode("utf-8", "ignore") for x in range(0x80, 0xC0)]
            return len(b) == 2 and 0xE0 <= b[0] < 0xF0 and any(c in even for c in done)
    for deep in (False, True):
        v = _vocab(pieces + (["a" * 1100] if deep else []), eog=[21])
        n = len(pieces) + deep
        want = [first_ok(p) and t != 21 for t, p in enumerate(pieces)] + [False] * deep
        assert Grammar(many, v).state().mask().astype(bool).tolist() == want
        for text in (many, few, JSON):
            for seed in range(2):
                _walk_matches_checks(Grammar(text, v), n, seed=seed)


ALPHABET = list('root::=|()[]^-"\\*+?{},.<>!#\n axyz0129') + ["root ::= ", "\u00e9", "[a-z]", "\\x41", "<[3]>"]


@given(st.lists(st.sampled_from(ALPHABET), max_size=40))
def test_fuzz_random_grammars_never_crash(parts):
    text = "".join(parts)
    v = _vocab(PIECES, eog=[21])
    try:
        g = Grammar(text, v)
    except GrammarError as e:
        assert e.message
        return
    s = g.state()
    for _ in range(4):
        m = s.mask()
        ok = np.flatnonzero(m)
        if ok.size == 0:
            break
        try:
            s.accept(int(ok[-1]))
        except GrammarRejected:
            break


@given(st.integers(0, 10**6), st.integers(0, 3))
def test_fuzz_mutated_grammar_files(seed, n_mut):
    rng = np.random.default_rng(seed)
    text = list(JSON)
    for _ in range(n_mut + 1):
        i = int(rng.integers(0, len(text)))
        op = int(rng.integers(0, 3))
        c = ALPHABET[int(rng.integers(0, len(ALPHABET)))]
        if op == 0:
            del text[i]
        elif op == 1:
            text.insert(i, c)
        else:
            text[i] = c
    try:
        g = Grammar("".join(text), _vocab(PIECES))
    except GrammarError:
        return
    g.state().mask()


@pytest.mark.realmodel
def test_fuzz_corpus_errors_where_llama_cpp_errors():
    """600 random and mutated grammars (tests/grammar/grammar_fuzz_corpus.py): ubatch refuses exactly those
    llama.cpp's llama_sampler_init_grammar refuses (recorded, tests/data/grammar/parse.json.gz)."""
    import gzip
    import json
    from ubatch import Tokenizer
    from ubatch.model import fetch
    with gzip.open(os.path.join(DATA, "grammar", "parse.json.gz"), "rt") as f:
        rows = json.load(f)["rows"]
    v = GrammarVocab.of(Tokenizer.from_gguf(fetch.path("gemma3-270m")))
    bad = []
    for r in rows:
        try:
            Grammar(r["text"], v)
            ok = True
        except GrammarError:
            ok = False
        if ok != r["ok"]:
            bad.append((r["text"], r["ok"]))
    assert len(rows) >= 500 and not bad, bad[:5]
