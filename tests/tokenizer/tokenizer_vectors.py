"""Checks shared by the tokenizer tests and tests/data/tokenizer/record_llama_cpp.py: one recorded llama.cpp
answer against ubatch.Tokenizer; each returns a list of differences (empty = identical)."""
from __future__ import annotations

import hashlib
from typing import List

MODES = {"add1_parse0": (True, False), "add0_parse0": (False, False), "add1_parse1": (True, True)}


def record_input(rec: dict):
    return rec["text"] if "text" in rec else bytes.fromhex(rec["hex"])


def check_record(tok, rec: dict) -> List[str]:
    text = record_input(rec)
    out = []
    for mode, (a, p) in MODES.items():
        got = tok.encode(text, add_special=a, parse_special=p, strict_utf8=False)
        if got != rec[mode]:
            k = next((i for i, (x, y) in enumerate(zip(got, rec[mode])) if x != y), min(len(got), len(rec[mode])))
            out.append(f"{mode} {text!r}: first difference at {k}: ours {got[k:k + 6]} llama.cpp {rec[mode][k:k + 6]}")
    ids = rec["add1_parse1"]
    if tok.decode_bytes(ids, remove_special=False, unparse_special=True).hex() != rec["detok"]:
        out.append(f"detok {text!r}")
    if tok.decode_bytes(ids, remove_special=True, unparse_special=False).hex() != rec["detok_strip"]:
        out.append(f"detok_strip {text!r}")
    return out


def pieces_digest(tok, special: bool, lstrip: int) -> str:
    h = hashlib.sha256()
    for t in range(tok.n_vocab):
        p = tok.token_to_piece(t, special=special, lstrip=lstrip)
        h.update(len(p).to_bytes(4, "little"))
        h.update(p)
    return h.hexdigest()


def check_header(tok, header: dict) -> List[str]:
    out = []
    if tok.n_vocab != header["n_vocab"]:
        out.append(f"n_vocab {tok.n_vocab} != {header['n_vocab']}")
    if tok.eot != header["eot"]:
        out.append(f"eot {tok.eot} != {header['eot']}")
    for key, want in header["pieces_sha256"].items():
        special = key.startswith("special1")
        lstrip = int(key[-1])
        if pieces_digest(tok, special, lstrip) != want:
            out.append(f"token_to_piece digest {key} differs")
    return out
