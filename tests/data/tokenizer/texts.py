"""Seeded generator of random and hostile tokenizer inputs (used by record_llama_cpp.py; the recorded texts are
stored in the .jsonl.gz files, so tests do not depend on this generator staying the same)."""
from __future__ import annotations

import random
from typing import List, Union

WORDS = ["the", "The", "THE", "hello", "world", "Hello", "naïve", "café", "don't", "I'm", "you're", "they've",
         "we'll", "she'd", "it's", "IT'S", "DON'T", "'s", "'S", "'re", "'Re", "'ll", "'LL", "'t", "'d", "'m", "x'",
         "def", "return", "print(", "self.", "__init__", "0x1F", "3.14159", "1,000,000", "2026-12-01", "$100",
         "€5", "½", "²", "١٢٣", "१२३", "ⅷ", "URL:", "https://example.com/a?b=c&d=e#f", "a_b_c", "CamelCase",
         "snake_case_identifier", "<s>", "</s>", "<b>", "</b>", "<table>", "<unk>", "<pad>", "<mask>", "[PAD151650]",
         "<0x41>", "<0xZZ>", "▁", "▁▁hello", "Ġ", "Ċ", "ĠĠ", "<|im_start|", "<|IM_START|>", "<end_of_turn",
         "< start_of_turn >", "<unused0>", "<unused6241>", "[multimodal]", "<start_of_image>"]
RANGES = [(0x20, 0x7E), (0xA0, 0xFF), (0x100, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x5FF),
          (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x3040, 0x30FF), (0x4E00, 0x9FFF),
          (0xAC00, 0xD7A3), (0x1F300, 0x1FAFF), (0x300, 0x36F), (0x2000, 0x206F), (0x2FF0, 0x2FFF),
          (0xFF00, 0xFFEF), (0x1D400, 0x1D7FF), (0x10D40, 0x10D8F), (0x1CC00, 0x1CEBF), (0x2EBF0, 0x2EE5F),
          (0x31350, 0x323AF), (0xE000, 0xF8FF), (0xF0000, 0xF00FF), (0x0, 0x1F), (0x7F, 0x9F), (0xFE00, 0xFE0F),
          (0xE0000, 0xE007F), (0x1, 0x10FFFF)]
SPACES = [" ", "  ", "   ", "    ", " " * 9, " " * 33, "\t", "\t\t", "\n", "\n\n", "\n" * 5, "\n" * 40, "\r\n",
          "\r", " \n", "\n ", " \t\n", "\u00a0", "\u2003", "\u2009", "\u202f", "\u3000", "\u0085", "\u2028",
          "\u1680", "\x0b", "\x0c", "\u200b", "\u200d", "\ufeff", "\u180e", "\u205f"]
EMOJI = ["👩‍💻", "👨‍👩‍👧‍👦", "👍🏽", "🏴‍☠️", "🇯🇵🇺🇸", "1️⃣", "❤️", "🙂", "🤦🏼‍♂️"]


def _cp(rng: random.Random) -> str:
    lo, hi = rng.choice(RANGES)
    while True:
        c = rng.randint(lo, hi)
        if not 0xD800 <= c <= 0xDFFF:
            return chr(c)


def _piece(rng: random.Random, specials: List[str]) -> str:
    r = rng.random()
    if r < 0.30:
        return rng.choice(WORDS)
    if r < 0.45:
        return rng.choice(SPACES)
    if r < 0.65:
        return "".join(_cp(rng) for _ in range(rng.randint(1, 6)))
    if r < 0.72:
        return rng.choice(EMOJI)
    if r < 0.80 and specials:
        s = rng.choice(specials)
        if rng.random() < 0.2:
            s = s[: rng.randint(1, max(1, len(s) - 1))]
        return s
    if r < 0.85:
        return str(rng.randint(0, 10 ** rng.randint(1, 12)))
    if r < 0.90:
        return rng.choice("!?.,;:'\"()[]{}<>/\\|`~@#$%^&*-_+=") * rng.randint(1, 4)
    if r < 0.95:
        return rng.choice(["a", "b", "ab", "ba", "aba", "x"]) * rng.randint(2, 60)
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 8)))


def _bad_bytes(rng: random.Random, text: str) -> bytes:
    b = bytearray(text.encode("utf-8"))
    for _ in range(rng.randint(1, 4)):
        bad = rng.choice([b"\x80", b"\xbf", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xc0\x80", b"\xed\xa0\x80",
                          b"\xff", b"\xfe", b"\xf8\x88\x80\x80\x80", bytes([rng.randint(0x80, 0xBF)]),
                          bytes([rng.randint(0xC2, 0xF4)])])
        k = rng.randint(0, len(b))
        b[k:k] = bad
    return bytes(b)


def beyond_unicode(b: bytes) -> bool:
    """llama.cpp's decoder reads F0-F7 + 3 continuation bytes as one code point, up to 0x1FFFFF, and then throws
    (uncaught: the process aborts) when re-encoding one above U+10FFFF; such inputs are not recorded."""
    i = 0
    while i < len(b):
        c = b[i]
        if 0xF0 <= c <= 0xF7 and i + 3 < len(b) and all(0x80 <= x <= 0xBF for x in b[i + 1:i + 4]):
            if ((c & 7) << 18 | (b[i + 1] & 0x3F) << 12) > 0x10FFFF:
                return True
            i += 4
        else:
            i += 1
    return False


def make_texts(seed: int, n: int, specials: List[str]) -> List[Union[str, bytes]]:
    rng = random.Random(seed)
    out: List[Union[str, bytes]] = []
    for i in range(n):
        k = rng.choice([1, 2, 3, 5, 8, 13, 30])
        t = "".join(_piece(rng, specials) for _ in range(k))
        if i % 8 == 7:
            b = _bad_bytes(rng, t)
            while beyond_unicode(b):
                b = _bad_bytes(rng, t)
            out.append(b)
        else:
            out.append(t)
    return out
