"""The token-level scheduler of `ubatch.engine.batcher`: requests, sequence slots and each step's batch content (no model,
no KV cache). See ubatch/engine/batcher.py for the step it is used in."""
from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass
from typing import Deque, List, Sequence

import numpy as np

from ubatch.engine.request import FINISHED, EVICTED, GENERATING, PROMPT, REJECTED, Request

@dataclass
class StepBatch:
    """The content of one step's batch: parallel arrays, one entry per row."""

    tokens: np.ndarray      # int32[n]
    pos: np.ndarray         # int32[n]
    seq: np.ndarray         # int32[n]
    output: np.ndarray      # int8[n]
    req: np.ndarray         # int32[n]: index into Scheduler.requests
    prompt: np.ndarray      # bool[n]: True for prompt tokens, False for decode tokens

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    def without(self, start: int, req_indices) -> "StepBatch":
        """The rows [0, start) plus the rows from `start` on that belong to none of req_indices."""
        keep = np.ones(len(self), bool)
        keep[start:] = ~np.isin(self.req[start:], np.asarray(req_indices, np.int32))
        return StepBatch(*(a[keep] for a in (self.tokens, self.pos, self.seq, self.output, self.req, self.prompt)))


class Scheduler:
    """Requests, sequence slots and batch building; knows nothing about the model or the KV cache."""

    def __init__(self, requests: Sequence[Request], *, n_seq_max: int, n_ctx_seq: int) -> None:
        self.requests: List[Request] = list(requests)
        self.n_ctx_seq = int(n_ctx_seq)
        self.waiting: Deque[int] = deque(range(len(self.requests)))
        self.free: List[int] = list(range(int(n_seq_max)))       # min-heap of free sequence ids
        self.active: List[int] = []                             # request indices, by sequence id

    @property
    def finished(self) -> bool:
        return not self.waiting and not self.active

    def admit(self) -> List[Request]:
        """Moves waiting requests into free sequence ids; returns the ones rejected on the way."""
        rejected = []
        while self.waiting and self.free:
            i = self.waiting.popleft()
            r = self.requests[i]
            if len(r.prompt) == 0 or len(r.prompt) >= self.n_ctx_seq:
                r.status, r.finish_reason = REJECTED, "rejected"
                r.message = (f"request {r.rid}: prompt of {len(r.prompt)} tokens does not fit the context of a "
                             f"sequence ({self.n_ctx_seq} cells)")
                rejected.append(r)
                continue
            r.seq_id = heapq.heappop(self.free)
            r.status = PROMPT
            self.active.append(i)
            self.active.sort(key=lambda j: self.requests[j].seq_id)
        return rejected

    def build(self, n_batch: int) -> StepBatch:
        """One decode token per generating request, then prompt chunks up to n_batch tokens; both passes go
        through the sequences in id order, as the server goes through its slots."""
        d_tok: List[int] = []
        d_pos: List[int] = []
        d_seq: List[int] = []
        d_idx: List[int] = []
        for i in self.active:
            r = self.requests[i]
            if r.status == GENERATING and r.pending is not None:
                d_tok.append(r.pending); d_pos.append(r.n_past); d_seq.append(r.seq_id); d_idx.append(i)
                r.n_past += 1
                r.pending = None
        nd = len(d_tok)
        tok = [np.array(d_tok, np.int32)]
        pos = [np.array(d_pos, np.int32)]
        seq = [np.array(d_seq, np.int32)]
        idx = [np.array(d_idx, np.int32)]
        out = [np.ones(nd, np.int8)]
        n = nd
        for i in self.active:
            if n >= n_batch:
                break
            r = self.requests[i]
            if r.status != PROMPT or r.n_past >= len(r.prompt):
                continue
            k = min(n_batch - n, len(r.prompt) - r.n_past)
            p0 = r.n_past
            tok.append(r.prompt[p0:p0 + k]); pos.append(np.arange(p0, p0 + k, dtype=np.int32))
            seq.append(np.full(k, r.seq_id, np.int32))
            o = np.zeros(k, np.int8)
            if p0 + k == len(r.prompt):
                o[-1] = 1
            out.append(o); idx.append(np.full(k, i, np.int32))
            r.n_past += k
            n += k
        prompt = np.ones(n, bool)
        prompt[:nd] = False
        if len(tok) == 1:
            return StepBatch(tok[0], pos[0], seq[0], out[0], idx[0], prompt)
        return StepBatch(np.concatenate(tok), np.concatenate(pos), np.concatenate(seq), np.concatenate(out),
                         np.concatenate(idx), prompt)

    def on_token(self, i: int, token: int) -> bool:
        """Records a sampled token of request i; returns True when the request is now finished."""
        r = self.requests[i]
        r.generated.append(int(token))
        if len(r.generated) >= r.max_new:
            self._release(i, FINISHED, "length")
            return True
        if r.n_past >= self.n_ctx_seq:
            self._release(i, FINISHED, "context",
                          f"request {r.rid}: stopped at the context limit ({self.n_ctx_seq} tokens)")
            return True
        r.status, r.pending = GENERATING, int(token)
        return False

    def evict(self, i: int, message: str) -> None:
        self._release(i, EVICTED, "evicted", message)

    def _release(self, i: int, status: str, reason: str, message: str = "") -> None:
        r = self.requests[i]
        r.status, r.finish_reason, r.message, r.pending = status, reason, message, None
        self.active.remove(i)
        heapq.heappush(self.free, r.seq_id)


__all__ = ["Scheduler", "StepBatch"]
