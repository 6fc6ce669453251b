"""Record llama.cpp's tokenizer answers on random / hostile texts for the two real models (needs
llama-cpp-python 0.3.36; run from the repository root):

    python tests/data/tokenizer/record_llama_cpp.py            # writes tests/data/tokenizer/<tag>.jsonl.gz
    python tests/data/tokenizer/record_llama_cpp.py --check    # compares ubatch.Tokenizer, records nothing
    python tests/data/tokenizer/record_llama_cpp.py --check --n 5000 --seed 7   # a longer fuzz run

Texts come from texts.py (seeded); each record has the text (str, or hex bytes for invalid UTF-8 input), the ids of
llama_tokenize in the three modes, and llama_detokenize of the parse_special ids both ways. The first line of each
file is a header with per-vocabulary digests of every token's llama_token_to_piece (special true/false, lstrip 0/1).
"""
from __future__ import annotations

import argparse
import ctypes
import gzip
import hashlib
import io
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
import texts as textgen  # noqa: E402

MODELS = {"gemma3-270m": "gemma3-270m-q4_k_m", "qwen2.5-0.5b": "qwen2.5-coder-0.5b-q4_k_m"}
MODES = {"add1_parse0": (True, False), "add0_parse0": (False, False), "add1_parse1": (True, True)}


class LlamaVocab:
    def __init__(self, path: str) -> None:
        import llama_cpp as L
        self.L = L
        L.llama_backend_init()
        p = L.llama_model_default_params()
        p.vocab_only = True
        self.model = L.llama_model_load_from_file(path.encode(), p)
        if not self.model:
            raise RuntimeError(f"llama.cpp cannot load {path}")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)

    def tokenize(self, data: bytes, add_special: bool, parse_special: bool) -> list:
        cap = 3 * len(data) + 16
        buf = (self.L.llama_token * cap)()
        n = self.L.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            raise RuntimeError("tokenize buffer too small")
        return list(buf[:n])

    def detokenize(self, ids: list, remove_special: bool, unparse_special: bool) -> bytes:
        arr = (self.L.llama_token * max(1, len(ids)))(*ids)
        cap = 16 * len(ids) + 64
        out = ctypes.create_string_buffer(cap)
        n = self.L.llama_detokenize(self.vocab, arr, len(ids), out, cap, remove_special, unparse_special)
        if n < 0:
            cap = -n
            out = ctypes.create_string_buffer(cap)
            n = self.L.llama_detokenize(self.vocab, arr, len(ids), out, cap, remove_special, unparse_special)
        return out.raw[:n]

    def piece(self, t: int, special: bool, lstrip: int) -> bytes:
        out = ctypes.create_string_buffer(256)
        n = self.L.llama_token_to_piece(self.vocab, t, out, 256, lstrip, special)
        if n < 0:
            out = ctypes.create_string_buffer(-n)
            n = self.L.llama_token_to_piece(self.vocab, t, out, -n, lstrip, special)
        return out.raw[:n]

    def special_texts(self) -> list:
        L = self.L
        out = []
        for t in range(self.n_vocab):
            a = L.llama_vocab_get_attr(self.vocab, t)
            if a & (8 | 16 | 1):   # CONTROL | USER_DEFINED | UNKNOWN
                out.append(L.llama_vocab_get_text(self.vocab, t).decode("utf-8", "replace"))
        return out


def piece_digest(piece_fn, n_vocab: int, special: bool, lstrip: int) -> str:
    h = hashlib.sha256()
    for t in range(n_vocab):
        p = piece_fn(t, special, lstrip)
        h.update(len(p).to_bytes(4, "little"))
        h.update(p)
    return h.hexdigest()


def record_one(lv: LlamaVocab, item) -> dict:
    data = item if isinstance(item, bytes) else item.encode("utf-8")
    rec = {"text": item} if isinstance(item, str) else {"hex": item.hex()}
    for mode, (a, p) in MODES.items():
        rec[mode] = lv.tokenize(data, a, p)
    ids = rec["add1_parse1"]
    rec["detok"] = lv.detokenize(ids, False, True).hex()
    rec["detok_strip"] = lv.detokenize(ids, True, False).hex()
    return rec


def record_vocab(path: str, tag: str, n: int, seed: int, check: bool, here: str) -> int:
    """Record (or, with check, compare) one vocabulary; returns the number of differences (check) or 0."""
    lv = LlamaVocab(path)
    items = textgen.make_texts(seed, n, lv.special_texts())
    t0 = time.time()
    header = {"vocab": os.path.basename(path), "tag": tag, "seed": seed, "n_texts": len(items),
              "llama_cpp_python": "0.3.36", "llama_cpp_commit": "0c1e57098", "n_vocab": lv.n_vocab,
              "eot": lv.L.llama_vocab_eot(lv.vocab),
              "pieces_sha256": {f"special{int(s)}_lstrip{l}": piece_digest(lv.piece, lv.n_vocab, s, l)
                                for s in (True, False) for l in (0, 1)}}
    recs = [record_one(lv, it) for it in items]
    print(f"{tag}: {len(recs)} texts recorded from llama.cpp in {time.time() - t0:.1f} s", file=sys.stderr)
    if check:
        from ubatch import Tokenizer
        from tests.tokenizer_vectors import check_record, check_header
        tok = Tokenizer.from_gguf(path)
        problems = check_header(tok, header)
        for k, r in enumerate(recs):
            problems += [f"#{k}: {p}" for p in check_record(tok, r)]
        print(f"{tag}: {len(problems)} differences", file=sys.stderr)
        for p in problems[:20]:
            print("  ", p[:300], file=sys.stderr)
        return len(problems)
    out = os.path.join(here, f"{tag}.jsonl.gz")
    with io.TextIOWrapper(gzip.GzipFile(out, "wb", compresslevel=9, mtime=0), encoding="utf-8") as f:
        f.write(json.dumps(header, ensure_ascii=False) + "\n")
        for r in recs:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    return 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true", help="compare ubatch.Tokenizer instead of recording")
    ap.add_argument("--n", type=int, default=400, help="texts per real model")
    ap.add_argument("--n-mini", type=int, default=250, help="texts per mini vocabulary")
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--only", choices=["real", "mini", "all"], default="all")
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    bad = 0
    if args.only in ("real", "all"):
        from ubatch.model import fetch
        for name, tag in MODELS.items():
            bad += record_vocab(str(fetch.path(name)), tag, args.n, args.seed, args.check, here)
    if args.only in ("mini", "all"):
        for f in sorted(os.listdir(here)):
            if f.startswith("mini-") and f.endswith(".gguf"):
                bad += record_vocab(os.path.join(here, f), f[:-5], args.n_mini, args.seed + 1, args.check, here)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
