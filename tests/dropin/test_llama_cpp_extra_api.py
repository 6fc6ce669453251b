"""The smaller low-level names (ubatch/llama_cpp/_extra_api.py) and ctypes-style argument conversion. Expected
values were read from llama-cpp-python 0.3.36 (the same calls on the real library, this machine)."""
import ctypes

import pytest

import ubatch.llama_cpp as L
from ubatch.models import TINY_LLAMA_PATH


@pytest.fixture(scope="module")
def model():
    m = L.llama_model_load_from_file(TINY_LLAMA_PATH.encode(), L.llama_model_default_params())
    yield m
    L.llama_model_free(m)


def test_enum_names_as_llama_cpp():
    assert L.llama_ftype_name(15) == b"Q4_K - Medium" and L.llama_ftype_name(0) == b"all F32"
    assert L.llama_ftype_name(5) == b"unknown, may not work"
    assert L.llama_ftype_name(1024 + 15) == b"(guessed) Q4_K - Medium"
    assert L.llama_model_meta_key_str(L.LLAMA_MODEL_META_KEY_SAMPLING_TOP_K) == b"general.sampling.top_k"
    assert L.llama_model_meta_key_str(12) is None
    assert [L.llama_flash_attn_type_name(i) for i in (-1, 0, 1)] == [b"auto", b"disabled", b"enabled"]
    assert [L.llama_load_mode_name(i) for i in range(-1, 5)] == [b"auto", b"none", b"mmap", b"mlock",
                                                                  b"mmap+mlock", b"dio"]
    assert L.llama_load_mode_from_str(b"mmap") == 1 and L.llama_load_mode_from_str(b"auto") == -1
    with pytest.raises(ValueError, match="unknown load mode: xx"):    # llama.cpp aborts the process here
        L.llama_load_mode_from_str(b"xx")
    assert L.llama_max_tensor_buft_overrides() == 4096
    p = L.llama_model_quantize_default_params()
    assert (p.nthread, p.ftype, p.quantize_output_tensor, p.max_buf_size) == (0, 7, True, 8 << 30)


def test_split_paths():
    buf = ctypes.create_string_buffer(256)
    assert L.llama_split_path(buf, 256, b"/m/x", 2, 5) == 24 and buf.value == b"/m/x-00003-of-00005.gguf"
    assert L.llama_split_prefix(buf, 256, b"/m/x-00003-of-00005.gguf", 2, 5) == 4 and buf.value == b"/m/x"
    assert L.llama_split_prefix(buf, 256, b"/m/x-00003-of-00005.gguf", 1, 5) == 0
    small = ctypes.create_string_buffer(8)
    assert L.llama_split_path(small, 8, b"/m/x", 2, 5) == 0 and small.value == b"/m/x-00"
    with pytest.raises(ctypes.ArgumentError):
        L.llama_split_path(b"immutable", 8, b"/m/x", 2, 5)


def test_model_file_type_and_classifier(model):
    assert L.llama_model_ftype(model) == 0                  # the tiny model is all F32
    assert L.llama_model_n_cls_out(model) == 0 and L.llama_model_cls_label(model, 0) is None
    assert L.llama_model_n_layer_nextn(model) == 0


def test_ctypes_arguments_convert_as_ctypes_does(model):
    """An instance of the declared argtype passes (a beam-search client hands c_int objects), a different
    ctypes type is refused with ctypes' own message, ints and numpy ints pass, floats do not."""
    import numpy as np
    vocab = L.llama_model_get_vocab(model)
    for tok in (3, ctypes.c_int(3), ctypes.c_int32(3), np.int64(3), True):
        assert L.llama_vocab_is_eog(vocab, tok) == L.llama_vocab_is_eog(vocab, 3)
    for bad in (ctypes.c_int64(3), ctypes.c_uint32(3), 3.0):
        with pytest.raises(ctypes.ArgumentError, match="argument 2"):
            L.llama_vocab_is_eog(vocab, bad)
    chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    L.llama_sampler_chain_add(chain, L.llama_sampler_init_temp(ctypes.c_float(0.5)))
    with pytest.raises(ctypes.ArgumentError):
        L.llama_sampler_init_temp(ctypes.c_double(0.5))
    L.llama_sampler_free(chain)


def test_kv_types_refused_as_llama_cpp_does():
    # tiny-llama's head_dim 16 is not a multiple of q8_0's block; a quantised V needs flash attention (llama.cpp
    # fails the context the same way: ValueError); a GGML_TYPE_* id that is no K/V type names the parameter
    for kw in ({"type_k": 8}, {"type_v": 2}):
        with pytest.raises(ValueError):
            L.Llama(TINY_LLAMA_PATH, n_ctx=64, verbose=False, **kw)
    with pytest.raises(NotImplementedError, match="type_k"):
        L.Llama(TINY_LLAMA_PATH, n_ctx=64, verbose=False, type_k=12)
