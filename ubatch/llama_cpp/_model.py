"""Model objects of the low-level layer: a GGUF file's metadata (as llama.cpp's llama_model_meta_* give it),
its vocabulary (ubatch.Tokenizer, when the file has one) and its weights (ubatch.Model), behind the integer
handles llama_model_load_from_file / llama_model_get_vocab return."""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from ubatch.llama_cpp import _llama_log
from ubatch.llama_cpp._handles import REGISTRY


def _meta_str(v) -> Optional[str]:
    """A GGUF value as llama.cpp's gguf_kv_to_str prints it; None for arrays (not in the model metadata)."""
    if isinstance(v, (list, tuple, np.ndarray)):
        return None
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (float, np.floating)):
        return "%f" % float(v)
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


def read_metadata(path: str):
    """(metadata key -> value, number of weight elements, bytes of the weights) of a GGUF file (ubatch's own
    memory-mapped reader)."""
    from ubatch.model.gguf_file import GGUFFile
    f = GGUFFile(path)
    return dict(f.metadata), _n_params(f), _n_bytes(f)


def _n_params(gf) -> int:
    return sum(int(np.prod([int(d) for d in t.ne])) for t in gf.tensors.values())


def _n_bytes(gf) -> int:
    """llama_model_size: the bytes of the weight tensors (not the file: metadata and padding excluded)."""
    return sum(int(t.nbytes) for t in gf.tensors.values())


def _load_tokenizer(path: str, raw: Dict[str, object]):
    if raw.get("tokenizer.ggml.model") in (None, "no_vocab", "none") or "tokenizer.ggml.tokens" not in raw:
        return None
    try:
        from ubatch.tokenizer import Tokenizer  # the tokenizer branch (docs/api.md)
    except ImportError:
        Tokenizer = None
    if Tokenizer is None:
        raise NotImplementedError(f"{path}: this build of ubatch has no tokenizer (ubatch.tokenizer), so a GGUF "
                                  f"vocabulary cannot be used")
    return Tokenizer.from_gguf(path)


class CModel:
    """What a llama_model handle names."""

    def __init__(self, path: str, params) -> None:
        self.path = path
        self.vocab_only = bool(params.vocab_only)
        self.model = None
        if not self.vocab_only:
            from ubatch.model.model import Model
            self.model = Model.from_gguf(path)
        gf = getattr(self.model, "file", None)
        if gf is not None and hasattr(gf, "metadata") and hasattr(gf, "tensors"):
            self.raw = dict(gf.metadata)
            self.n_params, self.size_bytes = _n_params(gf), _n_bytes(gf)
        else:
            self.raw, self.n_params, self.size_bytes = read_metadata(path)
        self.arch = str(self.raw.get("general.architecture", ""))
        self.meta: Dict[str, str] = {}
        for k, v in self.raw.items():
            s = _meta_str(v)
            if s is not None:
                self.meta[k] = s
        self.tokenizer = _load_tokenizer(path, self.raw)
        toks = self.raw.get("tokenizer.ggml.tokens")
        if self.model is not None:
            self.n_vocab = int(self.model.n_vocab)
        elif toks is not None:
            self.n_vocab = len(toks)
        else:
            self.n_vocab = int(self.raw.get(f"{self.arch}.vocab_size", 0))
        self.handle = REGISTRY.new("model", self)
        from ubatch.llama_cpp._vocab import CVocab
        self.vocab = CVocab(self)

    def hparam(self, name: str, default=0):
        if self.model is not None and hasattr(self.model, name):
            return getattr(self.model, name)
        keys = {"n_ctx_train": "context_length", "n_embd": "embedding_length", "n_layer": "block_count",
                "n_head": "attention.head_count", "n_head_kv": "attention.head_count_kv",
                "n_swa": "attention.sliding_window"}
        v = self.raw.get(f"{self.arch}.{keys.get(name, name)}", default)
        if name == "n_head_kv" and v == default:
            v = self.hparam("n_head", default)
        return int(v) if not isinstance(v, (list, np.ndarray)) else int(v[0])

    def free(self) -> None:
        REGISTRY.free(self.handle)
        self.vocab.free()
        self.model = None


def load(path: str, params) -> Optional[CModel]:
    try:
        return CModel(path, params)
    except FileNotFoundError as e:
        _llama_log.error(f"llama_model_load: error loading model: {e}")
    except NotImplementedError as e:
        _llama_log.error(f"llama_model_load: error loading model: {e}")
    except (ValueError, OSError, KeyError, TypeError) as e:
        _llama_log.error(f"llama_model_load: error loading model: {e}")
    _llama_log.error("llama_model_load_from_file_impl: failed to load model")
    return None
