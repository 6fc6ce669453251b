"""ubatch.llama_cpp's low-level API against llama-cpp-python 0.3.36: the client scripts of
tests/data/llama_cpp_python/scripts.py run on the shipped tiny model and must print what they printed on
llama-cpp-python (recorded in reference.json): batches filled in place, return codes, derived sizes, struct
layouts and defaults. Logits agree to ~1e-3 (llama.cpp keeps the KV cache in f16 with its own kernels), so
tokens are compared exactly and logit values with a tolerance."""
import ctypes
import json
import os
import sys

import numpy as np
import pytest

import ubatch.llama_cpp as L
import ubatch.llama_cpp.llama_cpp as LL
from ubatch.models import TINY_LLAMA_PATH

import suite_paths  # noqa: E402
DATA = os.path.join(suite_paths.DATA, "llama_cpp_python")
sys.path.insert(0, DATA)
import scripts  # noqa: E402

REF = json.load(open(os.path.join(DATA, "reference.json")))


def test_layouts_defaults_and_constants_match():
    got = scripts.script_layouts(L)
    ref = REF["layouts"]
    assert got["structs"] == ref["structs"]
    assert got["defaults"] == ref["defaults"]
    missing = {k: v for k, v in ref["constants"].items() if got["constants"].get(k) != v}
    assert not missing
    for k in ("max_parallel_sequences", "max_devices", "supports_mmap", "supports_gpu_offload"):
        assert got[k] == ref[k]


def test_batched_generation_idiom_matches():
    got = scripts.script_lowlevel_greedy(L, TINY_LLAMA_PATH)
    ref = REF["tiny"]["lowlevel_greedy"]
    assert got["tokens"] == ref["tokens"]
    assert got["rc"] == ref["rc"] and got["pos_max"] == ref["pos_max"]
    np.testing.assert_allclose(got["last_logits_head"], ref["last_logits_head"], atol=5e-3)


def test_error_codes_match():
    """A context too small (1 after 4 x 64 tokens in 256 cells), a seq id beyond n_seq_max (-1), an invalid
    token (-1), positions that do not continue the sequence (-1), NULL for an invalid logits row."""
    assert json.loads(json.dumps(scripts.script_errors(L, TINY_LLAMA_PATH))) == REF["tiny"]["errors"]


def test_llama_generate_matches():
    assert scripts.script_llama_generate(L, TINY_LLAMA_PATH) == REF["tiny"]["generate"]


def _model_ctx(**fields):
    model = L.llama_model_load_from_file(TINY_LLAMA_PATH.encode(), L.llama_model_default_params())
    cp = L.llama_context_default_params()
    for k, v in fields.items():
        setattr(cp, k, v)
    return model, L.llama_init_from_model(model, cp)


def test_batch_init_is_a_real_struct_with_null_sentinel():
    b = L.llama_batch_init(4, 0, 2)
    assert isinstance(b, L.llama_batch) and b.n_tokens == 0
    b.seq_id[3][1] = 1                      # every row has n_seq_max ids
    with pytest.raises(ValueError, match="NULL pointer access"):
        b.seq_id[4][0] = 0                  # the NULL sentinel after the last row (langchain PR #17594)
    b.logits[0] = True
    assert b.logits[0] == 1
    L.llama_batch_free(b)
    e = L.llama_batch_init(2, 8, 1)         # embeddings batch: embd set, token NULL
    assert not e.token and bool(e.embd)
    L.llama_batch_free(e)


