"""ModelRunner: the forward pass of one ubatch over runner-owned K/V data.

The Context owns the plan (allocator, KV cells, outputs); the runner owns the weights (a ubatch.Model) and the
K/V data (ubatch.engine.kv_store.KVStore: one per KV cache). What the Context calls, in order, per decode:
`update(copies, shift[, swa_copies, swa_shift])` when a stream copy / K-shift is pending, then per ubatch
`saved = save_cells(place)` and `compute(ub, place, saved)` (place: ubatch.memory.placement.Placement, which
carries each row's visible cells as the memory wrote them in C); on a failure
`restore_cells` in reverse and, if an update was pending, `undo_update(undo)` (the records `update(...,
undo=undo)` kept of the rows it overwrote) — so a failed decode leaves the K/V data as it was.

Sliding-window models (gemma3): with `kv_size_swa` the SWA layers keep their K/V in a second store and
`place.swa` (the sliding cache's Placement of the same ubatch) says where; without it (or when place.swa is
None) the SWA layers use the full cache's placement and the runner adds the window test
`0 <= p_q - p_k < n_swa` to its mask (the cells' positions are tracked in the store).

The per-architecture forward lives in ubatch/model/arch/<arch>.py; this module builds its inputs (`Step`)
and its outputs (final norm, lm head on the output rows only, pooling)."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ubatch._ffi import ffi, lib
from ubatch.compute import kernels
from ubatch.common.params import KV_DTYPES, POOLING
from ubatch.compute import ops as cops
from ubatch.compute import kv_quant
from ubatch.engine.kv_store import KVStore, check_type
from ubatch.memory.placement import ComputeResult, Placement
from ubatch.model import ops


class _Where:
    """One cache's placement of the current ubatch, checked: streams int32[ns], cells int32[ns, per], and the
    rows' visible-cell lists (row_stream, off, cells). A memory's Placement brings the lists (written in C
    by the memory, each row in its own cell); a hand-made one may bring only a mask, then its shape and
    the cells' distinctness are checked here and the lists built from it (ops.visible_cells)."""

    def __init__(self, store: KVStore, ub, place: Placement, what: str) -> None:
        n = int(ub.n_tokens)
        streams = np.ascontiguousarray(place.streams, dtype=np.int32)
        cells = np.ascontiguousarray(place.cells, dtype=np.int32)
        if streams.ndim != 1 or streams.shape[0] < 1:
            raise ValueError(f"{what}.streams must be int32[ns] with ns >= 1, got shape {streams.shape}")
        ns = streams.shape[0]
        if n % ns:
            raise ValueError(f"ubatch n_tokens={n} is not a multiple of the {ns} stream groups")
        per = n // ns
        if cells.shape != (ns, per):
            raise ValueError(f"{what}.cells shape {cells.shape} != (ns, per) = {(ns, per)}")
        if streams.min() < 0 or streams.max() >= store.n_stream:
            raise ValueError(f"{what}.streams {streams.tolist()} out of range [0, {store.n_stream})")
        if n and (cells.min() < 0 or cells.max() >= store.kv_size):
            raise ValueError(f"{what}.cells out of range [0, {store.kv_size}): min {cells.min()}, max {cells.max()}")
        n_kv = int(place.n_kv)
        if not 0 < n_kv <= store.kv_size:
            raise ValueError(f"{what}.n_kv={n_kv} out of range (0, {store.kv_size}]")
        flat = streams[:, None].astype(np.int64) * store.kv_size + cells
        self.store, self.streams, self.cells, self.what = store, streams, cells, what
        self.ns, self.per, self.n_kv = ns, per, n_kv
        self.vis = self._lists(place.visible, n, f"{what}.visible")
        self.vis_window = self._lists(getattr(place, "visible_window", None), n, f"{what}.visible_window")
        self.mask = None
        if self.vis is None:                              # a hand-made placement: the mask is all there is
            mask = np.ascontiguousarray(place.mask, dtype=np.float32)
            if mask.shape != (ns, per, n_kv):
                raise ValueError(f"{what}.mask shape {mask.shape} != (ns, per, n_kv) = {(ns, per, n_kv)}")
            if np.unique(flat).size != flat.size:
                raise ValueError(f"{what}.cells assigns the same cell to two ubatch rows")
            self.mask = mask
        self.sidx = np.broadcast_to(streams[:, None].astype(np.intp), cells.shape)
        self.dst = flat.reshape(-1)                       # int64[n]: flat cell of each ubatch row
        store.mark_written(self.dst)                      # before the lists are shared (KVStore.shared_lists)
        self._shared: Dict[int, tuple] = {}

    @staticmethod
    def _lists(vis, n: int, what: str) -> Optional[tuple]:
        """The (row_stream, off, cells) of a VisibleCells, shapes checked (their values are checked by the
        attention's C)."""
        if vis is None:
            return None
        rs, off, cells = (np.ascontiguousarray(a, dtype=np.int32) for a in vis)
        if rs.shape != (n,) or off.shape != (n + 1,) or cells.ndim != 1:
            raise ValueError(f"{what} shapes {rs.shape}, {off.shape}, {cells.shape} do not fit {n} rows")
        return rs, off, cells

    def _from_mask(self, mask: np.ndarray) -> tuple:
        pos = np.ascontiguousarray(self.store.pos[self.streams.astype(np.intp)][:, :self.n_kv])
        off, cells = cops.visible_cells(mask, pos)
        return np.repeat(self.streams, self.per).astype(np.int32), off, cells

    def reads(self, lists: tuple) -> Tuple[tuple, bool]:
        """The lists the attention reads: (lists, False), or (the store's shared_lists of them, True: cells
        flat over the store seen as one stream); made once per ubatch and list."""
        got = self._shared.get(id(lists))
        if got is None:
            sh = self.store.shared_lists(lists)
            got = self._shared[id(lists)] = (lists, (lists, False) if sh is None else (sh, True))
        return got[1]

    def visible(self, pos_q: Optional[np.ndarray] = None, n_swa: int = 0) -> tuple:
        """The rows' lists; with pos_q / n_swa those of the sliding layers run on this (full) cache: the
        memory's visible_window, or (hand-made placements) the mask with 0 <= p_q - p_cell < n_swa added."""
        if n_swa <= 0:
            if self.vis is None:
                self.vis = self._from_mask(self.mask)
            return self.vis
        if self.vis_window is None:
            if self.mask is None:
                raise ValueError(f"{self.what} has no visible_window for the sliding layers "
                                 "(KVCacheISWA.placement(..., swa=False) provides it)")
            pc = self.store.pos[self.streams.astype(np.intp)][:, :self.n_kv]          # [ns, n_kv]
            pq = pos_q.reshape(self.ns, self.per).astype(np.int64)
            far = (pq[:, :, None] - pc[:, None, :].astype(np.int64)) >= n_swa
            self.vis_window = self._from_mask(np.where(far, np.float32(-np.inf), self.mask).astype(np.float32))
        return self.vis_window


