"""KVStore: the K/V data of one KV cache (the runner owns it; the cache's cells/metadata live in
ubatch.memory). Per layer it serves, `k[il]` / `v[il]`: float32|float16[n_stream, kv_size, n_head_kv, head_dim]
(cells never written hold zeros; a bf16 / quantised type is kept as uint8[n_stream, kv_size, n_head_kv,
row_bytes] of its blocks, written and read through ubatch.compute.kv_quant), plus `pos`: int32[n_stream, kv_size], the position each cell's K was
rotated for (-1 = never written), kept through stream copies and K-shifts so the runner can apply the
sliding-window test itself. Everything here is whole-array numpy work (no Python loop per cell).

Shared reads of copied cells: a stream copy (a per-sequence fork of a prompt) leaves dst's cells holding the
bytes of src's. Each cell carries a content tag (equal tags = the same bytes in every K/V buffer: every write
gives its cells fresh tags, a stream copy copies them) and the flat cell its bytes were copied from
(`canon`). `shared_lists` rewrites a ubatch's visible-cell lists so that a cell whose tag still agrees with its
source's is read there: B forked sequences then read one copy of their common prompt instead of B (cache
traffic), and every result is bitwise the same, as the bytes are. Every write into k / v / pos goes through
this class (or the fused layer's write of a ubatch's cells, which the runner marks first with
mark_written); UBATCH_KV_SHARE=0 turns the shared reads off."""
from __future__ import annotations

import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ubatch._ffi import ffi, lib
from ubatch.compute import kernels, kv_quant

KV_TYPES = {"f32": np.float32, "f16": np.float16, **{t: np.uint8 for t in kv_quant.KV_WRITABLE if t not in ("f32", "f16")}}


def check_type(name: str, t: str, head_dim: int) -> None:
    """Refuses a K/V type this build cannot hold for rows of head_dim, naming the parameter."""
    if t not in KV_TYPES:
        raise ValueError(f"{name}={t!r} is not supported (one of {tuple(KV_TYPES)})")
    if not kv_quant.is_plain(t) and int(lib.ub_kv_row_size(kv_quant.type_id(t), int(head_dim))) < 0:
        raise ValueError(f"{name}={t!r}: its block of 32 does not divide the model's head_dim={head_dim} "
                         f"(llama.cpp refuses it too)")


def _committed_zeros(shape: Tuple[int, ...], dtype) -> np.ndarray:
    """A zero array whose pages are all written (resident) already."""
    a = np.empty(shape, dtype)
    a.fill(0)
    return a


def _runs(sel: np.ndarray) -> List[Tuple[int, int]]:
    """The sorted cell indices sel as maximal [lo, hi) runs of consecutive cells."""
    if sel.size == 0:
        return []
    cut = np.flatnonzero(np.diff(sel) != 1) + 1
    return [(int(r[0]), int(r[-1]) + 1) for r in np.split(sel, cut)]


