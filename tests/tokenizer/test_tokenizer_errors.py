"""Bad vocabularies and bad input: every one a TokenizerError (or TypeError) naming the culprit, never a crash.
The GGUFs are written on the fly with the gguf package from a mini vocabulary (tests/data/tokenizer)."""
from __future__ import annotations

import os

import gguf
import numpy as np
import pytest

from ubatch import Tokenizer
from ubatch.tokenizer import TokenizerError, UnsupportedVocabError

import suite_paths  # noqa: E402
DATA = os.path.join(suite_paths.DATA, "tokenizer")
SPM_TOKENS = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + ["▁a", "▁", "a", "b", "ab"]


def write_gguf(path, kv, arch="llama"):
    w = gguf.GGUFWriter(str(path), arch)
    for key, (val, vt, *sub) in kv.items():
        if vt == gguf.GGUFValueType.ARRAY:
            w.add_key_value(key, val, vt, sub_type=sub[0])
        else:
            w.add_key_value(key, val, vt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    return str(path)


A, S, U32, I32, F32 = (gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.STRING, gguf.GGUFValueType.UINT32,
                       gguf.GGUFValueType.INT32, gguf.GGUFValueType.FLOAT32)


def spm_kv(tokens=None, **over):
    tokens = tokens if tokens is not None else SPM_TOKENS
    n = len(tokens)
    types = [2, 3, 3] + [6] * 256 + [1] * (n - 259)
    kv = {"tokenizer.ggml.model": ("llama", S), "tokenizer.ggml.tokens": (tokens, A, S),
          "tokenizer.ggml.scores": ([0.0] * 259 + [-float(i) for i in range(n - 259)], A, F32),
          "tokenizer.ggml.token_type": (types[:n], A, I32)}
    kv.update(over)
    return {k: v for k, v in kv.items() if v is not None}


def test_synthetic_spm_works(tmp_path):
    t = Tokenizer.from_gguf(write_gguf(tmp_path / "v.gguf", spm_kv()))
    # " ab a" -> ▁ a b ▁ a: the two "▁a" (score 0) merge first, leftmost first; "ab" (score -4) is then stale
    assert t.encode("ab a") == [1, 259, 262, 259]
    assert t.encode("c") == [1, 260, 3 + 0x63]            # byte fallback <0x63>
    assert t.decode([1, 259, 262, 259], remove_special=True) == " ab a"
    assert t.decode([259, 262, 259]) == "ab a"             # add_space_prefix: the first space is dropped


def load_err(tmp_path, kv, match, exc=TokenizerError, arch="llama"):
    path = write_gguf(tmp_path / "v.gguf", kv, arch)
    with pytest.raises(exc, match=match):
        Tokenizer.from_gguf(path)


def test_missing_file_and_not_gguf(tmp_path):
    with pytest.raises(TokenizerError, match="cannot open"):
        Tokenizer.from_gguf(tmp_path / "nope.gguf")
    p = tmp_path / "x.gguf"
    p.write_bytes(b"NOTGGUF" + bytes(100))
    with pytest.raises(TokenizerError, match="not a GGUF file"):
        Tokenizer.from_gguf(p)
    p.write_bytes(b"GG")
    with pytest.raises(TokenizerError, match="not a GGUF file"):
        Tokenizer.from_gguf(p)


def test_truncated_file(tmp_path):
    src = open(os.path.join(DATA, "mini-spm.gguf"), "rb").read()
    for cut in (30, 200, len(src) // 2, len(src) - 10):
        p = tmp_path / f"t{cut}.gguf"
        p.write_bytes(src[:cut])
        with pytest.raises(TokenizerError, match="truncated|runs past the end|tokenizer"):
            Tokenizer.from_gguf(p)


def test_no_tokenizer_keys(tmp_path):
    load_err(tmp_path, {"general.name": ("x", S)}, "tokenizer.ggml.model missing")


@pytest.mark.parametrize("model,kind", [("bert", "WPM"), ("t5", "UGM"), ("rwkv", "RWKV"), ("plamo2", "PLaMo2"),
                                        ("gemma4", "BPE \\(gemma4")])
def test_other_vocab_types_named(tmp_path, model, kind):
    load_err(tmp_path, spm_kv(**{"tokenizer.ggml.model": (model, S)}), rf"'{model}' \({kind}", UnsupportedVocabError)


def test_unknown_model_and_pre(tmp_path):
    load_err(tmp_path, spm_kv(**{"tokenizer.ggml.model": ("weird", S)}), "unknown tokenizer: 'weird'")
    kv = spm_kv(**{"tokenizer.ggml.model": ("gpt2", S), "tokenizer.ggml.pre": ("falcon", S),
                   "tokenizer.ggml.merges": (["a b"], A, S)})
    load_err(tmp_path, kv, "tokenizer.ggml.pre = 'falcon' is not supported", UnsupportedVocabError)
    load_err(tmp_path, spm_kv(**{"tokenizer.ggml.model": ("none", S)}), "no vocabulary", UnsupportedVocabError)


def test_bad_arrays(tmp_path):
    load_err(tmp_path, spm_kv(**{"tokenizer.ggml.tokens": None}), "tokenizer.ggml.tokens missing")
    load_err(tmp_path, spm_kv(**{"tokenizer.ggml.tokens": ([1, 2, 3], A, I32)}),
             "tokenizer.ggml.tokens must be an array of string")
    load_err(tmp_path, spm_kv(**{"tokenizer.ggml.scores": ([0.0] * 10, A, F32)}),
             f"tokenizer.ggml.scores has 10 entries for {len(SPM_TOKENS)} tokens")
    load_err(tmp_path, spm_kv(**{"tokenizer.ggml.scores": (["x"] * len(SPM_TOKENS), A, S)}),
             "invalid gguf type for tokenizer.ggml.scores")
    load_err(tmp_path, spm_kv(**{"tokenizer.ggml.token_type": ([1] * 5, A, I32)}),
             "tokenizer.ggml.token_type has 5 entries")
    load_err(tmp_path, spm_kv(**{"tokenizer.ggml.token_type": ([1.0] * len(SPM_TOKENS), A, F32)}),
             "invalid gguf type for tokenizer.ggml.token_type")
    dup = SPM_TOKENS[:-1] + ["a"]
    load_err(tmp_path, spm_kv(dup), f"token {len(dup) - 1} has the same text as token {len(dup) - 3}")
    load_err(tmp_path, spm_kv(**{"tokenizer.ggml.model": (3, U32)}), "tokenizer.ggml.model must be a string")
    load_err(tmp_path, spm_kv(**{"tokenizer.ggml.bos_token_id": ("1", S)}), "bos_token_id must be an integer")


def test_bpe_without_merges(tmp_path):
    kv = spm_kv(**{"tokenizer.ggml.model": ("gpt2", S), "tokenizer.ggml.pre": ("qwen2", S)})
    load_err(tmp_path, kv, "tokenizer.ggml.merges missing")
    kv["tokenizer.ggml.merges"] = ([1, 2], A, I32)
    load_err(tmp_path, kv, "invalid gguf type for tokenizer.ggml.merges")


def test_out_of_range_ids_fall_back_like_llama_cpp(tmp_path):
    # a bad special id keeps the default (bos 1); a default out of range is disabled
    t = Tokenizer.from_gguf(write_gguf(tmp_path / "v.gguf", spm_kv(**{"tokenizer.ggml.bos_token_id": (99999, U32)})))
    assert t.bos == 1
    small = ["a", "b"]
    kv = {"tokenizer.ggml.model": ("llama", S), "tokenizer.ggml.tokens": (small, A, S)}
    t = Tokenizer.from_gguf(write_gguf(tmp_path / "w.gguf", kv))
    assert (t.bos, t.eos, t.unk) == (1, -1, 0)
    with pytest.raises(TokenizerError, match="no byte-fallback token for byte 0xE2"):
        t.encode("a", add_special=False)       # "▁" (space prefix) has no token and no <0xE2>
    kv["tokenizer.ggml.add_space_prefix"] = (False, gguf.GGUFValueType.BOOL)
    t = Tokenizer.from_gguf(write_gguf(tmp_path / "x.gguf", kv))
    assert t.encode("ab", add_special=False) == [0, 1] and t.encode("ab") == [1, 0, 1]
    with pytest.raises(TokenizerError, match="no byte-fallback token for byte 0x63"):
        t.encode("c", add_special=False)


def test_bad_inputs_never_crash(tmp_path):
    t = Tokenizer.from_gguf(os.path.join(DATA, "mini-bpe-qwen2.gguf"))
    with pytest.raises(TokenizerError, match="U\\+1FFFFF"):
        t.encode(b"a\xf7\xbf\xbf\xbf", strict_utf8=False)     # 4-byte form beyond U+10FFFF
    assert t.encode(b"\xed\xa0\x80", add_special=False, strict_utf8=False)    # surrogate form: accepted
    with pytest.raises(TokenizerError, match="not valid UTF-8"):
        t.encode(b"\xed\xa0\x80")
    with pytest.raises(TypeError):
        t.decode([[1, 2]])
    with pytest.raises(TypeError, match=r"ids\[1\] must be an int"):
        t.decode([1, 2.5])
    with pytest.raises(TokenizerError, match="out of range"):
        t.decode(np.array([1, t.n_vocab], dtype=np.int64))
    with pytest.raises(TokenizerError, match="lstrip"):
        t.token_to_piece(1, lstrip=-1)
    with pytest.raises(TypeError):
        t.token_to_piece("1")
    assert t.decode([]) == "" and t.encode("") == [] and t.token_to_piece(0, lstrip=5) == b"!"
    many = t.encode(b"\xff" * 100, add_special=False, strict_utf8=False)   # more ids than bytes: the retry path
    assert len(many) > 116 and t.decode_bytes(many) == "\ufffd".encode() * 100
    big = "x" * 300_000 + " y" * 100_000
    assert len(t.encode(big)) > 0


def test_chat_template_errors():
    t = Tokenizer.from_gguf(os.path.join(DATA, "mini-bpe-qwen2.gguf"))
    with pytest.raises(TokenizerError, match="no chat template"):
        t.apply_chat_template([{"role": "user", "content": "x"}])
    with pytest.raises(TokenizerError, match="does not compile"):
        t.apply_chat_template([{"role": "user", "content": "x"}], template="{% for %}")
    with pytest.raises(TokenizerError, match="chat template: nope"):
        t.apply_chat_template([{"role": "user", "content": "x"}], template="{{ raise_exception('nope') }}")
    with pytest.raises(TokenizerError, match=r"messages\[0\] must be a dict"):
        t.apply_chat_template(["hi"], template="x")
    with pytest.raises(TokenizerError, match="failed"):    # the sandbox refuses attribute access to internals
        t.apply_chat_template([{"role": "u"}], template="{{ messages.__class__.__mro__ }}")


def test_chat_template_environment():
    t = Tokenizer.from_gguf(os.path.join(DATA, "mini-bpe-qwen2.gguf"))
    msgs = [{"role": "user", "content": "héllo"}, {"role": "assistant", "content": "ok"}]
    tpl = ("{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m | tojson }}{% endfor %}"
           "{% generation %}[{{ tools[0].name if tools else 'none' }}]{% endgeneration %}{{ bos_token }}")
    assert t.apply_chat_template(msgs, template=tpl) == '{"role": "user", "content": "héllo"}[none]<|endoftext|>'
    assert t.apply_chat_template(msgs, template=tpl, tools=[{"name": "f"}]).endswith("[f]<|endoftext|>")
