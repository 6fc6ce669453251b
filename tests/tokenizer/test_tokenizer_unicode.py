"""The committed code-point class table (csrc/tokenizer/tok_unicode_table.c, generated from Unicode 15.1 by
ubatch/tokenizer/gen_unicode_table.py): spot checks of what llama.cpp 0c1e570's table says, including where
Unicode 15.1 differs from older Pythons (3.11 ships 14.0) and from 16.0."""
from ubatch._ffi import lib

UNDEF, NUM, LET, SEP, MARK, PUNCT, SYM, CTRL, WS = 0, 1, 2, 3, 4, 5, 6, 7, 8


def cls(cp):
    return lib.ub_tok_cpt_class(cp)


def test_ascii_and_whitespace_set():
    assert cls(ord("a")) == LET and cls(ord("Z")) == LET and cls(ord("7")) == NUM
    assert cls(ord("!")) == PUNCT and cls(ord("$")) == SYM and cls(ord("`")) == SYM and cls(ord("_")) == PUNCT
    ws = [*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000]
    assert len(ws) == 25 and all(cls(c) & WS for c in ws)
    # not whitespace for llama.cpp although Python's str.isspace says so / Unicode calls them separators or format
    assert not any(cls(c) & WS for c in (0x1C, 0x1D, 0x1E, 0x1F, 0x200B, 0x180E, 0xFEFF))
    assert cls(0x20) == SEP | WS and cls(0x0A) == CTRL | WS and cls(0x2028) == SEP | WS


def test_unicode_15_1_not_older_not_newer():
    assert cls(0x2FFC) == SYM             # IDEOGRAPHIC DESCRIPTION CHARACTER (added in 15.1)
    assert cls(0x31350) == LET            # CJK Extension H (15.0): letter, unassigned in Python 3.11's 14.0
    assert cls(0x2EBF0) == LET            # CJK Extension I (15.1)
    assert cls(0x10D40) == UNDEF          # Garay (16.0): unassigned for llama.cpp
    assert cls(0x1CC00) == UNDEF          # Symbols for Legacy Computing Supplement (16.0)
    assert cls(0x0378) == UNDEF and cls(0x10FFFF) == UNDEF and cls(0x110000) == UNDEF and cls(0xFFFFFFFF) == UNDEF


def test_categories_collapsed():
    assert cls(0x0301) == MARK and cls(0x20AC) == SYM and cls(0x00BD) == NUM and cls(0x0663) == NUM
    assert cls(0x4E00) == LET and cls(0xAC00) == LET and cls(0x1F600) == SYM and cls(0x200D) == CTRL
    assert cls(0xE000) == CTRL and cls(0xD800) == CTRL and cls(0x3002) == PUNCT and cls(0x2160) == NUM
