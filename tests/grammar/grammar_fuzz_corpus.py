"""A deterministic corpus of random and mutated GBNF grammars (parse.json.gz records, for each, whether
llama.cpp's llama_sampler_init_grammar accepts it; tests/grammar/record_grammar.py --parse)."""
import random

import grammar_cases as C

PIECES = list('root::=|()[]^-"\\*+?{},.<>!#\n axyz0129') + [
    "root ::= ", "x ::= ", "\u00e9", "[a-z]", "\\x41", "\\u00e9", "<[3]>", "!<[5]>", "{2}", "{1,3}", "{2,}", "*",
    "x", " x", "root", "\"ab\"", "[^\\n]", "( ", " )", " | ", "\r\n", "# c\n", "\\", "\\q", "<", ">", "{0,2001}"]


def corpus():
    rng = random.Random(20240601)
    out = []
    for _ in range(300):
        out.append("".join(rng.choice(PIECES) for _ in range(rng.randint(1, 24))))
    sources = [C.gbnf(n) for n in C.FILE_CASES] + [g for g, _ in C.OWN_CASES.values()]
    for _ in range(300):
        t = list(rng.choice(sources))
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(t))
            op = rng.randrange(3)
            c = rng.choice(PIECES)
            if op == 0:
                del t[i]
            elif op == 1:
                t.insert(i, c)
            else:
                t[i] = c
        out.append("".join(t))
    return out
