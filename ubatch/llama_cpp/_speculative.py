"""`Llama(draft_model=...)`: the draft of one step of Llama.generate (llama-cpp-python's loop: the sampled token
plus the draft are evaluated together, every position is sampled in order with the request's sampler chain, the
first sample that differs from the draft ends the step and the rows after it leave the KV cache).

ubatch's logits of a row do not depend on the other rows of the batch, so the tokens are those of decoding
without the draft. On top of llama-cpp-python: the draft is cut to the length the adaptive policy of
ubatch/engine/speculative.py picks (acceptance rate x the measured cost of a row), never past what a
sliding-window cache can roll back, and draft tokens outside the vocabulary raise ValueError naming them.
"""
from __future__ import annotations

import math
import time
from typing import List, Optional

import numpy as np

from ubatch.engine.speculative import Acceptance, CostModel, plan_depths, sliding_room


class DraftState:
    """The adaptive draft length of one Llama."""

    def __init__(self, llm) -> None:
        self.llm = llm
        self.acc = Acceptance()
        self.cost = CostModel()
        self.pending: Optional[np.ndarray] = None     # a proposal not submitted, to learn the acceptance from
        self.pending_at = 0
        self.draft_tokens = 0
        self.accepted = 0

    def _memory(self):
        from ubatch.llama_cpp._handles import REGISTRY
        try:
            return REGISTRY.get(self.llm._ctx.ctx, "context").kv
        except Exception:
            return None

    def _learn_pending(self, upto: int) -> None:
        prop, at = self.pending, self.pending_at
        new = self.llm.input_ids[at:upto]
        n = min(len(new), len(prop))
        if n == 0:
            return
        self.pending = None
        neq = np.flatnonzero(prop[:n] != new[:n])
        m = int(neq[0]) if neq.size else n
        self.acc.update(m, len(prop) if neq.size else m)

    def draft(self, tokens: List[int]) -> List[int]:
        """The draft tokens to evaluate after `tokens` (written at input_ids[n_tokens:] first, as
        llama-cpp-python does before calling the draft model)."""
        llm = self.llm
        n0 = llm.n_tokens
        end = n0 + len(tokens)
        llm.input_ids[n0:end] = tokens
        if self.pending is not None:
            self._learn_pending(end)
        got = llm.draft_model(llm.input_ids[:end])
        a = np.asarray(got if got is not None else [])
        if a.size == 0:
            return []
        if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"draft_model must return a 1-D array of token ids, got {a.dtype} with shape {a.shape}")
        a = a[:max(llm._n_ctx - end, 0)]
        bad = (a < 0) | (a >= llm._n_vocab)
        if bad.any():
            raise ValueError(f"draft_model returned token id {int(a[bad][0])}, outside the vocabulary "
                             f"[0, {llm._n_vocab})")
        cap = len(a)
        mem = self._memory()
        if mem is not None:
            room = sliding_room(mem, 0)
            if room is not None:
                cap = min(cap, room - len(tokens))
        if cap <= 0:
            return []
        nu = int(llm.context_params.n_ubatch) or 512
        d = int(plan_depths(np.array([self.acc.alpha]), np.array([cap]), a=self.cost.a, b=self.cost.b,
                            base_rows=len(tokens), base_value=1.0, n_ubatch=nu, common_depth=False)[0])
        if d == 0:
            self.pending, self.pending_at = a.astype(np.int64), end
            return []
        self.pending = None
        return a[:d].astype(int).tolist()

    def observe_eval(self, n_rows: int, seconds: float, prompt_rows: int = 0) -> None:
        """Llama.eval of n_rows rows took seconds (the cost model of the draft length; an eval of prompt rows is
        not a decode step and CostModel leaves it out)."""
        nu = int(self.llm.context_params.n_ubatch) or 512
        self.cost.observe(max(math.ceil(n_rows / nu), 1), n_rows, seconds, prompt_rows=prompt_rows)

    def verified(self, n_draft: int, matched: int) -> None:
        """A round that evaluated n_draft draft tokens is over: matched samples equalled the evaluated token
        after them."""
        if n_draft:
            m = min(matched, n_draft)
            self.acc.update(m, n_draft)
            self.draft_tokens += n_draft
            self.accepted += m


__all__ = ["DraftState"]