def test_unregistered_handbuilt_batch_and_get_one():
    model, ctx = _model_ctx(n_ctx=256, n_batch=32, n_seq_max=2, kv_unified=True)
    n = 3
    tok = (L.llama_token * n)(1, 2, 3)
    pos = (L.llama_pos * n)(0, 1, 2)
    nsq = (ctypes.c_int32 * n)(1, 1, 2)
    rows = [(L.llama_seq_id * 2)(0, 0), (L.llama_seq_id * 2)(0, 0), (L.llama_seq_id * 2)(0, 1)]
    table = (ctypes.POINTER(L.llama_seq_id) * (n + 1))(*[ctypes.cast(r, ctypes.POINTER(L.llama_seq_id))
                                                          for r in rows])
    logits = (ctypes.c_int8 * n)(0, 0, 1)
    b = L.llama_batch(n_tokens=n, token=tok, pos=pos, n_seq_id=nsq, seq_id=table, logits=logits)
    assert L.llama_decode(ctx, b) == 0
    mem = L.llama_get_memory(ctx)
    assert L.llama_memory_seq_pos_max(mem, 0) == 2 and L.llama_memory_seq_pos_max(mem, 1) == 2
    row = L.llama_get_logits_ith(ctx, -1)
    assert np.ctypeslib.as_array(row, shape=(256,)).shape == (256,) and row[0] == row[0]
    assert not L.llama_get_logits_ith(ctx, 0)           # not an output: NULL
    with pytest.raises(ValueError, match="NULL pointer access"):
        L.llama_get_logits_ith(ctx, 0)[0]
    one = (L.llama_token * 2)(4, 5)
    L.llama_memory_seq_rm(mem, -1, -1, -1)
    assert L.llama_decode(ctx, L.llama_batch_get_one(one, 2)) == 0
    assert L.llama_memory_seq_pos_max(mem, 0) == 1
    L.llama_free(ctx)
    L.llama_model_free(model)


def test_decode_never_raises_on_bad_input():
    model, ctx = _model_ctx(n_ctx=256, n_batch=16)
    b = L.llama_batch_init(32, 0, 1)
    assert L.llama_decode(ctx, b) == -1                 # n_tokens == 0
    b.n_tokens = 20                                     # > n_batch (llama.cpp aborts)
    for i in range(20):
        b.token[i], b.pos[i], b.n_seq_id[i], b.seq_id[i][0], b.logits[i] = 1, i, 1, 0, 0
    assert L.llama_decode(ctx, b) == -1
    b.n_tokens = 2
    b.n_seq_id[0] = 5                                   # more ids than the batch holds per row
    assert L.llama_decode(ctx, b) == -1
    b.n_seq_id[0] = 0
    assert L.llama_decode(ctx, b) == -1
    assert L.llama_decode(123456, b) == -1              # not a context
    L.llama_batch_free(b)
    L.llama_free(ctx)
    assert L.llama_decode(ctx, b) == -1                 # freed context
    L.llama_model_free(model)


def test_handles_are_ints_and_extra_args_are_ignored():
    model, ctx = _model_ctx(n_ctx=256)
    assert isinstance(model, int) and isinstance(ctx, int)
    vocab = L.llama_model_get_vocab(model)
    assert isinstance(vocab, int) and L.llama_vocab_n_tokens(vocab) == 256
    assert L.llama_n_ctx(ctypes.c_void_p(ctx)) == 256
    assert L.llama_get_model(ctx) == model
    assert L.llama_n_ctx(ctx, 99) == 256                # extra positional arguments are ignored (ctypes)
    with pytest.raises(ctypes.ArgumentError):
        L.llama_n_ctx(1.5)
    with pytest.raises(TypeError):
        L.llama_n_ctx()
    assert L.llama_model_load_from_file(b"/no/such/file.gguf", L.llama_model_default_params()) is None
    cp = L.llama_context_default_params()
    cp.n_seq_max = 300
    cp.logits_all = True                                # a field 0.3.36 no longer has: accepted silently
    assert L.llama_init_from_model(model, cp) is None
    L.llama_free(ctx)
    L.llama_model_free(model)


def test_metadata_functions():
    model = L.llama_model_load_from_file(TINY_LLAMA_PATH.encode(), L.llama_model_default_params())
    buf = ctypes.create_string_buffer(8)
    n = L.llama_model_meta_val_str(model, b"llama.rope.freq_base", buf, 8)
    assert n == len("10000.000000") and buf.value == b"10000.0"       # snprintf: truncated, NUL-terminated
    assert L.llama_model_meta_val_str(model, b"no.such.key", buf, 8) == -1
    assert L.llama_model_meta_count(model) == 14
    assert L.llama_model_chat_template(model, None) is None
    assert L.llama_model_n_embd(model) == 64 and L.llama_model_n_layer(model) == 2
    assert L.llama_model_n_params(model) > 0 and L.llama_model_size(model) > 0
    L.llama_model_free(model)


