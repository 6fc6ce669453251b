"""The records exchanged between the KV cache / decode loop and the ModelRunner (RUNNER_INTERFACE.md)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

import numpy as np


@dataclass
class Placement:
    """Where one ubatch went in the KV cache (produced after apply_ubatch)."""
    streams: np.ndarray   # int32[ns]        stream of local group k; ns = 1 when unified, else ub.n_seqs_unq
    cells: np.ndarray     # int32[ns, per]   cell written by ubatch row k*per + r  (per = n_tokens // ns)
    n_kv: int             # llama.cpp's n_kv: min(size, max(256, roundup(used_max_p1, 256))) max over streams
    mask: np.ndarray      # float32[ns, per, n_kv]   0 or -inf; row r of group k is ubatch row k*per + r,
                          # column j is cell j of stream streams[k]


@dataclass
class ComputeResult:
    logits: Optional[np.ndarray]                # float32[n_out_ub, n_vocab]: output rows in ubatch row order
    embd: Optional[np.ndarray]                  # float32[n_out_ub, n_embd] when embeddings and pooling "none"
    embd_seq: Optional[Dict[int, np.ndarray]]   # pooled ("mean"/"cls"/"last"): seq id -> float32[n_embd]
