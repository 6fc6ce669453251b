"""Model.from_gguf: hyperparameters, tensor types, tied output, clear errors; the shipped tiny model."""
import os

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package is needed to read/write GGUF files")

from ubatch.model.gguf_model import Model  # noqa: E402
from ubatch.models import tiny_llama  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def test_tiny_llama_hyperparameters():
    m = tiny_llama()
    assert (m.n_vocab, m.n_embd, m.n_layer, m.n_head, m.n_head_kv, m.n_ctx_train) == (256, 64, 2, 4, 2, 512)
    assert (m.head_dim, m.n_ff, m.n_rot, m.rope_type, m.n_pos_per_embd) == (16, 128, 16, 0, 1)
    assert m.rope_base == 10000.0 and abs(m.rms_eps - 1e-5) < 1e-9
    assert m.output is not m.tok_embd and m.tok_embd.dtype == np.float32


def test_f16_model_is_upcast():
    m = Model.from_gguf(os.path.join(HERE, "data", "models", "tiny-llama-f16.gguf"))
    assert (m.n_vocab, m.n_embd, m.n_layer, m.n_head, m.n_head_kv, m.n_ff) == (256, 128, 4, 8, 8, 256)
    assert m.layers[0].wq.dtype == np.float32
    r = gguf.GGUFReader(os.path.join(HERE, "data", "models", "tiny-llama-f16.gguf"))
    t = next(t for t in r.tensors if t.name == "blk.3.ffn_down.weight")
    assert np.array_equal(m.layers[3].w_down, np.asarray(t.data).astype(np.float32))


def write_model(path, *, arch="llama", tied=False, qtype=None, drop=None, vocab_key=True, int_tensor=False):
    rng = np.random.default_rng(0)
    e, ff, nh, nkv, nv, nl = 32, 64, 4, 2, 40, 1
    hd = e // nh
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(128)
    w.add_embedding_length(e)
    w.add_block_count(nl)
    w.add_feed_forward_length(ff)
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(500000.0)
    w.add_rope_dimension_count(hd)
    if vocab_key:
        w.add_vocab_size(nv)
    tensors = {"token_embd.weight": (nv, e), "output_norm.weight": (e,)}
    if not tied:
        tensors["output.weight"] = (nv, e)
    for name, shp in (("attn_norm", (e,)), ("attn_q", (nh * hd, e)), ("attn_k", (nkv * hd, e)),
                      ("attn_v", (nkv * hd, e)), ("attn_output", (e, nh * hd)), ("ffn_norm", (e,)),
                      ("ffn_gate", (ff, e)), ("ffn_up", (ff, e)), ("ffn_down", (e, ff))):
        tensors[f"blk.0.{name}.weight"] = shp
    data = {}
    for name, shp in tensors.items():
        if name == drop:
            continue
        a = rng.standard_normal(shp).astype(np.float32)
        data[name] = a
        if int_tensor and name == "blk.0.attn_q.weight":
            w.add_tensor(name, a.astype(np.int32), raw_dtype=gguf.GGMLQuantizationType.I32)
        elif qtype is not None and len(shp) == 2:
            q = gguf.quants.quantize(a, qtype)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)
        else:
            w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return data


def test_tied_output_and_metadata(tmp_path):
    p = tmp_path / "tied.gguf"
    data = write_model(p, tied=True)
    m = Model.from_gguf(p)
    assert np.array_equal(m.output, data["token_embd.weight"])
    assert (m.n_vocab, m.n_embd, m.n_head, m.n_head_kv, m.n_ctx_train, m.n_rot) == (40, 32, 4, 2, 128, 8)
    assert m.rope_base == 500000.0 and abs(m.rms_eps - 1e-6) < 1e-12


def test_vocab_size_from_token_embd(tmp_path):
    p = tmp_path / "novocab.gguf"
    write_model(p, vocab_key=False)
    assert Model.from_gguf(p).n_vocab == 40


def test_quantised_tensors_are_dequantised(tmp_path):
    p = tmp_path / "q8.gguf"
    data = write_model(p, qtype=gguf.GGMLQuantizationType.Q8_0)
    m = Model.from_gguf(p)
    wq = m.layers[0].wq
    assert wq.dtype == np.float32 and wq.shape == (32, 32)
    assert np.abs(wq - data["blk.0.attn_q.weight"]).max() < 0.05  # Q8_0 error, not garbage


def test_unsupported_architecture(tmp_path):
    p = tmp_path / "gpt2.gguf"
    write_model(p, arch="gpt2")
    with pytest.raises(ValueError, match="unsupported architecture 'gpt2'"):
        Model.from_gguf(p)


def test_unsupported_tensor_type(tmp_path):
    p = tmp_path / "i32.gguf"
    write_model(p, int_tensor=True)
    with pytest.raises(ValueError, match="blk.0.attn_q.weight.*I32"):
        Model.from_gguf(p)


def test_missing_tensor_and_file(tmp_path):
    p = tmp_path / "missing.gguf"
    write_model(p, drop="blk.0.ffn_up.weight")
    with pytest.raises(ValueError, match="blk.0.ffn_up.weight"):
        Model.from_gguf(p)
    with pytest.raises(FileNotFoundError):
        Model.from_gguf(tmp_path / "nope.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(ValueError, match="not a readable GGUF"):
        Model.from_gguf(bad)
