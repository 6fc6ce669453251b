"""Embeddings for /v1/embeddings: a second Context on the same model (embeddings=True, mean pooling), run
by the engine thread between generation steps. Inputs are packed into decodes of at most n_seq_max
sequences and n_batch tokens (a pooled sequence must sit whole in one ubatch); the cache is cleared after
each decode, so nothing stays behind."""
from __future__ import annotations

from typing import List

import numpy as np

from ubatch.batch.container import Batch
from ubatch.server.errors import APIError


class Embedder:
    def __init__(self, model, *, n_ctx: int, n_seq_max: int, n_threads=None) -> None:
        from ubatch.engine.context import Context
        self.model = model
        self.n_ctx = int(n_ctx)
        self.n_seq_max = int(n_seq_max)
        self.n_threads = n_threads
        self._ctx = None
        self._Context = Context

    @property
    def ctx(self):
        if self._ctx is None:   # created on the first embedding request only
            self._ctx = self._Context(self.model, n_ctx=self.n_ctx, n_batch=self.n_ctx, n_ubatch=self.n_ctx,
                                      n_seq_max=self.n_seq_max, kv_unified=True, embeddings=True,
                                      pooling="mean", n_threads=self.n_threads)
        return self._ctx

    @property
    def max_tokens(self) -> int:
        return self.n_ctx

    def check(self, inputs: List[List[int]]) -> None:
        """Before queueing: every input must fit in one decode (400 naming the input otherwise)."""
        for i, ids in enumerate(inputs):
            if len(ids) > self.max_tokens:
                raise APIError(400, f"input.{i}: {len(ids)} tokens exceed the embedding context of "
                                    f"{self.max_tokens} tokens", param=f"input.{i}", code="context_length_exceeded")

    def __call__(self, inputs: List[List[int]]) -> np.ndarray:
        out = np.zeros((len(inputs), int(self.model.n_embd)), np.float32)
        ctx = self.ctx
        i = 0
        while i < len(inputs):
            group, n_tok = [], 0
            while i < len(inputs) and len(group) < ctx.n_seq_max and n_tok + len(inputs[i]) <= ctx.n_batch:
                group.append(i)
                n_tok += len(inputs[i])
                i += 1
            tokens = np.concatenate([np.asarray(inputs[k], np.int32) for k in group])
            seqs = np.concatenate([np.full(len(inputs[k]), s, np.int32) for s, k in enumerate(group)])
            pos = np.concatenate([np.arange(len(inputs[k]), dtype=np.int32) for k in group])
            try:
                ctx.decode(Batch.from_arrays(tokens=tokens, pos=pos, seq_ids=seqs))
                for s, k in enumerate(group):
                    out[k] = ctx.get_embeddings_seq(s)
            finally:
                ctx.memory.clear()
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms > 0, norms, 1.0)
