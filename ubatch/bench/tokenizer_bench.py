"""Tokenizer benchmark: tokens/s of ubatch.Tokenizer on a ~100 kB mixed text (prose, code, numbers, CJK,
Arabic/Cyrillic/Devanagari, emoji, whitespace runs) for both real models, side by side with llama.cpp's
tokenizer through llama-cpp-python when it is installed (same text, same flags; the ids are compared), plus the
vocabulary load time.

    ubatch bench tokenizer [--runs 7] [--kb 100] [--models gemma3-270m,qwen2.5-0.5b] [--json out.json]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import random
import statistics
import sys
import time
from typing import Dict, List, Optional

SNIPPETS = [
    "The committee met on Tuesday to review the quarterly figures. Revenue rose {n}% while costs fell, and "
    "the board's chair said it's \"a result we didn't expect\". Questions? Ask the team.",
    "def {ident}(items: list[int], limit: int = {n}) -> dict:\n    \"\"\"Count items under the limit.\"\"\"\n"
    "    out = {{}}\n    for i, x in enumerate(items):\n        if x < limit:\n            out[i] = x * 2\n"
    "    return out\n",
    "fn {ident}(v: &[u8]) -> Result<u32, String> {{\n\tlet mut acc: u32 = 0;\n\tfor b in v {{ acc = acc"
    ".wrapping_mul(31).wrapping_add(*b as u32); }}\n\tOk(acc)\n}}\n",
    "<table>\n  <tr><td>{n}</td><td>{ident}</td></tr>\n  <tr><td>0x{h}</td><td>{n}.{n}</td></tr>\n</table>\n",
    "SELECT id, name, SUM(total) AS s FROM orders WHERE created >= '2026-0{d}-01' GROUP BY id HAVING s > {n};",
    "東京の天気は晴れです。明日は雨が降るでしょう。我们今天去公园散步，然后吃了晚饭。서울은 오늘 맑습니다。",
    "مرحبا بالعالم، كيف حالك اليوم؟ Привет, мир! Как дела? नमस्ते दुनिया, आप कैसे हैं? שלום עולם",
    "Prices: $1,234.56 — €{n},00 — ¥{n} — 3.14159 — 1e-{d} — ½ + ¼ = ¾ — x² + y² — 12:45:{n}",
    "Emoji: 👩‍💻 👨‍👩‍👧‍👦 👍🏽 🏴‍☠️ 🇯🇵 1️⃣ ❤️ — naïve café résumé Ångström Ελληνικά Tiếng Việt",
    "    indented line\n\n\n\n        deeper   spaced     words\t\ttabbed\r\nwindows line\n",
    "https://example.com/path/{ident}?query={n}&lang=en#section-{d}  user@example.org  C:\\Users\\{ident}",
    "I'm sure you're right, they've said we'll see; she'd know. DON'T SHOUT! It's {n} o'clock.",
]


def mixed_text(kb: int = 100, seed: int = 0) -> str:
    """A deterministic mixed text of about kb * 1000 UTF-8 bytes."""
    rng = random.Random(seed)
    parts: List[str] = []
    size = 0
    while size < kb * 1000:
        s = rng.choice(SNIPPETS).format(n=rng.randint(0, 99999), d=rng.randint(1, 9), h=f"{rng.getrandbits(32):08X}",
                                        ident=rng.choice(["parse_items", "count_under", "hashBytes", "x", "Å_b"]))
        parts.append(s)
        parts.append(rng.choice([" ", "\n", "\n\n", "  "]))
        size += len(s.encode()) + 1
    return "".join(parts)


def _median_time(fn, runs: int) -> float:
    fn()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


_QUIET_LOG = None


class _LlamaCpp:
    """llama.cpp's tokenizer through llama-cpp-python's ctypes API (vocab_only model)."""

    def __init__(self, path: str) -> None:
        import llama_cpp as L
        self.L = L
        global _QUIET_LOG
        if _QUIET_LOG is None:      # kept alive: llama.cpp calls it later
            _QUIET_LOG = L.llama_log_callback(lambda level, text, user: None)
        L.llama_log_set(_QUIET_LOG, ctypes.c_void_p(0))
        L.llama_backend_init()
        t0 = time.perf_counter()
        p = L.llama_model_default_params()
        p.vocab_only = True
        self.model = L.llama_model_load_from_file(path.encode(), p)
        self.load_s = time.perf_counter() - t0
        self.vocab = L.llama_model_get_vocab(self.model)

    def tokenize(self, data: bytes) -> List[int]:
        cap = len(data) + 16
        buf = (self.L.llama_token * cap)()
        n = self.L.llama_tokenize(self.vocab, data, len(data), buf, cap, True, False)
        return list(buf[:n])

    def detokenize(self, ids: List[int]) -> bytes:
        arr = (self.L.llama_token * len(ids))(*ids)
        cap = 8 * len(ids) + 64
        out = ctypes.create_string_buffer(cap)
        n = self.L.llama_detokenize(self.vocab, arr, len(ids), out, cap, False, False)
        return out.raw[:n]

    def close(self) -> None:
        self.L.llama_model_free(self.model)


def bench_model(name: str, text: str, runs: int, with_llama: bool) -> Dict:
    from ubatch import Tokenizer
    from ubatch.model import fetch
    path = str(fetch.path(name))
    load_s = _median_time(lambda: Tokenizer.from_gguf(path), max(3, runs // 2))
    tok = Tokenizer.from_gguf(path)
    ids = tok.encode(text)
    enc_s = _median_time(lambda: tok.encode(text), runs)
    dec_s = _median_time(lambda: tok.decode(ids), runs)
    row = {"model": name, "text_bytes": len(text.encode()), "n_tokens": len(ids), "load_s": load_s,
           "encode_s": enc_s, "encode_tok_s": len(ids) / enc_s, "decode_s": dec_s, "decode_tok_s": len(ids) / dec_s}
    if with_llama:
        lc = _LlamaCpp(path)
        data = text.encode()
        ref = lc.tokenize(data)
        row["llama_identical_ids"] = ref == ids
        row["llama_load_s"] = lc.load_s
        row["llama_encode_s"] = _median_time(lambda: lc.tokenize(data), runs)
        row["llama_encode_tok_s"] = len(ref) / row["llama_encode_s"]
        row["llama_decode_s"] = _median_time(lambda: lc.detokenize(ref), runs)
        row["llama_decode_tok_s"] = len(ref) / row["llama_decode_s"]
        row["encode_ratio"] = row["encode_tok_s"] / row["llama_encode_tok_s"]
        row["decode_ratio"] = row["decode_tok_s"] / row["llama_decode_tok_s"]
        lc.close()
    return row


def table(rows: List[Dict]) -> str:
    out = ["| model | text | tokens | ubatch encode | llama.cpp encode | ratio | ubatch decode | llama.cpp decode "
           "| ratio | vocab load ubatch / llama.cpp | same ids |", "|---" * 11 + "|"]
    for r in rows:
        lam = "llama_encode_tok_s" in r
        f = lambda k: f"{r[k] / 1e6:.2f} M tok/s" if k in r else "–"  # noqa: E731
        out.append(f"| {r['model']} | {r['text_bytes'] / 1000:.0f} kB | {r['n_tokens']} | {f('encode_tok_s')} | "
                   f"{f('llama_encode_tok_s')} | {r['encode_ratio']:.2f}x | {f('decode_tok_s')} | "
                   f"{f('llama_decode_tok_s')} | {r['decode_ratio']:.2f}x | {r['load_s'] * 1000:.0f} ms / "
                   f"{r['llama_load_s'] * 1000:.0f} ms | {'yes' if r['llama_identical_ids'] else 'NO'} |"
                   if lam else
                   f"| {r['model']} | {r['text_bytes'] / 1000:.0f} kB | {r['n_tokens']} | {f('encode_tok_s')} | – | – "
                   f"| {f('decode_tok_s')} | – | – | {r['load_s'] * 1000:.0f} ms / – | – |")
    return "\n".join(out)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="ubatch bench tokenizer", description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7, help="timed runs per measurement (median)")
    ap.add_argument("--kb", type=int, default=100, help="size of the mixed text in kB")
    ap.add_argument("--models", default="gemma3-270m,qwen2.5-0.5b")
    ap.add_argument("--no-llama", action="store_true", help="skip llama-cpp-python even when installed")
    ap.add_argument("--json", default=None, help="write the rows here")
    args = ap.parse_args(argv)
    if args.runs < 1 or args.kb < 1:
        print("ubatch bench tokenizer: --runs and --kb must be >= 1", file=sys.stderr)
        return 2
    with_llama = not args.no_llama
    if with_llama:
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            print("note: llama-cpp-python is not installed: ubatch only", file=sys.stderr)
            with_llama = False
    text = mixed_text(args.kb)
    rows = [bench_model(m, text, args.runs, with_llama) for m in args.models.split(",") if m]
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
