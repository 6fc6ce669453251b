"""ModelRunner: the forward pass of one ubatch over runner-owned K/V data.

The Context owns the plan (allocator, KV cells, outputs); the runner owns the weights and the K/V data
(per layer `[n_stream, kv_size, n_head_kv, head_dim]`). What the Context calls, in order, per decode:
`update(copies, shift)` when a stream copy / K-shift is pending, then per ubatch `save_cells(place)` and
`compute(ub, place)` (place: ubatch.placement.Placement); on a failure `restore_cells` in reverse and, if an
update was pending, `restore_kv(snapshot_kv())` — so a failed decode leaves the K/V data as it was.

Matmuls go through numpy (BLAS); RoPE, the K-shift and attention run in C (ubatch.kernels). Everything is
float32; K/V are stored as float32 or float16 (type_k / type_v)."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ubatch.compute import kernels
from ubatch.model.gguf_model import Model
from ubatch.memory.placement import ComputeResult, Placement

KV_TYPES = {"f32": np.float32, "f16": np.float16}
POOLINGS = ("none", "mean", "cls", "last")


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) * weight, the mean accumulated in float64 as ggml does."""
    ms = np.einsum("ij,ij->i", x, x, dtype=np.float64) / x.shape[1]
    scale = (1.0 / np.sqrt(ms + eps)).astype(np.float32)
    return (x * scale[:, None]) * weight


