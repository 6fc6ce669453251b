"""ubatch.Tokenizer against llama.cpp's own answers on the two real models: the public vectors
(tests/data/realmodel/<tag>/tokenizer.jsonl: 96 texts x 3 modes, pieces, detokenisation) and the recorded
random / hostile texts (tests/data/tokenizer/<tag>.jsonl.gz, with digests of every token's piece)."""
from __future__ import annotations

import gzip
import json
import os

import pytest

from tokenizer_vectors import MODES, check_header, check_record

pytestmark = pytest.mark.realmodel
from suite_paths import DATA  # noqa: E402
MODELS = {"gemma3-270m": "gemma3-270m-q4_k_m", "qwen2.5-0.5b": "qwen2.5-coder-0.5b-q4_k_m"}


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request):
    from ubatch import Tokenizer
    from ubatch.model import fetch
    return request.param, Tokenizer.from_gguf(fetch.path(request.param))


def _public(tag):
    with open(os.path.join(DATA, "realmodel", tag, "tokenizer.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _recorded(tag):
    with gzip.open(os.path.join(DATA, "tokenizer", f"{tag}.jsonl.gz"), "rt", encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    return lines[0], lines[1:]


def test_public_vectors_ids_pieces_detok(model):
    name, tok = model
    rows = _public(MODELS[name])
    assert len(rows) == 96
    n_checked = 0
    for r in rows:
        for mode, (add, parse) in MODES.items():
            exp = r[mode]
            ids = tok.encode(r["text"], add_special=add, parse_special=parse)
            assert ids == exp["ids"], (r["id"], mode, r["text"])
            assert [tok.token_to_piece(i, special=True).hex() for i in ids] == exp["piece_hex"], (r["id"], mode)
            nospecial = b"".join(tok.token_to_piece(i) for i in ids).decode("utf-8", "replace")
            assert nospecial == exp["pieces_text_nospecial"], (r["id"], mode)
            assert tok.decode(ids, remove_special=False, unparse_special=True) == exp["detok"], (r["id"], mode)
            assert tok.decode(ids, remove_special=True, unparse_special=False) == exp["detok_strip"], (r["id"], mode)
            assert (exp["detok_strip"] == r["text"]) == exp["roundtrip_detok_strip_eq_text"]
            n_checked += 1
    assert n_checked == 288


def test_recorded_hostile_texts_and_piece_digests(model):
    name, tok = model
    header, recs = _recorded(MODELS[name])
    assert header["n_vocab"] == tok.n_vocab and len(recs) == header["n_texts"] >= 400
    problems = check_header(tok, header)
    for k, r in enumerate(recs):
        problems += [f"#{k}: {p}" for p in check_record(tok, r)]
    assert problems == []


def test_special_ids_and_flags(model):
    name, tok = model
    meta = json.load(open(os.path.join(DATA, "realmodel", "models.json")))["models"][MODELS[name]]
    assert (tok.n_vocab, tok.bos, tok.eos, tok.eot) == (meta["n_vocab"], meta["bos"], meta["eos"], meta["eot"])
    assert (tok.add_bos, tok.add_eos) == (bool(meta["add_bos"]), bool(meta["add_eos"]))
    assert tok.vocab_type == meta["vocab_type"]
    assert tok.model == meta["tokenizer.ggml.model"]
    assert tok.nl == (248 if name == "gemma3-270m" else 198) and not tok.add_sep   # <0x0A> / "Ċ"


def test_eog_and_control_sets(model):
    name, tok = model
    if name == "gemma3-270m":
        # <eos>, <end_of_turn> and the USER_DEFINED </s> (forced CONTROL by llama.cpp's EOG rule)
        assert tok.eog_ids == {1, 106, 212}
        assert tok.is_control(212) and tok.is_control(106) and not tok.is_control(203)   # 203 = <s>
        assert tok.encode("</s>", add_special=False) != [212]          # CONTROL: not split without parse_special
        assert tok.encode("</s>", add_special=False, parse_special=True) == [212]
        assert tok.encode("<s>", add_special=False) == [203]           # plain USER_DEFINED: always split
        assert tok.encode("", add_special=True) == [2]
    else:
        text = {t: tok.token_text(t) for t in tok.eog_ids}
        assert set(text.values()) == {b"<|endoftext|>", b"<|im_end|>", b"</s>", b"<|fim_pad|>", b"<|repo_name|>",
                                      b"<|file_sep|>"}
        s_id = next(t for t, v in text.items() if v == b"</s>")
        assert tok.is_control(s_id)
        assert tok.encode("</s>", add_special=False, parse_special=True) == [s_id]
        assert tok.encode("", add_special=True) == []
    assert all(tok.is_eog(t) for t in tok.eog_ids) and not tok.is_eog(-1)


def test_chat_template(model):
    name, tok = model
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    if name == "gemma3-270m":
        assert tok.chat_template is None
        from ubatch.tokenizer import TokenizerError
        with pytest.raises(TokenizerError, match="no chat template"):
            tok.apply_chat_template(msgs)
        out = tok.apply_chat_template(msgs, template="{% for m in messages %}<{{ m.role }}>{{ m.content }}"
                                                      "{% endfor %}{% if add_generation_prompt %}<model>{% endif %}")
        assert out == "<system>Be brief.<user>Hi<model>"
    else:
        out = tok.apply_chat_template(msgs, add_generation_prompt=True)
        assert out == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                       "<|im_start|>assistant\n")
        ids = tok.encode(out, add_special=True, parse_special=True)
        assert ids.count(tok.eos) == 2 and ids.count(tok.encode("<|im_start|>", parse_special=True)[0]) == 3
        out2 = tok.apply_chat_template(msgs, add_generation_prompt=False)
        assert out2.endswith("<|im_end|>\n") and not out2.endswith("assistant\n")


def test_bad_ids_and_text(model):
    from ubatch.tokenizer import TokenizerError
    _, tok = model
    with pytest.raises(TokenizerError, match=r"ids\[1\] = -1 out of range"):
        tok.decode([5, -1])
    with pytest.raises(TokenizerError, match=rf"ids\[0\] = {tok.n_vocab} out of range"):
        tok.decode([tok.n_vocab])
    with pytest.raises(TokenizerError, match="token id 999999999 out of range"):
        tok.token_to_piece(999999999)
    with pytest.raises(TokenizerError, match="lone surrogate U\\+D800 at index 2"):
        tok.encode("ab\ud800c")
    with pytest.raises(TokenizerError, match="byte 0xFF at offset 1"):
        tok.encode(b"a\xffb")
    with pytest.raises(TypeError):
        tok.encode(123)
    with pytest.raises(TypeError, match=r"ids\[0\] must be an int"):
        tok.decode(["a"])
    # strict_utf8=False: llama.cpp's behaviour (gemma: byte tokens; qwen: U+FFFD)
    ids = tok.encode(b"a\xffb", add_special=False, strict_utf8=False)
    assert ids and tok.decode(ids).startswith("a")