class Step:
    """What an architecture's forward needs for one ubatch: pos int32[n_pos, n], n_threads, and
    attend(il, q, k, v, scale): writes K/V rows of layer il into the ubatch's cells, returns the attention
    output float32[n, n_head * head_dim]."""

    def __init__(self, runner: "ModelRunner", base: _Where, swa: Optional[_Where], pos: np.ndarray) -> None:
        self.runner, self.base, self.swa, self.pos = runner, base, swa, pos
        self.n_threads = runner.n_threads
        self._kv: Dict[tuple, tuple] = {}

    def _visible(self, il: int) -> Tuple[_Where, tuple, bool]:
        """Layer il's placement, the visible-cell lists (row_stream, off, cells) its attention reads, and
        whether those are flat over the store seen as one stream (_Where.reads)."""
        m = self.runner.model
        if not (m.n_swa > 0 and m.swa_layers[il]):
            w, vis = self.base, self.base.visible()
        elif self.swa is not None:
            w, vis = self.swa, self.swa.visible()
        else:
            w, vis = self.base, self.base.visible(self.pos[0], m.n_swa)
        return (w, *w.reads(vis))

    def fused_kv(self, il: int):
        """Layer il's ub_layer_kv (ub_layer_forward's K/V and attention inputs); the struct of a (placement,
        lists) is built once per ubatch, only the K/V pointers change per layer."""
        w, vis, flat = self._visible(il)
        key = (id(w), id(vis))
        ent = self._kv.get(key)
        if ent is None:
            st = w.store
            c = ffi.new("ub_layer_kv *")
            c.n_stream, c.kv_size = (1, st.n_stream * st.kv_size) if flat else (st.n_stream, st.kv_size)
            bufs = [w.dst, *vis]
            ptrs = [ffi.from_buffer("int64_t[]", w.dst)] + [
                ffi.from_buffer("int32_t[]", a) if a.size else ffi.new("int32_t[1]") for a in vis]
            c.dst, c.row_stream, c.off, c.cells = ptrs
            ent = self._kv[key] = (c, bufs, ptrs)
        c = ent[0]
        k, v = w.store.k[il], w.store.v[il]
        c.k, c.v = w.store.ptr(il, "k"), w.store.ptr(il, "v")
        c.k_type, c.v_type = kv_quant.type_id(w.store.type_k), kv_quant.type_id(w.store.type_v)
        return c

    def attend(self, il: int, q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float,
               softcap: float = 0.0) -> np.ndarray:
        """Attention of layer il over each row's visible cells in ascending position order (so the result
        does not depend on where the cells sit, on other sequences or on n_ubatch); softcap > 0: scores
        soft-capped before the scale (gemma2)."""
        w, vis, one = self._visible(il)
        st = w.store
        n, n_head, hd = q.shape
        flat = (np.asarray(w.sidx, np.int64) * st.kv_size + np.asarray(w.cells, np.int64)).ravel()
        st.write(il, flat, k, v)
        ka, va = st.k[il], st.v[il]
        if one:   # the lists index the store as one stream (_Where.reads)
            ka, va = (a.reshape((1, st.n_stream * st.kv_size) + a.shape[2:]) for a in (ka, va))
        o = cops.attention_visible(np.ascontiguousarray(q, np.float32), ka, va, *vis,
                                   scale=float(scale), softcap=float(softcap), n_threads=self.n_threads,
                                   k_type=st.type_k, v_type=st.type_v)
        return o.reshape(n, n_head * hd)