def silu(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return x / (np.float32(1.0) + np.exp(-x))


class ModelRunner:
    """Owns the model weights and the K/V data buffers `k[l]`, `v[l]`:
    [n_stream, kv_size, n_head_kv, head_dim] of float32 or float16; cells never written hold zeros."""

    def __init__(self, model: Model, *, n_stream: int, kv_size: int, type_k: str = "f32", type_v: str = "f32",
                 n_threads: Optional[int] = None, embeddings: bool = False, pooling: str = "none") -> None:
        if not isinstance(model, Model):
            raise TypeError(f"model must be a ubatch.Model, got {type(model).__name__}")
        for name, t in (("type_k", type_k), ("type_v", type_v)):
            if t not in KV_TYPES:
                raise ValueError(f"{name}={t!r} is not supported (use 'f32' or 'f16')")
        if pooling not in POOLINGS:
            raise ValueError(f"pooling={pooling!r} is not one of {POOLINGS}")
        if int(n_stream) < 1 or int(kv_size) < 1:
            raise ValueError(f"n_stream={n_stream} and kv_size={kv_size} must be >= 1")
        if n_threads is not None and int(n_threads) < 1:
            raise ValueError(f"n_threads must be >= 1, got {n_threads}")
        self.model = model
        self.n_stream = int(n_stream)
        self.kv_size = int(kv_size)
        self.type_k, self.type_v = type_k, type_v
        self.n_threads = kernels.default_threads() if n_threads is None else int(n_threads)
        self.embeddings = bool(embeddings)
        self.pooling = pooling
        shape = (self.n_stream, self.kv_size, model.n_head_kv, model.head_dim)
        self.k: List[np.ndarray] = [np.zeros(shape, KV_TYPES[type_k]) for _ in range(model.n_layer)]
        self.v: List[np.ndarray] = [np.zeros(shape, KV_TYPES[type_v]) for _ in range(model.n_layer)]

    @property
    def n_vocab(self) -> int:
        return self.model.n_vocab

    @property
    def n_embd(self) -> int:
        return self.model.n_embd

    # ---- KV data operations -------------------------------------------------------------------------
    def update(self, copies: Sequence[Tuple[int, int]], shift: Optional[np.ndarray]) -> None:
        """Copy whole streams (src, dst) in order (all layers), then re-rotate cached K by `shift`
        (int32[n_stream, kv_size], per-cell RoPE delta, 0 = untouched)."""
        pairs = []
        for c in copies:
            src, dst = (int(c[0]), int(c[1]))
            for name, s in (("src", src), ("dst", dst)):
                if not 0 <= s < self.n_stream:
                    raise ValueError(f"stream copy {name} stream {s} out of range [0, {self.n_stream})")
            pairs.append((src, dst))
        delta = None
        if shift is not None:
            delta = np.ascontiguousarray(shift)
            if delta.shape != (self.n_stream, self.kv_size):
                raise ValueError(f"shift shape {delta.shape} != (n_stream, kv_size) = {(self.n_stream, self.kv_size)}")
            if not np.issubdtype(delta.dtype, np.integer):
                raise ValueError(f"shift must be an integer array, got {delta.dtype}")
            delta = delta.astype(np.int32, copy=False)
        for src, dst in pairs:
            if src == dst:
                continue
            for l in range(self.model.n_layer):
                self.k[l][dst] = self.k[l][src]
                self.v[l][dst] = self.v[l][src]
        if delta is not None and delta.any():
            m = self.model
            for l in range(m.n_layer):
                kernels.rope_shift(self.k[l], delta, n_rot=m.n_rot, base=m.rope_base, mode=m.rope_type,
                                   freq_scale=m.rope_freq_scale)

    def snapshot_kv(self) -> object:
        return ([a.copy() for a in self.k], [a.copy() for a in self.v])

    def restore_kv(self, snap: object) -> None:
        ks, vs = snap  # type: ignore[misc]
        if len(ks) != len(self.k) or any(a.shape != b.shape or a.dtype != b.dtype for a, b in zip(ks, self.k)):
            raise ValueError("snapshot does not match this runner's K/V buffers")
        for dst, src in zip(self.k + self.v, list(ks) + list(vs)):
            np.copyto(dst, src)

    def save_cells(self, place: Placement) -> object:
        """A copy of the K/V data of the cells `place` is about to write (for restore_cells)."""
        streams = np.asarray(place.streams, dtype=np.intp)
        cells = np.asarray(place.cells, dtype=np.intp)
        sidx = np.broadcast_to(streams[:, None], cells.shape)
        return sidx, cells, [(k[sidx, cells], v[sidx, cells]) for k, v in zip(self.k, self.v)]

    def restore_cells(self, saved: object) -> None:
        """Writes back the data copied by save_cells."""
        sidx, cells, data = saved  # type: ignore[misc]
        for (ko, vo), k, v in zip(data, self.k, self.v):
            k[sidx, cells] = ko
            v[sidx, cells] = vo

    def clear(self) -> None:
        for a in self.k + self.v:
            a.fill(0)

    # ---- forward pass -------------------------------------------------------------------------------
    def _check_placement(self, ub, place: Placement) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = int(ub.n_tokens)
        streams = np.ascontiguousarray(place.streams, dtype=np.int32)
        cells = np.ascontiguousarray(place.cells, dtype=np.int32)
        mask = np.ascontiguousarray(place.mask, dtype=np.float32)
        if streams.ndim != 1 or streams.shape[0] < 1:
            raise ValueError(f"placement.streams must be int32[ns] with ns >= 1, got shape {streams.shape}")
        ns = streams.shape[0]
        if n % ns:
            raise ValueError(f"ubatch n_tokens={n} is not a multiple of the {ns} stream groups")
        per = n // ns
        if cells.shape != (ns, per):
            raise ValueError(f"placement.cells shape {cells.shape} != (ns, per) = {(ns, per)}")
        if streams.min() < 0 or streams.max() >= self.n_stream:
            raise ValueError(f"placement.streams {streams.tolist()} out of range [0, {self.n_stream})")
        if n and (cells.min() < 0 or cells.max() >= self.kv_size):
            raise ValueError(f"placement.cells out of range [0, {self.kv_size}): min {cells.min()}, max {cells.max()}")
        n_kv = int(place.n_kv)
        if not 0 < n_kv <= self.kv_size:
            raise ValueError(f"placement.n_kv={n_kv} out of range (0, {self.kv_size}]")
        if mask.shape != (ns, per, n_kv):
            raise ValueError(f"placement.mask shape {mask.shape} != (ns, per, n_kv) = {(ns, per, n_kv)}")
        flat = streams[:, None].astype(np.int64) * self.kv_size + cells
        if np.unique(flat).size != flat.size:
            raise ValueError("placement.cells assigns the same cell to two ubatch rows")
        return streams, cells, mask

    def _input(self, ub) -> np.ndarray:
        m = self.model
        if ub.token is not None:
            tok = np.asarray(ub.token)
            if tok.size and (tok.min() < 0 or tok.max() >= m.n_vocab):
                bad = int(tok[(tok < 0) | (tok >= m.n_vocab)][0])
                raise ValueError(f"token id {bad} out of range [0, {m.n_vocab})")
            return m.tok_embd[tok]
        embd = ub.embd
        if embd is None:
            raise ValueError("ubatch has neither tokens nor embeddings")
        embd = np.asarray(embd, dtype=np.float32)
        if embd.shape != (ub.n_tokens, m.n_embd):
            raise ValueError(f"ubatch embeddings have shape {embd.shape}, the model needs (n_tokens, {m.n_embd})")
        return embd.copy()

    def compute(self, ub, place: Placement) -> ComputeResult:
        """Forward pass of one ubatch whose cells were just applied: writes its K/V rows into place.cells,
        attends over cells [0, place.n_kv) with place.mask, returns the output rows' logits/embeddings.
        On an exception the K/V data are left exactly as before."""
        m = self.model
        n = int(ub.n_tokens)
        streams, cells, mask = self._check_placement(ub, place)
        x = self._input(ub)
        pos = np.ascontiguousarray(ub.pos, dtype=np.int32)
        if pos.ndim != 2 or pos.shape[1] != n:
            raise ValueError(f"ubatch pos shape {pos.shape} != (n_pos, {n})")
        ns, per = cells.shape
        hq, hk, hd = m.n_head * m.head_dim, m.n_head_kv * m.head_dim, m.head_dim
        sidx = np.broadcast_to(streams[:, None], cells.shape)
        saved = [(self.k[l][sidx, cells], self.v[l][sidx, cells]) for l in range(m.n_layer)]
        try:
            for l, L in enumerate(m.layers):
                h = rms_norm(x, L.attn_norm, m.rms_eps)
                qkv = h @ L.wqkv_t
                q = np.ascontiguousarray(qkv[:, :hq]).reshape(n, m.n_head, hd)
                k = np.ascontiguousarray(qkv[:, hq:hq + hk]).reshape(n, m.n_head_kv, hd)
                v = qkv[:, hq + hk:].reshape(ns, per, m.n_head_kv, hd)
                kernels.rope(q, pos, n_rot=m.n_rot, base=m.rope_base, mode=m.rope_type,
                             freq_scale=m.rope_freq_scale)
                kernels.rope(k, pos, n_rot=m.n_rot, base=m.rope_base, mode=m.rope_type,
                             freq_scale=m.rope_freq_scale)
                self.k[l][sidx, cells] = k.reshape(ns, per, m.n_head_kv, hd)
                self.v[l][sidx, cells] = v
                o = kernels.attention(q.reshape(ns, per, m.n_head, hd), self.k[l], self.v[l], streams, mask,
                                      scale=1.0 / float(np.sqrt(hd)), n_threads=self.n_threads)
                x = x + o.reshape(n, hq) @ L.wo.T
                h = rms_norm(x, L.ffn_norm, m.rms_eps)
                gu = h @ L.wgu_t
                x = x + (silu(gu[:, :m.n_ff]) * gu[:, m.n_ff:]) @ L.w_down.T
        except BaseException:
            for l, (ko, vo) in enumerate(saved):
                self.k[l][sidx, cells] = ko
                self.v[l][sidx, cells] = vo
            raise
        return self._outputs(ub, x)

    def _outputs(self, ub, x: np.ndarray) -> ComputeResult:
        m = self.model
        rows = np.flatnonzero(np.asarray(ub.output) != 0)
        pooled = self.embeddings and self.pooling != "none"
        xn = rms_norm(x if pooled else x[rows], m.output_norm, m.rms_eps)
        xo = xn[rows] if pooled else xn
        logits = np.ascontiguousarray(xo @ m.output.T, dtype=np.float32)
        embd = np.ascontiguousarray(xo, dtype=np.float32) if self.embeddings and not pooled else None
        embd_seq = self._pool(ub, xn) if pooled else None
        return ComputeResult(logits=logits, embd=embd, embd_seq=embd_seq)

    def _pool(self, ub, xn: np.ndarray) -> Dict[int, np.ndarray]:
        """Pooled embeddings per sequence of the ubatch, as llama.cpp's inp_mean / inp_cls / last inputs:
        every (row, seq id) membership counts (a row in several seqs contributes to each)."""
        n = int(ub.n_tokens)
        seq_unq = np.asarray(ub.seq_id_unq)
        seq_idx = np.asarray(ub.seq_idx)
        counts = np.asarray(ub.n_seq_id).astype(np.int64)
        rows = np.repeat(np.arange(n), counts)
        ids = np.asarray(ub.seq_id_flat)
        slot = seq_idx[ids]
        pos0 = np.asarray(ub.pos)[0]
        k = seq_unq.shape[0]
        out: Dict[int, np.ndarray] = {}
        if self.pooling == "mean":
            acc = np.zeros((k, xn.shape[1]), np.float64)
            np.add.at(acc, slot, xn[rows])
            cnt = np.bincount(slot, minlength=k).astype(np.float64)
            res = (acc / np.maximum(cnt, 1)[:, None]).astype(np.float32)
            for j, s in enumerate(seq_unq):
                out[int(s)] = res[j]
            return out
        if self.pooling == "cls":  # the last row at position 0 of each seq (llama.cpp's loop order)
            sel = pos0[rows] == 0
            key = rows[sel].astype(np.int64)
            slot = slot[sel]
        else:  # last: the row of the highest position, ties going to the later row
            key = pos0[rows].astype(np.int64) * (n + 1) + rows
        best = np.full(k, -1, np.int64)
        np.maximum.at(best, slot, key)
        # llama.cpp leaves row 0 when a seq has no qualifying row
        target = np.where(best < 0, 0, best if self.pooling == "cls" else best % (n + 1))
        for j, s in enumerate(seq_unq):
            out[int(s)] = xn[target[j]].astype(np.float32).copy()
        return out
