"""ubatch.Tokenizer against llama.cpp on small vocabularies cut from llama.cpp's own test vocabularies
(tests/data/tokenizer/mini-*.gguf): the pre-tokenizers default, gpt-2, llama3, qwen2, smollm and starcoder, SPM with
add_space_prefix, and phi-3's RSTRIP specials; 250 recorded random / hostile texts each, plus piece digests."""
from __future__ import annotations

import gzip
import json
import os

import pytest

from tokenizer_vectors import check_header, check_record

import suite_paths  # noqa: E402
DATA = os.path.join(suite_paths.DATA, "tokenizer")
MINI = sorted(f[:-5] for f in os.listdir(DATA) if f.startswith("mini-") and f.endswith(".gguf"))


def test_all_minis_present():
    assert {"mini-spm", "mini-phi3", "mini-bpe-default", "mini-bpe-gpt-2", "mini-bpe-llama-bpe", "mini-bpe-qwen2",
            "mini-bpe-smollm", "mini-bpe-starcoder", "mini-bpe-lstrip"} <= set(MINI)


@pytest.mark.parametrize("tag", MINI)
def test_mini_vocab_matches_llama_cpp(tag):
    from ubatch import Tokenizer
    tok = Tokenizer.from_gguf(os.path.join(DATA, tag + ".gguf"))
    with gzip.open(os.path.join(DATA, tag + ".jsonl.gz"), "rt", encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    header, recs = lines[0], lines[1:]
    assert len(recs) == header["n_texts"] >= 250
    problems = check_header(tok, header)
    for k, r in enumerate(recs):
        problems += [f"#{k}: {p}" for p in check_record(tok, r)]
    assert problems == []


def test_mini_flags():
    from ubatch import Tokenizer
    spm = Tokenizer.from_gguf(os.path.join(DATA, "mini-spm.gguf"))
    assert spm.add_space_prefix and spm.add_bos and spm.bos == 1
    ids = spm.encode("Hello world")
    assert ids[0] == 1 and ids[1:] == spm.encode("Hello world", add_special=False)   # the prefix space, once
    # llama_detokenize strips the first piece's space only when no BOS was removed (docs/llama-cpp-behaviours.md §T8.2)
    assert spm.decode(ids, remove_special=True) == " Hello world"
    assert spm.decode(ids[1:]) == "Hello world"
    assert spm.decode(ids) == " Hello world"
    l3 = Tokenizer.from_gguf(os.path.join(DATA, "mini-bpe-llama-bpe.gguf"))
    assert l3.add_bos and l3.encode("a")[0] == l3.bos    # llama3 group forces add_bos
    q2 = Tokenizer.from_gguf(os.path.join(DATA, "mini-bpe-qwen2.gguf"))
    s_id = q2.encode("</s>", add_special=False, parse_special=True)
    assert len(s_id) == 1 and q2.is_control(s_id[0]) and q2.is_eog(s_id[0])   # NORMAL </s> forced CONTROL + EOG
    assert q2.encode("<tool_call>", add_special=False) == [q2.n_vocab - 2]       # USER_DEFINED: always split
    assert q2.encode("1234", add_special=False) == [q2.encode(c, add_special=False)[0] for c in "1234"]


def test_double_bos_warning(caplog):
    from ubatch import Tokenizer
    spm = Tokenizer.from_gguf(os.path.join(DATA, "mini-spm.gguf"))
    with caplog.at_level("WARNING", logger="ubatch.tokenizer"):
        assert spm.encode("<s>hi", parse_special=True)[:2] == [1, 1]
    assert "2 BOS tokens" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="ubatch.tokenizer"):
        spm.encode("<s>hi", parse_special=False)
        spm.encode("<s>hi", add_special=False, parse_special=True)
    assert caplog.text == ""
