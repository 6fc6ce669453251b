"""Hostile GGUF metadata is refused before it costs anything.

* an ARRAY[STRING] (or any array) whose count the file cannot hold: GGUFError / TokenizerError at once, nothing
  allocated (a sparse file, so the bytes are zeros that would otherwise parse as empty strings);
* arrays nested 2,000 deep: GGUFError, not RecursionError;
* wrongly typed standard keys (general.alignment as an array, hyperparameters as strings or arrays): GGUFError;
* hyperparameters the kernels would refuse at the first decode (epsilon <= 0 or NaN, rope bases <= 0, ...):
  GGUFError at load, naming the key;
* a BPE token whose decoded piece would be quadratic in its length (33,000 code points outside the byte-level
  alphabet): refused naming the token id; the same length in byte-level characters loads."""
from __future__ import annotations

import math
import resource
import struct

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package is needed to write GGUF test files")

import gguf_util as G  # noqa: E402
from ubatch.model import GGUFError, Model  # noqa: E402
from ubatch.model.gguf_file import GGUFFile  # noqa: E402
from ubatch.tokenizer import Tokenizer  # noqa: E402
from ubatch.tokenizer.errors import TokenizerError  # noqa: E402

VT = G.VT


def _rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


@pytest.mark.parametrize("etype,key", [(VT.STRING, "tokenizer.ggml.tokens"), (VT.UINT8, "x.bytes"),
                                       (VT.ARRAY, "x.nested")])
def test_huge_array_count_in_a_sparse_file(tmp_path, etype, key):
    p = tmp_path / "sparse.gguf"
    with open(p, "wb") as f:
        f.write(G.raw_header(0, G.raw_key(key) + G.raw_array_head(etype, 2**40)))
        f.truncate(64 << 20)                        # 64 MiB of zeros without writing them
    before = _rss_kib()
    with pytest.raises(GGUFError, match=f"{key}.*1099511627776 elements does not fit"):
        GGUFFile(p)
    if etype != VT.ARRAY:
        with pytest.raises(TokenizerError, match="1099511627776 elements does not fit"):
            Tokenizer.from_gguf(p)
    assert _rss_kib() - before < 32 << 10           # peak RSS grew by less than 32 MiB


def test_deeply_nested_arrays(tmp_path):
    p = tmp_path / "deep.gguf"
    body = G.raw_key("x.deep") + struct.pack("<I", VT.ARRAY)
    body += struct.pack("<IQ", VT.ARRAY, 1) * 2000 + struct.pack("<IQ", VT.UINT8, 0)
    p.write_bytes(G.raw_header(0, body))
    with pytest.raises(GGUFError, match="'x.deep' nests arrays deeper than 16"):
        GGUFFile(p)
    with pytest.raises(TokenizerError):
        Tokenizer.from_gguf(p)


def test_counts_the_file_cannot_hold(tmp_path):
    p = tmp_path / "counts.gguf"
    p.write_bytes(G.raw_header(10**6, G.raw_key("a") + struct.pack("<IB", VT.UINT8, 1)) + b"\0" * 1000)
    with pytest.raises(GGUFError, match="corrupt header"):
        GGUFFile(p)


def _kv(**over):
    kv = G.standard_kv(n_vocab=40)
    for k, v in over.items():
        key = k.replace("__", ".")
        if v is None:
            kv.pop(key, None)
        else:
            kv[key] = v
    return kv


def _refused(tmp_path, kv, match, arch="llama"):
    p = G.write(tmp_path / "m.gguf", kv, arch=arch, tensors=False)
    with pytest.raises(GGUFError, match=match):
        Model.from_gguf(p)


def test_alignment_of_the_wrong_type(tmp_path):
    for val in (([32, 32], VT.ARRAY, VT.UINT32), ("32", VT.STRING), (32.0, VT.FLOAT32)):
        p = G.write(tmp_path / "a.gguf", dict(G.standard_kv(n_vocab=40), **{"general.alignment": val}),
                    tensors=False)
        with pytest.raises(GGUFError, match="general.alignment must be an unsigned integer"):
            GGUFFile(p)


EPS = "llama.attention.layer_norm_rms_epsilon"
BASE = "llama.rope.freq_base"


@pytest.mark.parametrize("key,val,vt", [
    (EPS, 0.0, VT.FLOAT32), (EPS, -1e-5, VT.FLOAT32), (EPS, math.nan, VT.FLOAT32), (EPS, math.inf, VT.FLOAT32),
    (EPS, 1e-60, VT.FLOAT64),                                   # 0 as the kernels' float32
    (BASE, 0.0, VT.FLOAT32), (BASE, -10000.0, VT.FLOAT32), (BASE, math.nan, VT.FLOAT32), (BASE, 1e300, VT.FLOAT64),
    ("llama.rope.scaling.factor", -2.0, VT.FLOAT32), ("llama.rope.scaling.factor", math.nan, VT.FLOAT32),
])
def test_hparams_the_kernels_reject(tmp_path, key, val, vt):
    _refused(tmp_path, dict(_kv(), **{key: (val, vt)}), f"{key} = .* must be a finite number > 0")