def test_deprecated_names_work_with_a_warning():
    model, ctx = _model_ctx(n_ctx=256, n_seq_max=2)
    b = L.llama_batch_get_one((L.llama_token * 3)(1, 2, 3), 3)
    assert L.llama_decode(ctx, b) == 0
    with pytest.warns(DeprecationWarning, match="llama_memory_seq_cp"):
        L.llama_kv_cache_seq_cp(ctx, 0, 1, -1, -1)
    with pytest.warns(DeprecationWarning):
        assert L.llama_kv_self_seq_pos_max(ctx, 1) == 2
    with pytest.warns(DeprecationWarning):
        L.llama_kv_cache_seq_rm(ctx, 1, -1, -1)
    with pytest.warns(DeprecationWarning):
        assert L.llama_n_vocab(model) == 256            # old code passes the model
    with pytest.warns(DeprecationWarning):
        assert L.llama_token_is_eog(model, 3) is False
    with pytest.warns(DeprecationWarning):
        L.llama_kv_cache_clear(ctx)
    assert L.llama_memory_seq_pos_max(L.llama_get_memory(ctx), 0) == -1
    with pytest.warns(DeprecationWarning):
        m2 = L.llama_load_model_from_file(TINY_LLAMA_PATH.encode(), L.llama_model_default_params())
    with pytest.warns(DeprecationWarning):
        c2 = L.llama_new_context_with_model(m2, L.llama_context_default_params())
    assert c2 is not None
    L.llama_backend_init(False)                          # the old numa argument is accepted
    L.llama_free(c2)
    L.llama_model_free(m2)
    L.llama_free(ctx)
    L.llama_model_free(model)


def test_c_llama_tokenize_symbol_is_callable_native_code():
    addr = ctypes.cast(LL._lib.llama_tokenize, ctypes.c_void_p).value
    assert addr                                         # what llguidance hands to Rust
    proto = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32,
                             ctypes.POINTER(ctypes.c_int32), ctypes.c_int32, ctypes.c_bool, ctypes.c_bool)
    fn = proto(addr)
    out = (ctypes.c_int32 * 4)()
    assert fn(0, b"hi", 2, out, 4, True, False) == -2**31        # NULL vocab: an error code, no crash
    assert fn(12345, b"hi", 2, out, 4, True, False) == -2**31    # unknown handle
    model = L.llama_model_load_from_file(TINY_LLAMA_PATH.encode(), L.llama_model_default_params())
    vocab = L.llama_model_get_vocab(model)
    assert fn(vocab, b"hi", 2, out, 4, True, False) == 0         # the tiny model has no vocabulary
    L.llama_model_free(model)


def test_log_callback_receives_llama_cpp_messages():
    seen = []
    cb = L.ggml_log_callback(lambda level, text, user: seen.append((level, text)))
    L.llama_log_set(cb, None)
    try:
        model, ctx = _model_ctx(n_ctx=256)
        b = L.llama_batch_init(1, 0, 1)
        b.n_tokens, b.token[0], b.pos[0], b.n_seq_id[0], b.seq_id[0][0], b.logits[0] = 1, 1, 0, 1, 3, 1
        assert L.llama_decode(ctx, b) == -1
        assert any(b"failed to decode, ret = -1" in t for _, t in seen)
        L.llama_batch_free(b)
        L.llama_free(ctx)
        L.llama_model_free(model)
    finally:
        L.llama_log_set(None, None)


def test_perf_and_system_info():
    model, ctx = _model_ctx(n_ctx=256)
    L.llama_decode(ctx, L.llama_batch_get_one((L.llama_token * 4)(1, 2, 3, 4), 4))
    d = L.llama_perf_context(ctx)
    assert d.n_p_eval == 4 and d.t_p_eval_ms >= 0
    L.llama_perf_context_reset(ctx)
    assert L.llama_perf_context(ctx).n_p_eval == 1        # llama.cpp reports max(1, n)
    assert L.llama_print_system_info().startswith(b"CPU : ")
    L.llama_free(ctx)
    L.llama_model_free(model)