class ModelRunner:
    """Owns the K/V data of a model's layers: `stores[0]` (the full cache; every layer unless kv_size_swa is
    given) and, for a sliding-window model created with kv_size_swa, `stores[1]` (the SWA layers).
    `k[il]` / `v[il]`: the layer's buffers [n_stream, size, n_head_kv, head_dim]."""

    def __init__(self, model, *, n_stream: int, kv_size: int, type_k: str = "f32", type_v: str = "f32",
                 n_threads: Optional[int] = None, embeddings: bool = False, pooling: str = "none",
                 kv_size_swa: Optional[int] = None) -> None:
        from ubatch.model.model import Model
        if not isinstance(model, Model):
            raise TypeError(f"model must be a ubatch.Model, got {type(model).__name__}")
        for name, t in (("type_k", type_k), ("type_v", type_v)):
            check_type(name, t, model.head_dim)
        if pooling not in POOLING:
            raise ValueError(f"pooling={pooling!r} is not one of {POOLING}")
        if int(n_stream) < 1 or int(kv_size) < 1:
            raise ValueError(f"n_stream={n_stream} and kv_size={kv_size} must be >= 1")
        if n_threads is not None and int(n_threads) < 1:
            raise ValueError(f"n_threads must be >= 1, got {n_threads}")
        if kv_size_swa is not None and (model.n_swa <= 0 or int(kv_size_swa) < 1):
            raise ValueError(f"kv_size_swa={kv_size_swa} needs a sliding-window model and must be >= 1 "
                             f"(model n_swa = {model.n_swa})")
        self.model = model
        self.n_stream = int(n_stream)
        self.kv_size = int(kv_size)
        self.kv_size_swa = None if kv_size_swa is None else int(kv_size_swa)
        self.type_k, self.type_v = type_k, type_v
        self.n_threads = kernels.default_threads() if n_threads is None else int(n_threads)
        self.embeddings = bool(embeddings)
        self.pooling = pooling
        swa = model.swa_layers
        kw = dict(n_stream=self.n_stream, n_head_kv=model.n_head_kv, head_dim=model.head_dim,
                  type_k=type_k, type_v=type_v)
        if self.kv_size_swa is None:
            self.stores = [KVStore(range(model.n_layer), kv_size=self.kv_size, **kw)]
        else:
            self.stores = [KVStore([l for l in range(model.n_layer) if not swa[l]], kv_size=self.kv_size, **kw),
                           KVStore([l for l in range(model.n_layer) if swa[l]], kv_size=self.kv_size_swa, **kw)]
        self.k: List[np.ndarray] = [self._store_of(l).k[l] for l in range(model.n_layer)]
        self.v: List[np.ndarray] = [self._store_of(l).v[l] for l in range(model.n_layer)]

    def _store_of(self, il: int) -> KVStore:
        return next(s for s in self.stores if il in s.k)

    @property
    def n_vocab(self) -> int:
        return self.model.n_vocab

    @property
    def n_embd(self) -> int:
        return self.model.n_embd

    def _rope(self, il: int):
        """Layer il's K-shift rotation (n_rot, mode, base, scale, ext), None when llama.cpp does not shift it."""
        m = self.model
        if not m.hparams.has_rope(il):
            return None
        from ubatch.model.arch.llama import rope_ext
        base, scale = m.hparams.rope_params(il)
        return m.n_rot, m.rope_type, base, scale, rope_ext(m, il, int(self.stores[0].kv_size))

    # ---- KV data operations -------------------------------------------------------------------------
    def update(self, copies: Sequence[Tuple[int, int]], shift: Optional[np.ndarray],
               swa_copies: Optional[Sequence[Tuple[int, int]]] = None,
               swa_shift: Optional[np.ndarray] = None, undo: Optional[list] = None) -> None:
        """Copy whole streams (src, dst) in order, then re-rotate cached K by `shift` (int32[n_stream, size],
        per-cell RoPE delta, 0 = untouched), each layer with its own RoPE base; swa_* for the SWA store.
        undo: a list that receives, before each change, what undo_update needs to reverse it (only the rows
        the change overwrites: no snapshot of the whole K/V data), so a failure anywhere after (or inside)
        the update can be undone."""
        jobs = [(self.stores[0], copies, shift)]
        if len(self.stores) > 1:
            jobs.append((self.stores[1], swa_copies or (), swa_shift))
        elif swa_copies or swa_shift is not None:
            raise ValueError("swa_copies / swa_shift given, but this runner has no separate SWA store "
                             "(create it with kv_size_swa)")
        checked = [(st, st.check_copies(c), st.check_shift(s)) for st, c, s in jobs]   # validate all first
        for st, pairs, delta in checked:
            recs: Optional[list] = None if undo is None else []
            if undo is not None:
                undo.append((st, recs))
            st.copy_streams(pairs, recs)
            st.shift(delta, self._rope, recs)

    def undo_update(self, undo: list) -> None:
        """Reverses an update (or the part of it that ran) from the records it appended to `undo`."""
        for st, recs in reversed(undo):
            for rec in reversed(recs):
                st.undo_op(rec)

    def snapshot_kv(self) -> object:
        """(k copies per layer, v copies per layer, cell positions per store)."""
        return ([a.copy() for a in self.k], [a.copy() for a in self.v], [st.pos.copy() for st in self.stores])

    def restore_kv(self, snap: object) -> None:
        ks, vs, ps = snap  # type: ignore[misc]
        if len(ks) != len(self.k) or len(ps) != len(self.stores) or any(
                a.shape != b.shape or a.dtype != b.dtype for a, b in zip(list(ks) + list(vs), self.k + self.v)):
            raise ValueError("snapshot does not match this runner's K/V buffers")
        for dst, src in zip(self.k + self.v + [st.pos for st in self.stores], list(ks) + list(vs) + list(ps)):
            np.copyto(dst, src)
        self.mark_written()

    def mark_written(self) -> None:
        """Every store's K/V bytes were written from outside KVStore (restore_kv, a state load): no cell is
        read in place of another until it is copied again (KVStore.mark_written)."""
        for st in self.stores:
            st.mark_written()

    def save_cells(self, place: Placement) -> object:
        """A copy of the K/V data of the cells `place` (and place.swa) is about to write (for restore_cells)."""
        out = [self.stores[0].save_cells(np.asarray(place.streams), np.asarray(place.cells))]
        sw = getattr(place, "swa", None)
        if len(self.stores) > 1 and sw is not None:
            out.append(self.stores[1].save_cells(np.asarray(sw.streams), np.asarray(sw.cells)))
        return out

    def restore_cells(self, saved: object) -> None:
        """Writes back the data copied by save_cells."""
        for st, s in zip(self.stores, saved):  # type: ignore[arg-type]
            st.restore_cells(s)

    def clear(self) -> None:
        for st in self.stores:
            st.clear()

    # ---- forward pass -------------------------------------------------------------------------------
    def _input(self, ub) -> np.ndarray:
        m = self.model
        if ub.token is not None:
            tok = np.asarray(ub.token)
            if tok.size and (tok.min() < 0 or tok.max() >= m.n_vocab):
                bad = int(tok[(tok < 0) | (tok >= m.n_vocab)][0])
                raise ValueError(f"token id {bad} out of range [0, {m.n_vocab})")
            return m.arch_module.embed(m, tok.astype(np.int32))
        embd = ub.embd
        if embd is None:
            raise ValueError("ubatch has neither tokens nor embeddings")
        embd = np.asarray(embd, dtype=np.float32)
        if embd.shape != (ub.n_tokens, m.n_embd):
            raise ValueError(f"ubatch embeddings have shape {embd.shape}, the model needs (n_tokens, {m.n_embd})")
        return embd.copy()

    def compute(self, ub, place: Placement, saved: object = None) -> ComputeResult:
        """Forward pass of one ubatch whose cells were just applied: writes its K/V rows into the placement's
        cells, attends each row over its visible cells, returns the output rows' logits/embeddings. On an
        exception the K/V data are left exactly as before. saved: what save_cells(place) returned when the
        caller took it already (the Context does, to undo a later ubatch's failure), else compute takes it."""
        m = self.model
        n = int(ub.n_tokens)
        base = _Where(self.stores[0], ub, place, "placement")
        sw = getattr(place, "swa", None)
        swa = None
        if sw is not None:
            if len(self.stores) < 2:
                raise ValueError("placement.swa given, but this runner has no SWA store (create it with kv_size_swa)")
            swa = _Where(self.stores[1], ub, sw, "placement.swa")
        elif len(self.stores) > 1:
            raise ValueError("this runner keeps the SWA layers in their own store: placement.swa is required")
        pos = np.ascontiguousarray(ub.pos, dtype=np.int32)
        if pos.ndim != 2 or pos.shape[1] != n:
            raise ValueError(f"ubatch pos shape {pos.shape} != (n_pos, {n})")
        x = self._input(ub)
        if saved is None:
            saved = [w.store.save_cells(w.streams, w.cells) for w in ([base] + ([swa] if swa else []))]
        try:
            for w in [base] + ([swa] if swa else []):
                w.store.pos[w.sidx, w.cells] = pos[0].reshape(w.ns, w.per)
            rows = np.flatnonzero(np.asarray(ub.output) != 0)
            pooled = self.embeddings and self.pooling != "none"
            keep = np.arange(n) if pooled else rows
            x = m.arch_module.forward(m, Step(self, base, swa, pos), x, keep)
        except BaseException:
            self.restore_cells(saved)
            raise
        return self._outputs(ub, x, rows, pooled)

    def _outputs(self, ub, x: np.ndarray, rows: np.ndarray, pooled: bool) -> ComputeResult:
        m = self.model
        xn = ops.rms_norm(x, m.weights.output_norm, m.rms_eps)
        xo = xn[rows] if pooled else xn
        logits = np.ascontiguousarray(m.arch_module.logits(m, np.ascontiguousarray(xo), self.n_threads),
                                      dtype=np.float32)
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
