"""The records exchanged between the decode loop (Context + KV cache) and the compute (ModelRunner)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, NamedTuple, Optional

import numpy as np


class VisibleCells(NamedTuple):
    """The rows' visible-cell lists of one placed ubatch (what the visible-cell attention consumes):
    row r attends cells[off[r]:off[r+1]] of stream row_stream[r], in ascending (position, cell index)
    order. row_stream int32[n], off int32[n + 1], cells int32[off[n]]; read-only."""

    row_stream: np.ndarray
    off: np.ndarray
    cells: np.ndarray


class Placement:
    """Where one ubatch went in the KV cache (produced after apply_ubatch).

    streams: int32[ns]            stream of local group k; ns = 1 when unified, else ub.n_seqs_unq
    cells:   int32[ns, per]       cell written by ubatch row k*per + r (per = n_tokens // ns)
    n_kv:    int                  llama.cpp's n_kv: min(size, max(256, roundup(used_max_p1, 256))), max over streams
    visible: VisibleCells         each row's visible cells among cells [0, n_kv) of its stream, as the memory
                                  wrote them in C (the KQ mask's rule); what the runner attends over
    mask:    float32[ns, per, n_kv]  0 or -inf; row r of group k is ubatch row k*per + r, column j is cell j
                                  of stream streams[k]. An inspection view: derived from `visible` on first
                                  read when not given (a hand-made Placement may give only the mask)
    swa:     the sliding cache's Placement of the same ubatch (two-cache memory, KVCacheISWA), else None;
             its lists apply the window (0 <= p_q - p_k < n_swa for the standard type)
    visible_window: the full cache's lists with the sliding window applied (KVCacheISWA.placement with
             swa=False: the sliding layers run on the full cache), else None
    """

    __slots__ = ("streams", "cells", "n_kv", "visible", "swa", "visible_window", "_mask")

    def __init__(self, streams: np.ndarray, cells: np.ndarray, n_kv: int, mask: Optional[np.ndarray] = None,
                 swa: Optional["Placement"] = None, *, visible: Optional[VisibleCells] = None,
                 visible_window: Optional[VisibleCells] = None) -> None:
        if mask is None and visible is None:
            raise ValueError("a Placement needs its visible-cell lists or its mask")
        self.streams, self.cells, self.n_kv = streams, cells, n_kv
        self.visible, self.swa, self.visible_window = visible, swa, visible_window
        self._mask = mask

    @property
    def mask(self) -> np.ndarray:
        if self._mask is None:
            self._mask = mask_of(self.visible, len(self.streams), int(self.n_kv))
        return self._mask

    @mask.setter
    def mask(self, value: np.ndarray) -> None:
        self._mask = value

    def __repr__(self) -> str:
        return (f"Placement(streams={self.streams.tolist()}, cells shape {tuple(self.cells.shape)}, n_kv={self.n_kv}"
                f"{', swa' if self.swa is not None else ''})")


def mask_of(vis: VisibleCells, ns: int, n_kv: int) -> np.ndarray:
    """float32[ns, per, n_kv]: the dense mask (0 visible, -inf hidden) the lists stand for."""
    n = len(vis.row_stream)
    mask = np.full((n, n_kv), -np.inf, np.float32)
    rows = np.repeat(np.arange(n), np.diff(vis.off))
    mask[rows, vis.cells] = 0.0
    return mask.reshape(ns, n // ns if ns else 0, n_kv)


@dataclass
class ComputeResult:
    """The outputs of one computed ubatch.

    logits:   float32[n_out_ub, n_vocab]: the ubatch's output rows, in ubatch row order (or None)
    embd:     float32[n_out_ub, n_embd] when embeddings and pooling == "none" (or None)
    embd_seq: pooled ("mean"/"cls"/"last"): seq id -> float32[n_embd] (or None)
    The arrays are handed over: the Context keeps them as its output rows (not copied when the decode had
    one ubatch), so a runner returns fresh arrays and does not touch them afterwards.
    """

    logits: Optional[np.ndarray]
    embd: Optional[np.ndarray]
    embd_seq: Optional[Dict[int, np.ndarray]]


__all__ = ["ComputeResult", "Placement", "VisibleCells", "mask_of"]