class KVStore:
    def __init__(self, layers: Sequence[int], *, n_stream: int, kv_size: int, n_head_kv: int, head_dim: int,
                 type_k: str = "f32", type_v: str = "f32") -> None:
        for name, t in (("type_k", type_k), ("type_v", type_v)):
            check_type(name, t, head_dim)
        if int(n_stream) < 1 or int(kv_size) < 1:
            raise ValueError(f"n_stream={n_stream} and kv_size={kv_size} must be >= 1")
        self.layers = [int(l) for l in layers]
        self.n_stream, self.kv_size = int(n_stream), int(kv_size)
        self.type_k, self.type_v = type_k, type_v
        self.n_head_kv, self.head_dim = int(n_head_kv), int(head_dim)

        def shape(t: str):
            last = self.head_dim if kv_quant.is_plain(t) else kv_quant.row_bytes(t, self.head_dim)
            return (self.n_stream, self.kv_size, self.n_head_kv, last)
        # zeroed by writing, so every page is committed now, as llama.cpp clears its KV buffer when the context
        # is made: np.zeros leaves large buffers as untouched zero pages, and a decode that first writes them
        # (a seq_cp fork copying a prompt into 31 fresh streams: Gemma 3 270M, per-sequence KV) stalled on the
        # page faults (130-520 ms in that decode, Zen 3 VM)
        self.k: Dict[int, np.ndarray] = {l: _committed_zeros(shape(type_k), KV_TYPES[type_k]) for l in self.layers}
        self.v: Dict[int, np.ndarray] = {l: _committed_zeros(shape(type_v), KV_TYPES[type_v]) for l in self.layers}
        self.pos = np.full((self.n_stream, self.kv_size), -1, np.int32)
        self._ptrs: Dict[Tuple[int, str], object] = {}
        n = self.n_stream * self.kv_size
        self._tag = np.zeros(n, np.int64)               # content tag per flat cell (all zero bytes: tag 0)
        self._canon = np.arange(n, dtype=np.int64)      # the flat cell this one's bytes were copied from
        self._next_tag = 1
        self._aliased = False                           # some cell's canon is not itself (a stream was copied)

    # ---- content tags (the module docstring) --------------------------------------------------------
    def mark_written(self, flat_cells: Optional[np.ndarray] = None) -> None:
        """The flat cells (int[m]; None = every cell) were (or are about to be) overwritten: fresh tags, so no
        other cell reads them in their place and they read only themselves. Always safe to call more often."""
        if flat_cells is None:
            n = self._tag.size
            self._tag[:] = np.arange(self._next_tag, self._next_tag + n, dtype=np.int64)
            self._canon[:] = np.arange(n, dtype=np.int64)
            self._next_tag += n
            self._aliased = False
            return
        flat = np.asarray(flat_cells, np.int64).reshape(-1)
        self._tag[flat] = np.arange(self._next_tag, self._next_tag + flat.size, dtype=np.int64)
        self._canon[flat] = flat
        self._next_tag += flat.size

    def _copy_tags(self, src: int, dst: int) -> None:
        """Stream dst now holds a bitwise copy of stream src: its tags are src's, each cell's source src's
        source while their tags agree, else src's cell."""
        kv = self.kv_size
        s0, d0 = src * kv, dst * kv
        c, t = self._canon[s0:s0 + kv], self._tag[s0:s0 + kv]
        self._canon[d0:d0 + kv] = np.where(self._tag[c] == t, c, np.arange(s0, s0 + kv, dtype=np.int64))
        self._tag[d0:d0 + kv] = t
        self._aliased = True

    def shared_lists(self, lists: tuple) -> Optional[tuple]:
        """(row_stream, off, cells) of some rows -> the same lists over the store seen as one stream of
        n_stream * kv_size cells (row_stream all 0, cells flat), each cell replaced by its source cell where
        their tags agree (the same bytes); None when no cell would move (or sharing is off)."""
        rs, off, cells = lists
        n = self._tag.size
        if not self._aliased or not cells.size or n > np.iinfo(np.int32).max or \
                os.environ.get("UBATCH_KV_SHARE", "1") == "0":
            return None
        flat = np.repeat(rs.astype(np.int64), np.diff(off)) * self.kv_size + cells
        c = self._canon[flat]
        moved = (c != flat) & (self._tag[c] == self._tag[flat])
        if not moved.any():
            return None
        return np.zeros_like(rs), off, np.where(moved, c, flat).astype(np.int32)

    def ptr(self, layer: int, which: str):
        """A cffi pointer to the data of k[layer] / v[layer] (which = "k" / "v"); the arrays are never
        replaced (every operation writes into them), so the pointer is made once."""
        p = self._ptrs.get((layer, which))
        if p is None:
            a = (self.k if which == "k" else self.v)[layer]
            p = self._ptrs[(layer, which)] = ffi.from_buffer("uint8_t[]", a)
        return p

    def _arrays(self) -> List[np.ndarray]:
        return [self.k[l] for l in self.layers] + [self.v[l] for l in self.layers] + [self.pos]

    # ---- whole-store operations ---------------------------------------------------------------------
    def check_copies(self, copies: Sequence[Tuple[int, int]]) -> List[Tuple[int, int]]:
        pairs = []
        for c in copies:
            src, dst = int(c[0]), int(c[1])
            for name, s in (("src", src), ("dst", dst)):
                if not 0 <= s < self.n_stream:
                    raise ValueError(f"stream copy {name} stream {s} out of range [0, {self.n_stream})")
            pairs.append((src, dst))
        return pairs

    def check_shift(self, shift: Optional[np.ndarray]) -> Optional[np.ndarray]:
        if shift is None:
            return None
        delta = np.ascontiguousarray(shift)
        if delta.shape != (self.n_stream, self.kv_size):
            raise ValueError(f"shift shape {delta.shape} != (n_stream, kv_size) = {(self.n_stream, self.kv_size)}")
        if not np.issubdtype(delta.dtype, np.integer):
            raise ValueError(f"shift must be an integer array, got {delta.dtype}")
        return delta.astype(np.int32, copy=False)

    def _data(self) -> List[np.ndarray]:
        """The K and V buffers (every layer), without pos."""
        return [self.k[l] for l in self.layers] + [self.v[l] for l in self.layers]

    def _live(self, s: int) -> np.ndarray:
        """bool[kv_size]: the cells of stream s whose row holds a non-zero byte in any K/V buffer or whose pos
        is not -1 (every other cell is all zero bytes with pos -1 in every buffer). One read of the stream."""
        live = self.pos[s] != -1
        for a in self._data():
            row = a[s].reshape(self.kv_size, -1)
            w = next(t for t in (np.uint64, np.uint32, np.uint16, np.uint8)
                     if row.shape[1] * row.itemsize % np.dtype(t).itemsize == 0)
            words = row.view(w)
            if np.count_nonzero(words):   # the per-cell reduction only where some byte is set (4x slower)
                live |= words.any(axis=1)
        return live

    def copy_streams(self, pairs: Sequence[Tuple[int, int]], undo: Optional[list] = None) -> None:
        """Stream dst becomes a bitwise copy of stream src, pair after pair (every buffer and pos). Only the
        cells live in src or dst (_live) are moved: the others are all zero bytes with pos -1 on both sides
        already, so the result is the whole-stream copy's. With undo (a list), a record that undo_op reverses
        is appended before each pair is applied: the old rows of dst's live cells only (nothing for an empty
        stream, the usual case of a fresh fork), not a snapshot of the stream."""
        live: Dict[int, np.ndarray] = {}
        for src, dst in pairs:
            if src == dst:
                continue
            for s in (src, dst):
                if s not in live:
                    live[s] = self._live(s)
            sel = np.flatnonzero(live[src] | live[dst])
            if undo is not None:
                keep = np.flatnonzero(live[dst])
                undo.append(("copy", dst, sel, keep, [a[dst, keep] for a in self._data()], self.pos[dst].copy()))
            for lo, hi in _runs(sel):   # slices: one memcpy per run and buffer, no temporary
                for a in self._data():
                    a[dst, lo:hi] = a[src, lo:hi]
            self.pos[dst] = self.pos[src]
            self._copy_tags(src, dst)
            live[dst] = live[src].copy()

    def shift(self, delta: Optional[np.ndarray], rope: Callable[[int], Tuple[int, int, float, float]],
              undo: Optional[list] = None) -> None:
        """Re-rotate cached K by delta (per cell, 0 = untouched); rope(il) -> (n_rot, mode, base, scale[, ext]) or None (not shifted).
        With undo (a list), a record of the shifted cells' K rows and of pos is appended first (undo_op)."""
        if delta is None or not delta.any():
            return
        sel = np.flatnonzero(delta.ravel())   # the shifted flat cells
        self.mark_written(sel)
        if undo is not None:
            undo.append(("shift", sel, [self.k[l].reshape(self.n_stream * self.kv_size, -1)[sel]
                                        for l in self.layers], self.pos.copy()))
        for l in self.layers:
            r = rope(l)
            if r is None:      # a layer without RoPE (granite without rope.scaling.finetuned)
                continue
            n_rot, mode, base, scale, *ext = r
            if kv_quant.is_plain(self.type_k):
                kernels.rope_shift(self.k[l], delta, n_rot=n_rot, base=base, mode=mode, freq_scale=scale,
                                   ext=ext[0] if ext else None)
                continue
            # bf16 / quantised K (llama.cpp: dequantise, rotate, quantise again): the shifted cells only
            flat = self.k[l].reshape(self.n_stream * self.kv_size, -1)
            rows = kv_quant.dequantize_rows(self.type_k, flat[sel], self.n_head_kv * self.head_dim)
            rows = rows.reshape(sel.size, self.n_head_kv, self.head_dim)
            kernels.rope_shift(rows, np.ascontiguousarray(delta.ravel()[sel], np.int32), n_rot=n_rot, base=base,
                               mode=mode, freq_scale=scale, ext=ext[0] if ext else None)
            kv_quant.store_rows(self.type_k, rows.reshape(sel.size, -1), flat, sel)
        written = self.pos >= 0
        self.pos[written] += delta[written]

    def undo_op(self, rec: tuple) -> None:
        """Reverses one record appended by copy_streams / shift (records are undone last first)."""
        if rec[0] == "copy":
            _, dst, sel, keep, rows, pos = rec
            for a, old in zip(self._data(), rows):
                a[dst, sel] = 0
                a[dst, keep] = old
            self.pos[dst] = pos
            self.mark_written(np.arange(dst * self.kv_size, (dst + 1) * self.kv_size))
        else:
            _, sel, rows, pos = rec
            self.mark_written(sel)
            for l, old in zip(self.layers, rows):
                self.k[l].reshape(self.n_stream * self.kv_size, -1)[sel] = old
            np.copyto(self.pos, pos)

    def snapshot(self) -> List[np.ndarray]:
        return [a.copy() for a in self._arrays()]

    def restore(self, snap: List[np.ndarray]) -> None:
        cur = self._arrays()
        if len(snap) != len(cur) or any(a.shape != b.shape or a.dtype != b.dtype for a, b in zip(snap, cur)):
            raise ValueError("snapshot does not match this store's K/V buffers")
        for dst, src in zip(cur, snap):
            np.copyto(dst, src)
        self.mark_written()

    def clear(self) -> None:
        for a in self._arrays():
            a.fill(0)
        self.pos.fill(-1)
        self.mark_written()

    def write(self, layer: int, flat_cells: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
        """K/V rows (float32[m, n_head_kv, head_dim]) of layer into the flat cells (stream * kv_size + cell,
        int64[m]): numpy assignment for f32 / f16, one quantising C call per buffer otherwise."""
        self.mark_written(flat_cells)
        for t, buf, x in ((self.type_k, self.k[layer], k), (self.type_v, self.v[layer], v)):
            if kv_quant.is_plain(t):
                buf.reshape(self.n_stream * self.kv_size, self.n_head_kv, -1)[flat_cells] = x
            else:
                kv_quant.store_rows(t, np.ascontiguousarray(x, np.float32).reshape(len(flat_cells), -1),
                                    buf.reshape(self.n_stream * self.kv_size, -1), flat_cells)

    # ---- the cells of one ubatch --------------------------------------------------------------------
    def save_cells(self, streams: np.ndarray, cells: np.ndarray):
        sidx = np.broadcast_to(np.asarray(streams, np.intp)[:, None], cells.shape)
        cells = np.asarray(cells, np.intp)
        return sidx, cells, [(self.k[l][sidx, cells], self.v[l][sidx, cells]) for l in self.layers], \
            self.pos[sidx, cells]

    def restore_cells(self, saved) -> None:
        sidx, cells, data, pos = saved
        self.mark_written((np.asarray(sidx, np.int64) * self.kv_size + np.asarray(cells, np.int64)).reshape(-1))
        for l, (ko, vo) in zip(self.layers, data):
            self.k[l][sidx, cells] = ko
            self.v[l][sidx, cells] = vo
        self.pos[sidx, cells] = pos


__all__ = ["KVStore", "KV_TYPES", "check_type"]