@pytest.mark.parametrize("key,val", [
    (EPS, ([1e-6], VT.ARRAY, VT.FLOAT32)), (EPS, ("1e-6", VT.STRING)), (BASE, ("x", VT.STRING)),
    ("llama.embedding_length", ("32", VT.STRING)), ("llama.embedding_length", (2**40, VT.UINT64)),
    ("llama.attention.head_count", ("4", VT.STRING)), ("llama.attention.head_count", ([4, 4], VT.ARRAY, VT.FLOAT32)),
    ("llama.expert_count", ([1], VT.ARRAY, VT.UINT32)), ("llama.vocab_size", ("40", VT.STRING)),
    ("llama.rope.scaling.type", (3, VT.UINT32)),
])
def test_wrongly_typed_standard_keys(tmp_path, key, val):
    _refused(tmp_path, dict(_kv(), **{key: val}), key)


def test_a_block_count_the_file_cannot_hold(tmp_path):
    # found by the fuzzer: 2**31 - 1 layers made a per-layer list of 16 GB before any tensor was checked
    p = G.write(tmp_path / "m.gguf", dict(G.standard_kv(), **{"llama.block_count": (2**31 - 1, VT.UINT32)}),
                n_vocab=len(G.vocab_tokens()))
    with pytest.raises(GGUFError, match="block_count = 2147483647 exceeds the 11 tensors"):
        Model.from_gguf(p)


def test_gemma3_swa_keys(tmp_path):
    kv = G.standard_kv(arch="gemma3", n_vocab=40)
    kv["gemma3.attention.sliding_window"] = (512, VT.UINT32)
    for key, val in (("gemma3.rope.freq_base_swa", (0.0, VT.FLOAT32)),
                     ("gemma3.rope.freq_base_swa", (math.nan, VT.FLOAT32)),
                     ("gemma3.final_logit_softcapping", (-30.0, VT.FLOAT32)),
                     ("gemma3.attention.sliding_window_pattern", ("6", VT.STRING))):
        _refused(tmp_path, dict(kv, **{key: val}), key, arch="gemma3")
    kv["gemma3.attention.sliding_window"] = (-5, VT.INT32)
    _refused(tmp_path, kv, "gemma3.attention.sliding_window", arch="gemma3")


def test_a_valid_small_model_still_loads(tmp_path):
    m = Model.from_gguf(G.small_model(tmp_path / "ok.gguf"))
    assert (m.n_embd, m.n_layer, m.rms_eps > 0, m.rope_base) == (G.E, 1, True, 10000.0)


def _bpe(tmp_path, long_token: str):
    toks = G.BYTE_CHARS + ["ab", long_token]
    kv = {"tokenizer.ggml.model": ("gpt2", VT.STRING), "tokenizer.ggml.pre": ("qwen2", VT.STRING),
          "tokenizer.ggml.tokens": (toks, VT.ARRAY, VT.STRING),
          "tokenizer.ggml.token_type": ([1] * len(toks), VT.ARRAY, VT.INT32),
          "tokenizer.ggml.merges": (["a b"], VT.ARRAY, VT.STRING)}
    return G.write(tmp_path / "v.gguf", kv, tensors=False), len(toks) - 1


def test_a_long_token_outside_the_byte_alphabet_is_refused(tmp_path):
    p, tid = _bpe(tmp_path, "猫" * 33_000)            # llama.cpp's piece: 33,000 x ~99 KB = 3.3 GB
    before = _rss_kib()
    with pytest.raises(TokenizerError, match=f"token {tid} \\(99000 bytes of text"):
        Tokenizer.from_gguf(p)
    assert _rss_kib() - before < 64 << 10


def test_a_long_byte_level_token_loads(tmp_path):
    p, tid = _bpe(tmp_path, "a" * 33_000)
    t = Tokenizer.from_gguf(p)
    assert t.token_to_piece(tid) == b"a" * 33_000


def test_a_few_unmapped_code_points_keep_llama_cpps_piece(tmp_path):
    p, tid = _bpe(tmp_path, "x猫")
    t = Tokenizer.from_gguf(p)
    assert t.token_to_piece(tid) == b"x[UNK_BYTE_0xe78cabx\xe7\x8c\xab]"
