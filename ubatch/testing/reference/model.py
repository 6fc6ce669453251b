"""The GGUF side of the float64 reference: hyperparameters and tensors read with `gguf.GGUFReader` (not with
ubatch's own reader, so a misread key in ubatch does not repeat here), weights dequantised with
`gguf.quants.dequantize` when a matmul needs them (nothing is kept dequantised: a real model in float32 would
be several GB). Hyperparameters follow llama.cpp's defaults as docs/llama-cpp-behaviours.md §M1 states them."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import numpy as np

from ubatch.common.params import ROPE_NEOX, ROPE_NORM  # llama.cpp's rope_type values
ARCHS = ("llama", "qwen2", "gemma3")


@dataclass
class RefHParams:
    arch: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    rms_eps: float
    rope_type: int
    freq_base: float
    freq_scale: float
    freq_base_swa: float = 10000.0
    n_swa: int = 0
    swa: Tuple[bool, ...] = field(default_factory=tuple)
    q_scale: float = 1.0          # gemma3: Q x 1/sqrt(head_dim) after RoPE
    kq_scale: float = 1.0
    embd_scale: float = 1.0       # gemma3: sqrt(n_embd)
    softcap: float = 0.0

    def rope(self, il: int) -> Tuple[float, float]:
        if self.n_swa > 0 and self.swa[il]:
            return self.freq_base_swa, 1.0
        return self.freq_base, self.freq_scale


class RefModel:
    """One GGUF file: `hp`, `tensor(name)` (the reader's tensor or None), `vector(name)` float64,
    `dequant(name, r0, r1)` float32 rows [r1 - r0, n_cols] of a matrix."""

    def __init__(self, path: str, cache: bool = False) -> None:
        """cache=True keeps every matrix dequantised (float32) after its first use: ~4 bytes per weight
        (2 GB for Qwen2.5 0.5B), for runs of many forwards."""
        import gguf
        self.path = str(path)
        self._cache: Optional[Dict[str, np.ndarray]] = {} if cache else None
        r = gguf.GGUFReader(self.path)
        self.fields = r.fields
        self.tensors: Dict[str, object] = {t.name: t for t in r.tensors}
        self.hp = self._hparams()

    # -- metadata
    def meta(self, key: str, default=None):
        f = self.fields.get(key)
        if f is None:
            return default
        return f.contents()

    def _req(self, key: str):
        v = self.meta(key)
        if v is None:
            raise ValueError(f"{self.path}: key not found in model: {key}")
        return v

    def _hparams(self) -> RefHParams:
        arch = self._req("general.architecture")
        if arch not in ARCHS:
            raise ValueError(f"{self.path}: the reference knows {ARCHS}, not {arch!r}")
        a = arch + "."
        n_embd = int(self._req(a + "embedding_length"))
        n_layer = int(self._req(a + "block_count"))

        def per_layer(key, default):
            v = self.meta(a + key, default)
            if isinstance(v, (list, tuple, np.ndarray)):
                if len(set(int(x) for x in v)) != 1:
                    raise ValueError(f"{key} varies per layer")
                v = v[0]
            return int(v)

        n_head = per_layer("attention.head_count", 0)
        n_head_kv = per_layer("attention.head_count_kv", n_head)
        n_ff = per_layer("feed_forward_length", 0)
        head_dim = int(self.meta(a + "attention.key_length", n_embd // n_head))
        if int(self.meta(a + "attention.value_length", head_dim)) != head_dim:
            raise ValueError("key_length != value_length")
        if int(self.meta(a + "rope.dimension_count", head_dim)) != head_dim:
            raise ValueError("partial RoPE is not in the reference")
        scaling = self.meta(a + "rope.scaling.type", "linear")
        if scaling not in ("none", "linear"):
            raise ValueError(f"rope scaling {scaling!r} is not in the reference")
        factor = self.meta(a + "rope.scaling.factor", self.meta(a + "rope.scale_linear", 0.0)) or 0.0
        freq_scale = 1.0 if (not factor or scaling == "none") else 1.0 / float(factor)
        toks = self.fields.get("tokenizer.ggml.tokens")
        if toks is not None and self.meta("tokenizer.ggml.model") != "no_vocab":
            n_vocab = len(toks.data)
        else:
            n_vocab = int(self.meta(a + "vocab_size", 0)) or int(self.tensors["token_embd.weight"].shape[1])
        if "rope_freqs.weight" in self.tensors:
            raise ValueError("rope_freqs.weight is not in the reference")
        hp = RefHParams(arch=arch, n_vocab=n_vocab, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
                        n_head_kv=n_head_kv, head_dim=head_dim, n_ff=n_ff,
                        rms_eps=float(self._req(a + "attention.layer_norm_rms_epsilon")),
                        rope_type=ROPE_NORM if arch == "llama" else ROPE_NEOX,
                        freq_base=float(self.meta(a + "rope.freq_base", 10000.0)), freq_scale=freq_scale,
                        swa=tuple([False] * n_layer), kq_scale=1.0 / math.sqrt(head_dim))
        if arch == "gemma3":
            n_swa = int(self.meta(a + "attention.sliding_window", 0) or 0)
            if n_swa > 0:
                hp.n_swa = n_swa
                pat = self.meta(a + "attention.sliding_window_pattern")
                if isinstance(pat, (list, tuple, np.ndarray)):
                    hp.swa = tuple(bool(b) for b in pat)
                else:
                    n = 6 if pat is None else int(pat)
                    hp.swa = tuple((n == 0) or (il % n < n - 1) for il in range(n_layer))
                hp.freq_base_swa = float(self.meta(a + "rope.freq_base_swa", 10000.0))
            hp.q_scale = 1.0 / math.sqrt(head_dim if n_layer != 62 else n_embd // n_head)
            hp.kq_scale = 1.0
            hp.embd_scale = math.sqrt(n_embd)
            hp.softcap = float(self.meta(a + "final_logit_softcapping", 0.0) or 0.0)
        return hp

    # -- tensors
    def tensor(self, name: str):
        return self.tensors.get(name)

    def has(self, name: str) -> bool:
        return name in self.tensors

    def vector(self, name: str) -> Optional[np.ndarray]:
        t = self.tensors.get(name)
        if t is None:
            return None
        return self.dequant(name).reshape(-1).astype(np.float64)

    def wtype(self, name: str) -> int:
        return int(self.tensors[name].tensor_type)

    def n_rows(self, name: str) -> int:
        t = self.tensors[name]
        return int(t.shape[1]) if len(t.shape) > 1 else 1

    def dequant(self, name: str, r0: int = 0, r1: Optional[int] = None) -> np.ndarray:
        """Rows [r0, r1) of tensor `name` as float32 [rows, n_cols] (gguf.quants)."""
        if self._cache is not None:
            if name not in self._cache:
                self._cache[name] = self._dequant(name, 0, None)
            return self._cache[name][r0:r1]
        return self._dequant(name, r0, r1)

    def _dequant(self, name: str, r0: int, r1: Optional[int]) -> np.ndarray:
        import gguf
        t = self.tensors[name]
        data = t.data
        if data.ndim == 1:
            data = data.reshape(1, -1)
        data = data[r0:r1]
        qt = t.tensor_type
        if qt == gguf.GGMLQuantizationType.F32:
            return np.asarray(data, dtype=np.float32).reshape(data.shape[0], -1)
        if qt == gguf.GGMLQuantizationType.F16:
            return np.asarray(data).view(np.float16).astype(np.float32).reshape(data.shape[0], -1)
        return gguf.quants.dequantize(np.asarray(data), qt).reshape(data.shape[0], -1)

    def block_mins(self, name: str, r0: int = 0, r1: Optional[int] = None) -> np.ndarray:
        """Q4_1 / Q5_1: the per-block min m (fp16 bytes 2..3 of each block) as float64 [rows, n_cols/32]."""
        t = self.tensors[name]
        bb = {3: 20, 7: 24}[int(t.tensor_type)]
        raw = np.asarray(t.data[r0:r1])
        blocks = raw.reshape(raw.shape[0], -1, bb)
        return np.ascontiguousarray(blocks[:, :, 2:4]).view(np.float16)[..., 0].astype(np.float64)
