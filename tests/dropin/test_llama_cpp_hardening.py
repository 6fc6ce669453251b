"""The llama_batch bounds and the drop-in's C-style return codes: a llama_batch whose n_tokens exceeds what
llama_batch_init allocated is refused (-1, llama.cpp's invalid batch) before any row is read; an embedding
batch narrower than the model is refused; llama_token_to_piece with lstrip < 0 strips nothing and
llama_tokenize with text_len < 0 returns INT32_MIN, as return codes, never exceptions."""
import ctypes

import numpy as np

import ubatch.llama_cpp as L
from ubatch.models import TINY_LLAMA_PATH

import gguf_util as G


def _model_ctx(path=TINY_LLAMA_PATH, **fields):
    model = L.llama_model_load_from_file(str(path).encode(), L.llama_model_default_params())
    cp = L.llama_context_default_params()
    for k, v in fields.items():
        setattr(cp, k, v)
    return model, L.llama_init_from_model(model, cp)


def test_n_tokens_beyond_the_allocation_is_an_invalid_batch():
    model, ctx = _model_ctx(n_ctx=256, n_batch=64)
    b = L.llama_batch_init(8, 0, 1)
    for i in range(8):
        b.token[i], b.pos[i], b.n_seq_id[i], b.seq_id[i][0], b.logits[i] = 1, i, 1, 0, i == 7
    for n in (1 << 28, 9, 2**31 - 1):
        b.n_tokens = n
        assert L.llama_decode(ctx, b) == -1
    # re-pointing one field at a smaller batch of llama_batch_init is caught too
    small = L.llama_batch_init(2, 0, 1)
    b.n_tokens, b.pos = 8, small.pos
    assert L.llama_decode(ctx, b) == -1
    b.pos = L.llama_batch_init(8, 0, 1).pos
    for i in range(8):
        b.pos[i] = i
    b.n_tokens = 8
    assert L.llama_decode(ctx, b) == 0           # the batch itself is fine
    L.llama_free(ctx)
    L.llama_model_free(model)


def test_an_embedding_batch_narrower_than_the_model_is_refused():
    model, ctx = _model_ctx(n_ctx=256)
    n_embd = L.llama_model_n_embd(model)
    for width, rc in ((n_embd // 2, -1), (1, -1), (n_embd, 0)):
        e = L.llama_batch_init(2, width, 1)
        e.n_tokens = 2
        for i in range(2):
            e.pos[i], e.n_seq_id[i], e.seq_id[i][0], e.logits[i] = i, 1, 0, 1
        arr = np.ctypeslib.as_array(e.embd, (2 * width,))
        arr[:] = 0.01
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        assert L.llama_decode(ctx, e) == rc, width
        L.llama_batch_free(e)
    L.llama_free(ctx)
    L.llama_model_free(model)


def test_token_to_piece_negative_lstrip_and_tokenize_negative_length(tmp_path):
    model = L.llama_model_load_from_file(G.small_model(tmp_path / "m.gguf").encode(), L.llama_model_default_params())
    v = L.llama_model_get_vocab(model)
    space_a = G.vocab_tokens().index("Ġa")
    buf = ctypes.create_string_buffer(16)
    assert L.llama_token_to_piece(v, space_a, buf, 16, 0, False) == 2 and buf.raw[:2] == b" a"
    assert L.llama_token_to_piece(v, space_a, buf, 16, 1, False) == 1 and buf.raw[:1] == b"a"
    for lstrip in (-1, -(2**31)):
        assert L.llama_token_to_piece(v, space_a, buf, 16, lstrip, False) == 2 and buf.raw[:2] == b" a"
    toks = (L.llama_token * 16)()
    assert L.llama_tokenize(v, b"ab", 2, toks, 16, False, False) == 1
    for n in (-1, -5, -(2**31)):
        assert L.llama_tokenize(v, b"ab", n, toks, 16, False, False) == -2**31
    L.llama_model_free(model)
