"""Model: a GGUF decoder (llama, qwen2, gemma3, gemma2, qwen2moe, qwen3moe: ubatch.model.registry) with its
tensors memory-mapped in their block layout.

`Model.from_gguf(path)` parses the file (ubatch.model.gguf_file), reads the architecture's hyperparameters
(llama.cpp's defaults, ubatch.model.hparams) and checks every tensor it needs by name and shape before
returning: an unknown architecture or tensor type, a missing or mis-shaped tensor, or a truncated file raise
GGUFError (a ValueError) naming it; no partial model is ever returned. Nothing is dequantised at load: the
weights stay views of the read-only file map, so the resident memory is what the forward touches."""
from __future__ import annotations

import os
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ubatch.model import registry
from ubatch.model.gguf_file import GGUFError, GGUFFile
from ubatch.model.hparams import HParams, check_hparams
from ubatch.model.weights import TensorSource

METADATA_ARRAY_MAX = 16   # arrays in m.metadata are cut to their first 16 entries (tokenizer lists excluded)


class Model:
    """A loaded model. Public attributes (docs/api.md): arch, n_vocab, n_embd, n_layer, n_head, n_head_kv,
    n_ctx_train, n_swa, swa_layers, weight_bytes, path, metadata, tokenizer; also head_dim, n_ff, n_rot,
    rope_type, rope_base, rope_freq_scale, rms_eps, hparams, weights."""

    def __init__(self, file: GGUFFile, hparams: HParams, weights: Any, arch_module) -> None:
        self.file = file
        self.hparams = hparams
        self.weights = weights
        self.arch_module = arch_module
        self.path = file.path
        self.name = str(file.metadata.get("general.name", os.path.basename(file.path)))
        self.n_pos_per_embd = 1
        self._tokenizer = None
        self._metadata: Optional[Dict[str, Any]] = None

    @classmethod
    def from_gguf(cls, path: "str | os.PathLike") -> "Model":
        f = GGUFFile(path)
        arch = f.metadata.get("general.architecture")
        if not isinstance(arch, str):
            raise GGUFError(f"{f.path}: key not found in model: general.architecture")
        mod = registry.get(arch, f.path)
        hp = mod.load_hparams(f)
        check_hparams(f, hp)
        src = TensorSource(f)
        w = mod.load_weights(src, hp)
        unused = [n for n in f.tensors if n not in src.used]
        if unused:   # llama.cpp refuses such a file too ("wrong number of tensors"): a piece ubatch would ignore
            more = f" and {len(unused) - 1} more" if len(unused) > 1 else ""
            raise GGUFError(f"{f.path}: tensor '{unused[0]}'{more} not used by architecture {arch!r}: "
                            f"not supported")
        return cls(f, hp, w, mod)

    # ---- hyperparameters ----------------------------------------------------------------------------
    arch = property(lambda self: self.hparams.arch)
    n_vocab = property(lambda self: self.hparams.n_vocab)
    n_embd = property(lambda self: self.hparams.n_embd)
    n_layer = property(lambda self: self.hparams.n_layer)
    n_head = property(lambda self: self.hparams.n_head)
    n_head_kv = property(lambda self: self.hparams.n_head_kv)
    n_ctx_train = property(lambda self: self.hparams.n_ctx_train)
    n_ff = property(lambda self: self.hparams.n_ff)
    head_dim = property(lambda self: self.hparams.head_dim)
    n_rot = property(lambda self: self.hparams.n_rot)
    rope_type = property(lambda self: self.hparams.rope_type)
    rope_base = property(lambda self: self.hparams.rope_freq_base)
    rope_freq_scale = property(lambda self: self.hparams.rope_freq_scale)
    rms_eps = property(lambda self: self.hparams.rms_eps)
    n_swa = property(lambda self: self.hparams.n_swa)

    @property
    def swa_layers(self) -> Tuple[bool, ...]:
        """is_swa per layer (all False without a sliding window)."""
        return tuple(self.hparams.swa_layers) if self.hparams.n_swa > 0 else tuple([False] * self.n_layer)

    @property
    def tied_output(self) -> bool:
        return bool(self.weights.tied)

    @property
    def weight_bytes(self) -> int:
        """Bytes of all tensors as stored in the file (the tied output counted once)."""
        return self.file.data_bytes()

    @property
    def metadata(self) -> Dict[str, Any]:
        """GGUF key -> python value; arrays cut to their first 16 entries, tokenizer.ggml.* lists left out."""
        if self._metadata is None:
            out: Dict[str, Any] = {}
            for k, v in self.file.metadata.items():
                if isinstance(v, (np.ndarray, list)):
                    if k.startswith("tokenizer.ggml."):
                        continue
                    v = [x.item() if hasattr(x, "item") else x for x in list(v[:METADATA_ARRAY_MAX])]
                out[k] = v
            self._metadata = out
        return dict(self._metadata)

    @property
    def tokenizer(self):
        """ubatch.tokenizer.Tokenizer.from_gguf(self.path), built on first use."""
        if self._tokenizer is None:
            try:
                from ubatch.tokenizer import Tokenizer
            except ImportError as e:
                raise RuntimeError(f"model.tokenizer needs ubatch.tokenizer.Tokenizer, which is not available in "
                                   f"this build ({e})") from e
            self._tokenizer = Tokenizer.from_gguf(self.path)
        return self._tokenizer

    def __repr__(self) -> str:
        return (f"Model({self.name!r}, arch={self.arch}, n_vocab={self.n_vocab}, n_embd={self.n_embd}, "
                f"n_layer={self.n_layer}, n_head={self.n_head}, n_head_kv={self.n_head_kv}, n_ff={self.n_ff})")


__all__ = ["Model", "GGUFError"]
