"""Model: the weights and hyperparameters of a llama-architecture model, read from GGUF with the `gguf`
package (the format's own Python reader). Tensors are held as float32 numpy arrays (f16/bf16 and the
quantised types gguf can dequantise are converted on load)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

SUPPORTED_ARCHS = ("llama",)
ROPE_NORM = 0  # llama.cpp's LLAMA_ROPE_TYPE_NORM: the rope type of the llama architecture


@dataclass
class LayerWeights:
    """One transformer block; matrices are (out_features, in_features) as stored in GGUF."""
    attn_norm: np.ndarray      # [n_embd]
    wq: np.ndarray             # [n_head * head_dim, n_embd]
    wk: np.ndarray             # [n_head_kv * head_dim, n_embd]
    wv: np.ndarray             # [n_head_kv * head_dim, n_embd]
    wo: np.ndarray             # [n_embd, n_head * head_dim]
    ffn_norm: np.ndarray       # [n_embd]
    w_gate: np.ndarray         # [n_ff, n_embd]
    w_up: np.ndarray           # [n_ff, n_embd]
    w_down: np.ndarray         # [n_embd, n_ff]
    # fused, transposed copies for one matmul each: x @ wqkv_t -> [q | k | v], x @ wgu_t -> [gate | up]
    wqkv_t: np.ndarray = field(init=False, repr=False)
    wgu_t: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.wqkv_t = np.ascontiguousarray(np.concatenate([self.wq, self.wk, self.wv], axis=0).T)
        self.wgu_t = np.ascontiguousarray(np.concatenate([self.w_gate, self.w_up], axis=0).T)


class Model:
    """A llama-family decoder. Attributes follow api.md (n_vocab, n_embd, n_layer, n_head, n_head_kv,
    n_ctx_train) plus head_dim, n_ff, rms_eps, rope_base, rope_freq_scale, n_rot, rope_type, n_pos_per_embd."""

    def __init__(self, *, n_vocab: int, n_embd: int, n_layer: int, n_head: int, n_head_kv: int,
                 n_ctx_train: int, n_ff: int, rms_eps: float, rope_base: float, n_rot: int,
                 tok_embd: np.ndarray, output_norm: np.ndarray, output: np.ndarray,
                 layers: List[LayerWeights], head_dim: Optional[int] = None, rope_type: int = ROPE_NORM,
                 rope_freq_scale: float = 1.0, name: str = "", arch: str = "llama") -> None:
        self.arch = arch
        self.name = name
        self.n_vocab = int(n_vocab)
        self.n_embd = int(n_embd)
        self.n_layer = int(n_layer)
        self.n_head = int(n_head)
        self.n_head_kv = int(n_head_kv)
        self.n_ctx_train = int(n_ctx_train)
        self.n_ff = int(n_ff)
        self.head_dim = int(head_dim) if head_dim else self.n_embd // max(self.n_head, 1)
        self.rms_eps = float(rms_eps)
        self.rope_base = float(rope_base)
        self.rope_freq_scale = float(rope_freq_scale)
        self.n_rot = int(n_rot)
        self.rope_type = int(rope_type)
        self.n_pos_per_embd = 1
        self.tok_embd = tok_embd
        self.output_norm = output_norm
        self.output = output
        self.layers = layers
        self._validate()

    def _validate(self) -> None:
        for name in ("n_vocab", "n_embd", "n_layer", "n_head", "n_head_kv", "n_ff", "head_dim", "n_rot"):
            if getattr(self, name) <= 0:
                raise ValueError(f"model hyperparameter {name} must be > 0, got {getattr(self, name)}")
        if self.n_head % self.n_head_kv:
            raise ValueError(f"n_head={self.n_head} is not a multiple of n_head_kv={self.n_head_kv}")
        if self.n_rot > self.head_dim or self.n_rot % 2:
            raise ValueError(f"rope dimension count {self.n_rot} must be even and <= head_dim {self.head_dim}")
        if len(self.layers) != self.n_layer:
            raise ValueError(f"model has {len(self.layers)} layers, block_count says {self.n_layer}")
        e, hq, hk = self.n_embd, self.n_head * self.head_dim, self.n_head_kv * self.head_dim
        _shape("token_embd.weight", self.tok_embd, (self.n_vocab, e))
        _shape("output_norm.weight", self.output_norm, (e,))
        _shape("output.weight", self.output, (self.n_vocab, e))
        for i, L in enumerate(self.layers):
            p = f"blk.{i}."
            _shape(p + "attn_norm.weight", L.attn_norm, (e,))
            _shape(p + "attn_q.weight", L.wq, (hq, e))
            _shape(p + "attn_k.weight", L.wk, (hk, e))
            _shape(p + "attn_v.weight", L.wv, (hk, e))
            _shape(p + "attn_output.weight", L.wo, (e, hq))
            _shape(p + "ffn_norm.weight", L.ffn_norm, (e,))
            _shape(p + "ffn_gate.weight", L.w_gate, (self.n_ff, e))
            _shape(p + "ffn_up.weight", L.w_up, (self.n_ff, e))
            _shape(p + "ffn_down.weight", L.w_down, (e, self.n_ff))

    @classmethod
    def from_gguf(cls, path: "str | os.PathLike") -> "Model":
        """Load a llama-architecture GGUF file (f32/f16/bf16 tensors, quantised types gguf can dequantise)."""
        try:
            import gguf
        except ImportError as e:  # pragma: no cover - dependency missing
            raise ImportError("Model.from_gguf needs the `gguf` package (pip install gguf)") from e
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"GGUF file not found: {path}")
        try:
            reader = gguf.GGUFReader(path, "r")
        except Exception as e:
            raise ValueError(f"{path}: not a readable GGUF file ({e})") from e
        kv = _Fields(reader, path)
        arch = kv.get("general.architecture")
        if arch not in SUPPORTED_ARCHS:
            raise ValueError(f"{path}: unsupported architecture {arch!r} (supported: {', '.join(SUPPORTED_ARCHS)})")
        tensors = {t.name: t for t in reader.tensors}

        def tensor(name: str, required: bool = True) -> Optional[np.ndarray]:
            t = tensors.get(name)
            if t is None:
                if required:
                    raise ValueError(f"{path}: tensor {name!r} is missing")
                return None
            return _to_f32(gguf, t, path)

        n_embd = kv.req(f"{arch}.embedding_length")
        n_head = kv.req(f"{arch}.attention.head_count")
        n_head_kv = kv.get(f"{arch}.attention.head_count_kv", n_head)
        head_dim = kv.get(f"{arch}.attention.key_length", n_embd // n_head)
        if kv.get(f"{arch}.attention.value_length", head_dim) != head_dim:
            raise ValueError(f"{path}: key_length != value_length is not supported")
        scaling = kv.get(f"{arch}.rope.scaling.type", "none")
        freq_scale = 1.0
        if scaling == "linear":
            freq_scale = 1.0 / float(kv.get(f"{arch}.rope.scaling.factor", 1.0))
        elif scaling not in ("none", None):
            raise ValueError(f"{path}: unsupported rope scaling type {scaling!r} (supported: none, linear)")
        tok_embd = tensor("token_embd.weight")
        n_vocab = kv.get(f"{arch}.vocab_size")
        if n_vocab is None:
            toks = kv.get("tokenizer.ggml.tokens")
            n_vocab = len(toks) if toks is not None else tok_embd.shape[0]
        n_layer = kv.req(f"{arch}.block_count")
        output = tensor("output.weight", required=False)
        layers = []
        for i in range(n_layer):
            p = f"blk.{i}."
            layers.append(LayerWeights(
                attn_norm=tensor(p + "attn_norm.weight"), wq=tensor(p + "attn_q.weight"),
                wk=tensor(p + "attn_k.weight"), wv=tensor(p + "attn_v.weight"),
                wo=tensor(p + "attn_output.weight"), ffn_norm=tensor(p + "ffn_norm.weight"),
                w_gate=tensor(p + "ffn_gate.weight"), w_up=tensor(p + "ffn_up.weight"),
                w_down=tensor(p + "ffn_down.weight")))
        for name in tensors:
            if name.endswith(".bias"):
                raise ValueError(f"{path}: tensor {name!r}: biases are not supported")
        return cls(n_vocab=n_vocab, n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv,
                   n_ctx_train=kv.req(f"{arch}.context_length"), n_ff=kv.req(f"{arch}.feed_forward_length"),
                   rms_eps=kv.get(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5),
                   rope_base=kv.get(f"{arch}.rope.freq_base", 10000.0),
                   n_rot=kv.get(f"{arch}.rope.dimension_count", head_dim), head_dim=head_dim,
                   tok_embd=tok_embd, output_norm=tensor("output_norm.weight"),
                   output=output if output is not None else tok_embd,  # tied embeddings
                   layers=layers, rope_type=ROPE_NORM, rope_freq_scale=freq_scale,
                   name=str(kv.get("general.name", os.path.basename(path))), arch=arch)

    def __repr__(self) -> str:
        return (f"Model({self.name!r}, arch={self.arch}, n_vocab={self.n_vocab}, n_embd={self.n_embd}, "
                f"n_layer={self.n_layer}, n_head={self.n_head}, n_head_kv={self.n_head_kv}, n_ff={self.n_ff})")


def _shape(name: str, arr: np.ndarray, want: tuple) -> None:
    if arr.shape != want:
        raise ValueError(f"tensor {name!r} has shape {arr.shape}, expected {want}")


def _to_f32(gguf, t, path: str) -> np.ndarray:
    """A tensor as a C-contiguous float32 array of numpy shape (outer, ..., inner)."""
    qt = gguf.GGMLQuantizationType
    shape = tuple(int(d) for d in reversed([int(x) for x in t.shape]))
    if t.tensor_type == qt.F32:
        arr = np.asarray(t.data, dtype=np.float32)
    elif t.tensor_type == qt.F16:
        arr = np.asarray(t.data).astype(np.float32)
    else:
        try:
            arr = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
        except (NotImplementedError, KeyError, ValueError) as e:
            raise ValueError(f"{path}: tensor {t.name!r} has unsupported type {t.tensor_type.name} ({e})") from e
        arr = np.asarray(arr, dtype=np.float32)
    return np.array(arr.reshape(shape), dtype=np.float32, order="C", copy=True)  # detach from the file map


class _Fields:
    """GGUF metadata access by key."""

    def __init__(self, reader, path: str) -> None:
        self._f = reader.fields
        self._path = path

    def get(self, key: str, default=None):
        f = self._f.get(key)
        if f is None:
            return default
        v = f.contents()
        return v

    def req(self, key: str):
        v = self.get(key)
        if v is None:
            raise ValueError(f"{self._path}: metadata key {key!r} is missing")
        return v
