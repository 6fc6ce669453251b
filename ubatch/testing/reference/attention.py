"""A float64 numpy reference of attention over a KV cache in cell order with an additive mask (the layout
llama.cpp's non-flash attention reads: K.Q, + mask, softmax, V.p), for the tests and bench/ of the C
visible-cell attention (ubatch.compute.ops.attention_visible), which runs over per-row visible-cell lists.

    q      float32[ns, per, n_head, head_dim]      ns stream groups of per query rows
    k, v   float32|float16[n_stream, kv_size, n_head_kv, head_dim]
    streams int32[ns]                              the stream group g reads
    mask   float32[ns, per, n_kv]                  0 (visible) / -inf (hidden) or any finite bias; cells >= n_kv
                                                    are never read
Returns float64[ns, per, n_head, head_dim]; a row that sees no cell gets zeros. With `like_ggml` (default) an
f16 K rounds the query to f16 first and an f16 V rounds the probabilities to f16, as ggml's non-flash path
and the C kernel do."""
from __future__ import annotations

import numpy as np


def attention_masked(q: np.ndarray, k: np.ndarray, v: np.ndarray, streams: np.ndarray, mask: np.ndarray,
                     scale: float, *, softcap: float = 0.0, like_ggml: bool = True) -> np.ndarray:
    ns, per, n_head, _ = q.shape
    n_kv = mask.shape[2]
    gqa = n_head // k.shape[2]
    out = np.zeros(q.shape[:3] + (v.shape[3],), np.float64)
    for g in range(ns):
        kk = k[streams[g], :n_kv].astype(np.float64)
        vv = v[streams[g], :n_kv].astype(np.float64)
        for h in range(n_head):
            qh = q[g, :, h]
            if like_ggml and k.dtype == np.float16:
                qh = qh.astype(np.float16)
            s = qh.astype(np.float64) @ kk[:, h // gqa].T
            if softcap:
                s = softcap * np.tanh(s / softcap)
            s = s * scale + mask[g]
            mx = s.max(axis=1, keepdims=True)
            seen = np.isfinite(mx[:, 0])
            p = np.exp(s - np.where(seen[:, None], mx, 0.0))
            l = p.sum(axis=1, keepdims=True)
            p = p / np.where(l > 0, l, 1.0)
            if like_ggml and v.dtype == np.float16:
                p = p.astype(np.float16).astype(np.float64)
            out[g, :, h] = np.where(seen[:, None], p @ vv[:, h // gqa], 0.0)
    return out


__all__ = ["attention_masked"]
