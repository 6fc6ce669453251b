"""The records exchanged between the decode loop (Context + KV cache) and the compute (ModelRunner)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

import numpy as np


@dataclass
class Placement:
    """Where one ubatch went in the KV cache (produced after apply_ubatch).

    streams: int32[ns]            stream of local group k; ns = 1 when unified, else ub.n_seqs_unq
    cells:   int32[ns, per]       cell written by ubatch row k*per + r (per = n_tokens // ns)
    n_kv:    int                  llama.cpp's n_kv: min(size, max(256, roundup(used_max_p1, 256))), max over streams
    mask:    float32[ns, per, n_kv]  0 or -inf; row r of group k is ubatch row k*per + r, column j is cell j
                                  of stream streams[k]
    swa:     the sliding cache's Placement of the same ubatch (two-cache memory, KVCacheISWA), else None;
             its mask applies the window (0 <= p_q - p_k < n_swa for the standard type)
    """

    streams: np.ndarray
    cells: np.ndarray
    n_kv: int
    mask: np.ndarray
    swa: Optional["Placement"] = None


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


__all__ = ["Placement", "ComputeResult"]
