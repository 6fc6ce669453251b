"""LLM.embed: pooled embeddings (mean / cls / last) of many texts per decode equal those computed one at a
time, and equal pooling the per-token hidden states of a plain Context by hand. The tiny model's forward uses
numpy's float32 matmul (BLAS), whose rounding may move by an ulp with the number of rows, so here the batch
comparison allows 1e-6; on the real models (test_llm_realmodel.py) it is bitwise."""
from __future__ import annotations

import numpy as np
import pytest

import ubatch
from ubatch.batch.container import Batch
from ubatch.models import tiny_llama

MODEL = tiny_llama()
TEXTS = ["short", "a somewhat longer text to embed", "日本語のテキスト", "x", "the quick brown fox jumps over",
         "lorem ipsum dolor sit amet, consectetur", "🙂🙂", "zz top"]


@pytest.mark.parametrize("pooling", ["mean", "cls", "last"])
def test_batch_equals_one_at_a_time(pooling):
    llm = ubatch.LLM(MODEL, n_ctx=1024, n_batch=64, n_seq_max=4)
    many = llm.embed(TEXTS, pooling=pooling, normalize=False)
    one = np.stack([ubatch.LLM(MODEL, n_ctx=256, n_seq_max=1).embed([t], pooling=pooling, normalize=False)[0]
                    for t in TEXTS])
    assert many.shape == (len(TEXTS), MODEL.n_embd) and many.dtype == np.float32
    assert np.allclose(many, one, rtol=0, atol=1e-6)


def test_pooling_matches_hidden_states_by_hand():
    llm = ubatch.LLM(MODEL, n_ctx=1024, n_seq_max=4)
    got = {p: llm.embed(TEXTS[:3], pooling=p, normalize=False) for p in ("mean", "cls", "last")}
    for i, t in enumerate(TEXTS[:3]):
        ids = np.frombuffer(t.encode(), np.uint8).astype(np.int32)
        ctx = ubatch.Context(MODEL, n_ctx=256, embeddings=True, pooling="none", type_k="f16", type_v="f16")
        ctx.decode(Batch.from_arrays(tokens=ids, pos=np.arange(len(ids), dtype=np.int32),
                                     output=np.ones(len(ids), np.int8)))
        h = ctx.get_embeddings()
        assert np.allclose(got["mean"][i], h.mean(axis=0), atol=1e-5)
        assert np.allclose(got["cls"][i], h[0], atol=1e-6) and np.allclose(got["last"][i], h[-1], atol=1e-6)


def test_normalize_and_errors():
    llm = ubatch.LLM(MODEL, n_ctx=512, n_seq_max=2)
    e = llm.embed(TEXTS)
    assert np.allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    with pytest.raises(ValueError, match="pooling"):
        llm.embed(TEXTS, pooling="max")
    with pytest.raises(ValueError, match="list of texts"):
        llm.embed("one string")
    with pytest.raises(ValueError, match="more than the 256"):
        llm.embed(["a" * 300])
    assert llm.embed([]).shape == (0, MODEL.n_embd)
