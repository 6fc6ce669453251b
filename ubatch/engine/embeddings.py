"""Embeddings of whole sequences for LLMEngine.embed: pooled hidden states (mean / cls / last), many inputs per
decode, on contexts of their own (one per pooling, created on first use)."""
from __future__ import annotations

from typing import Callable, Dict, List, Sequence, Union

import numpy as np

from ubatch.batch.container import Batch
from ubatch.engine.context import Context
from ubatch.engine.inputs import PromptTooLongError


class Embedder:
    """The embedding contexts of one engine; gen_ctx is the engine's generation context (its sizes and KV types
    are reused), to_tokens turns an input into int32 token ids."""

    def __init__(self, model, gen_ctx: Context, to_tokens: Callable[[object], np.ndarray]) -> None:
        self.model = model
        self.gen = gen_ctx
        self.to_tokens = to_tokens
        self.ctxs: Dict[str, Context] = {}

    def _context(self, pooling: str, longest: int) -> Context:
        ctx = self.ctxs.get(pooling)
        if ctx is not None and ctx.n_ubatch >= longest:
            return ctx
        g = self.gen
        n_ctx = max(g.n_ctx_seq, longest)
        n_b = max(min(g.n_batch, n_ctx), longest)
        if longest > g.n_ctx_seq:
            raise PromptTooLongError(f"an input has {longest} tokens, more than the {g.n_ctx_seq} of "
                                     f"a sequence's context")
        ctx = Context(self.model, n_ctx=n_ctx, n_batch=n_b, n_ubatch=n_b, n_seq_max=g.n_seq_max,
                      kv_unified=True, embeddings=True, pooling=pooling, type_k=g.type_k,
                      type_v=g.type_v, n_threads=g.n_threads)
        self.ctxs[pooling] = ctx
        return ctx

    def embed(self, inputs: Sequence[Union[str, Sequence[int]]], *, pooling: str = "mean", normalize: bool = True
              ) -> np.ndarray:
        """float32[len(inputs), n_embd] (see LLMEngine.embed)."""
        if pooling not in ("mean", "cls", "last"):
            raise ValueError(f"pooling must be 'mean', 'cls' or 'last', got {pooling!r}")
        if isinstance(inputs, (str, bytes)):
            raise ValueError("embed takes a list of texts (or of token-id lists), got a single string")
        toks = [self.to_tokens(x) for x in inputs]
        res = np.zeros((len(toks), int(self.model.n_embd)), np.float32)
        if not toks:
            return res
        ctx = self._context(pooling, max(len(t) for t in toks))
        i = 0
        while i < len(toks):                  # pack whole inputs into one batch
            group: List[int] = []
            n = 0
            while i < len(toks) and len(group) < ctx.n_seq_max and n + len(toks[i]) <= ctx.n_batch:
                group.append(i)
                n += len(toks[i])
                i += 1
            t = np.concatenate([toks[g] for g in group])
            sid = np.repeat(np.arange(len(group), dtype=np.int32), [len(toks[g]) for g in group])
            p = np.concatenate([np.arange(len(toks[g]), dtype=np.int32) for g in group])
            ctx.decode(Batch.from_arrays(tokens=t, pos=p, seq_ids=sid, output=np.ones(len(t), np.int8)))
            for k, g in enumerate(group):
                res[g] = ctx.get_embeddings_seq(k)
            for k in range(len(group)):
                ctx.memory.seq_rm(k)
        if normalize:
            norm = np.linalg.norm(res, axis=1, keepdims=True)
            res = res / np.where(norm > 0, norm, 1.0)
        return res.astype(np.float32, copy=False)

    def close(self) -> None:
        for c in self.ctxs.values():
            c.close()
        self.ctxs.clear()


__all__ = ["Embedder"]
