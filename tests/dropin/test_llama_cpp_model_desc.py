"""llama_model_desc names a model as llama.cpp does: "<arch> <size label> <file type>", the size label from
llama.cpp's per-architecture table of layer counts (ubatch/llama_cpp/_model_type.py). The tiny model and the
two real ones against what llama-cpp-python 0.3.36 returned (tests/data/llama_cpp_python/model_desc.json, by
record_model_desc.py), and the tables' branches on made-up hyper-parameters."""
import importlib.util
import json
import os

import pytest

import suite_paths
import ubatch.llama_cpp as L
from ubatch.llama_cpp._model_type import size_label

RECORD_DIR = os.path.join(suite_paths.DATA, "llama_cpp_python")
REF = json.load(open(os.path.join(RECORD_DIR, "model_desc.json")))
_spec = importlib.util.spec_from_file_location("record_model_desc", os.path.join(RECORD_DIR, "record_model_desc.py"))
_rd = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_rd)


@pytest.mark.parametrize("name", [pytest.param(n, marks=[] if n == "tiny" else [pytest.mark.realmodel])
                                  for n in _rd.MODELS])
def test_desc_is_what_llama_cpp_python_returned(name):
    assert _rd.describe(L, _rd.model_path(name)) == REF[name]


@pytest.mark.parametrize("case", list(_rd.ARCH_CASES))
def test_arch_desc_is_what_llama_cpp_python_returned(case, tmp_path):
    # tiny random models of every other architecture ubatch reads, at their test layer count ("?B" in llama.cpp
    # too) and at the layer counts llama.cpp names (granite, granitemoe, smollm3 and exaone4 gave "?B" before);
    # the files carry no general.file_type: llama.cpp guesses it from the commonest tensor type
    assert _rd.describe(L, _rd.write_arch_case(case, str(tmp_path))) == REF["archs"][case]


def test_truncated_buffer_returns_the_full_length():
    import ctypes
    m = L.llama_model_load_from_file(_rd.model_path("tiny").encode(), L.llama_model_default_params())
    buf = ctypes.create_string_buffer(6)
    assert L.llama_model_desc(m, buf, 6) == len(REF["tiny"]["desc"]) and buf.value == b"llama"
    L.llama_model_free(m)


def _hp(**kw):
    return lambda n: kw.get(n, 0)


@pytest.mark.parametrize("arch, hp, label", [
    ("qwen2", _hp(n_layer=24, n_embd=1024), "0.5B"), ("qwen2", _hp(n_layer=24, n_embd=896), "1B"),
    ("qwen2", _hp(n_layer=28, n_embd=1536), "1.5B"), ("qwen2", _hp(n_layer=40, n_head=20), "4B"),
    ("qwen2", _hp(n_layer=40, n_head=40), "13B"), ("qwen2", _hp(n_layer=25), "?B"),
    ("llama", _hp(n_layer=16), "1B"), ("llama", _hp(n_layer=32, n_vocab=49152), "3B"),
    ("llama", _hp(n_layer=32, n_vocab=32000), "7B"), ("llama", _hp(n_layer=32, n_vocab=128256), "8B"),
    ("llama", _hp(n_layer=80, n_head=64, n_head_kv=64), "65B"), ("llama", _hp(n_layer=80, n_head=64, n_head_kv=8), "70B"),
    ("llama", _hp(n_layer=32, n_expert=8), "8x7B"), ("llama", _hp(n_layer=2), "?B"),
    ("qwen3", _hp(n_layer=28, n_embd=1024), "0.6B"), ("qwen3", _hp(n_layer=36, n_embd=4096), "8B"),
    ("gemma3", _hp(n_layer=18), "270M"), ("gemma3", _hp(n_layer=26), "1B"), ("gemma2", _hp(n_layer=42), "9B"),
    ("granite", _hp(n_layer=32), "3B"), ("granite", _hp(n_layer=64), "30B"), ("granite", _hp(n_layer=24), "?B"),
    ("granite", _hp(n_layer=40, n_embd=2048), "2B"), ("granite", _hp(n_layer=40, n_embd=2560), "3B"),
    ("granite", _hp(n_layer=40, n_embd=4096), "8B"), ("granite", _hp(n_layer=40, n_embd=1536), "?B"),
    ("granitemoe", _hp(n_layer=24), "1B.A400M"), ("granitemoe", _hp(n_layer=32), "3B.A800M"),
    ("granitemoe", _hp(n_layer=40, n_embd=2048), "?B"), ("smollm3", _hp(n_layer=36), "3B"),
    ("exaone4", _hp(n_layer=30), "1.2B"), ("exaone4", _hp(n_layer=64), "32B"),
    ("qwen3moe", _hp(n_layer=48), "30B.A3B"), ("olmoe", _hp(n_layer=16), "A1.7B"), ("nonesuch", _hp(n_layer=18), "?B"),
])
def test_size_label_tables(arch, hp, label):
    # granite's 40-layer widths and 64 layers, granitemoe 24 / 40 and exaone4 64 as llama-cpp-python 0.3.36 named
    # tiny random models of those shapes (the widths need head sizes ubatch's tiny writer does not make)
    assert size_label(arch, hp) == label
