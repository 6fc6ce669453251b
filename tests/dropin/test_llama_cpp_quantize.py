"""llama_model_quantize writes, byte for byte, the file llama.cpp's quantiser writes (llama-cpp-python 0.3.36 on
this machine, tests/data/llama_cpp_python/quantize.json by record_quantize.py: the sha256 of each output): the
eight file types ubatch writes from the f32 tiny model, llama.cpp's output-matrix rule (Q6_K falling back to
Q8_0), pure, per-tensor type overrides and quantize_output_tensor=False; re-quantised real models (Q4_K_M sources,
dequantised by ubatch's kernels) on Gemma 3 and Qwen2.5. File types and tensor types ubatch cannot write fail with
1 and the reason logged, leaving no file."""
import ctypes
import hashlib
import json
import os

import pytest

import suite_paths
import ubatch.llama_cpp as L

RECORD_DIR = os.path.join(suite_paths.DATA, "llama_cpp_python")
REF = json.load(open(os.path.join(RECORD_DIR, "quantize.json")))
import importlib.util  # noqa: E402
_spec = importlib.util.spec_from_file_location("record_quantize", os.path.join(RECORD_DIR, "record_quantize.py"))
_rq = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_rq)
TINY = [n for n, (src, _) in _rq.CASES.items() if src == "tiny"]
REAL = [n for n, (src, _) in _rq.CASES.items() if src != "tiny"]


def _quantize(name, tmp_path, how="byref"):
    src, fields = _rq.CASES[name]
    p = L.llama_model_quantize_default_params()
    for k, v in fields.items():
        setattr(p, k, v)
    dst = str(tmp_path / f"{name}.gguf")
    arg = {"byref": ctypes.byref(p), "pointer": ctypes.pointer(p), "struct": p}[how]
    rc = L.llama_model_quantize(_rq.source(src).encode(), dst.encode(), arg)
    return rc, dst


def _sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.mark.parametrize("name", TINY)
def test_tiny_model_file_types_are_llama_cpp_bytes(name, tmp_path):
    rc, dst = _quantize(name, tmp_path)
    assert rc == 0 == REF[name]["rc"]
    assert os.path.getsize(dst) == REF[name]["bytes"]
    assert _sha(dst) == REF[name]["sha256"]


@pytest.mark.realmodel
@pytest.mark.parametrize("name", REAL)
def test_requantised_real_models_are_llama_cpp_bytes(name, tmp_path):
    rc, dst = _quantize(name, tmp_path, how="pointer")
    assert rc == 0
    assert _sha(dst) == REF[name]["sha256"]
    if name != "gemma3-270m-q4_0":
        return
    llm = L.Llama(dst, n_ctx=64, verbose=False)              # and ubatch runs a file it wrote
    try:
        assert len(llm.tokenize(b"hello")) > 0 and llm(b"The capital of France is", max_tokens=2)["choices"]
    finally:
        llm.close()


def _fails(tmp_path, capfd, src, match, **fields):
    p = L.llama_model_quantize_default_params()
    for k, v in fields.items():
        setattr(p, k, v)
    dst = tmp_path / "out.gguf"
    assert L.llama_model_quantize(src.encode(), str(dst).encode(), p) == 1
    assert not dst.exists() and os.listdir(tmp_path) == []
    assert match in capfd.readouterr().err


def test_what_ubatch_cannot_write_fails_naming_it(tmp_path, capfd):
    tiny = _rq.source("tiny")
    _fails(tmp_path, capfd, tiny, "ftype 15", ftype=15)                                # Q4_K_M: k-quant mix
    _fails(tmp_path, capfd, tiny, "type Q4_K, which ubatch cannot write", ftype=7, output_tensor_type=12)
    _fails(tmp_path, capfd, "/nonexistent.gguf", "not found", ftype=7)
    _fails(tmp_path, capfd, tiny, "kv_overrides", ftype=7, kv_overrides=1)


@pytest.mark.realmodel
def test_requantising_needs_allow_requantize(tmp_path, capfd):
    from ubatch.model import fetch
    _fails(tmp_path, capfd, str(fetch.path("gemma3-270m")), "requantizing from type Q5_0 is disabled", ftype=7)


def test_params_are_converted_as_ctypes_does(tmp_path):
    for how in ("struct", "pointer", "byref"):
        assert _quantize("tiny-q8_0", tmp_path, how)[0] == 0
    with pytest.raises(ctypes.ArgumentError):
        L.llama_model_quantize(b"a", b"b", 5)
