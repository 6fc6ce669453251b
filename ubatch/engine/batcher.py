"""Token-level continuous batching on top of Context, the way llama.cpp's server drives llama_decode.

Two pieces, kept apart (as in nano-vllm): the `Scheduler` owns the requests and the sequence slots and
builds each step's batch content (no model, no KV cache); the `ContinuousBatcher` owns the Context, decodes
that content, samples greedily, retires finished sequences from the KV cache and records statistics.

One step (llama.cpp tools/server, update_slots):
1. admit waiting requests into free sequence ids (a prompt that cannot fit in a sequence's context is
   rejected, as the server rejects it);
2. the batch: the pending sampled token of every generating sequence, then chunks of the admitted prompts
   until n_batch tokens, both in sequence-id order (the server's slot order) (only a prompt's last token is an output);
3. decode it in slices of n_batch; on KVCacheFullError halve n_batch and retry the same slice (the server's
   retry, spec 5.11); a slice of one token that still does not fit evicts its request (llama.cpp's server
   gives up on every processing slot here with "Context size has been exceeded."; evicting only the request
   that overflowed keeps the others running); after a successful slice n_batch goes back to its full value;
4. greedy sampling (argmax of the output rows' logits) for every output row; a request stops after its generation
   length or when its sequence reaches the per-sequence context (n_ctx_seq); end-of-generation tokens are
   ignored (the model is random);
5. finished requests leave the KV cache (seq_rm) and free their sequence id for the next step's admissions.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ubatch.batch.container import Batch
from ubatch.common.errors import KVCacheFullError, UbatchError
from ubatch.engine.context import Context
from ubatch.engine.request import EVICTED, FINISHED, Request
from ubatch.engine.scheduler import Scheduler, StepBatch


@dataclass
class UbatchRecord:
    """One computed ubatch, for the report and the timeline."""

    call: int                              # decode call index
    t: float                               # seconds since the start of the run (end of its decode call)
    n_tokens: int
    shape: Tuple[int, int]                 # (n_seqs, n_seq_tokens)
    seq_tokens: Dict[int, Tuple[int, int]]  # seq id -> (prompt tokens, decode tokens)


def ubatch_records(ubs, seq: np.ndarray, prompt: np.ndarray, call: int, t: float) -> List[UbatchRecord]:
    """One UbatchRecord per ubatch of a decode call; seq[i] / prompt[i]: the sequence of batch row i and
    whether it was a prompt token (vectorised per ubatch: one bincount each)."""
    out = []
    for ub in ubs:
        rows = np.asarray(ub.batch_idxs)
        s = seq[rows]
        n_all = np.bincount(s)
        n_p = np.bincount(s, weights=prompt[rows], minlength=len(n_all)).astype(np.int64)
        ids = np.flatnonzero(n_all)
        out.append(UbatchRecord(call, t, int(ub.n_tokens), (int(ub.n_seqs), int(ub.n_seq_tokens)),
                                dict(zip(ids.tolist(), zip(n_p[ids].tolist(), (n_all[ids] - n_p[ids]).tolist())))))
    return out


@dataclass
class RunStats:
    """Everything `ubatch run` reports."""

    n_ubatch: int
    n_stream: int
    kv_size: int
    requests: int = 0
    finished: int = 0
    evicted: int = 0
    rejected: int = 0
    prompt_tokens: int = 0          # prompt tokens decoded
    decode_tokens: int = 0          # sampled tokens fed back and decoded
    generated_tokens: int = 0       # tokens sampled
    wall_s: float = 0.0
    decode_s: float = 0.0           # time inside Context.decode (successful and failed calls)
    steps: int = 0
    decode_calls: int = 0
    failed_calls: int = 0
    retries: int = 0                # n_batch halvings after KVCacheFullError
    errors: int = 0                 # other decode failures (their requests evicted)
    ubatches: List[UbatchRecord] = field(default_factory=list)
    kv_used: List[Tuple[float, List[int]]] = field(default_factory=list)   # after each successful call
    peak_kv_cells: List[int] = field(default_factory=list)
    events: List[Tuple[int, str, str]] = field(default_factory=list)        # (ubatch index, kind, message)

    @property
    def fills(self) -> np.ndarray:
        return np.array([u.n_tokens / self.n_ubatch for u in self.ubatches], np.float64)

    @property
    def shapes(self) -> Dict[str, int]:
        c = Counter(f"{u.shape[0]}x{u.shape[1]}" for u in self.ubatches)
        return dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))

    def to_dict(self) -> dict:
        wall = max(self.wall_s, 1e-12)
        f = self.fills
        return {
            "requests": self.requests, "finished": self.finished, "evicted": self.evicted, "rejected": self.rejected,
            "prompt_tokens": self.prompt_tokens, "generated_tokens": self.generated_tokens,
            "decoded_tokens": self.prompt_tokens + self.decode_tokens,
            "wall_s": round(self.wall_s, 6), "decode_s": round(self.decode_s, 6),
            "tokens_per_s": {"prompt": self.prompt_tokens / wall, "generation": self.generated_tokens / wall,
                             "total": (self.prompt_tokens + self.decode_tokens) / wall},
            "steps": self.steps, "decode_calls": self.decode_calls, "failed_decode_calls": self.failed_calls,
            "ubatches": len(self.ubatches), "n_ubatch": self.n_ubatch,
            "mean_fill": float(f.mean()) if f.size else 0.0, "worst_fill": float(f.min()) if f.size else 0.0,
            "shapes": self.shapes, "n_stream": self.n_stream, "kv_cells_per_stream": self.kv_size,
            "peak_kv_cells": list(self.peak_kv_cells), "retries": self.retries, "errors": self.errors,
            "messages": [m for _, _, m in self.events if m],
        }


class ContinuousBatcher:
    """Runs a Scheduler's requests to completion on one Context (see the module docstring)."""

    def __init__(self, ctx: Context) -> None:
        if ctx.model is None:
            raise ValueError("continuous batching needs a Context with a model (it samples from the logits)")
        if ctx.embeddings:
            raise ValueError("continuous batching needs a Context with embeddings=False")
        self.ctx = ctx
        self.kv = ctx.memory
        self.t0 = 0.0
        self.stats: Optional[RunStats] = None
        self.sched: Optional[Scheduler] = None

    def run(self, requests: Sequence[Request], *, on_step: Optional[Callable[["ContinuousBatcher", int], None]] = None
            ) -> RunStats:
        """Decodes every request; on_step(self, n_done_this_step) is called after each step."""
        ctx, kv = self.ctx, self.kv
        for s in range(ctx.n_seq_max):
            kv.seq_rm(s)
        self.sched = Scheduler(requests, n_seq_max=ctx.n_seq_max, n_ctx_seq=ctx.n_ctx_seq)
        self.stats = RunStats(n_ubatch=ctx.n_ubatch, n_stream=kv.n_stream, kv_size=kv.size,
                              requests=len(self.sched.requests), peak_kv_cells=[0] * kv.n_stream)
        self.t0 = time.perf_counter()
        while not self.sched.finished:
            n_done = self.step()
            if on_step is not None:
                on_step(self, n_done)
        self.stats.wall_s = time.perf_counter() - self.t0
        return self.stats

    # ---------------------------------------------------------------------------------------------------
    def _event(self, kind: str, message: str = "") -> None:
        self.stats.events.append((len(self.stats.ubatches), kind, message))

    def _retire(self, r: Request) -> None:
        self.kv.seq_rm(r.seq_id)
        st = self.stats
        st.finished += r.status == FINISHED
        st.evicted += r.status == EVICTED

    def step(self) -> int:
        """One scheduler step; returns the number of requests that ended in it."""
        sched, st = self.sched, self.stats
        n_done = 0
        for r in sched.admit():
            st.rejected += 1
            self._event("rejected", r.message)
            n_done += 1
        sb = sched.build(self.ctx.n_batch)
        st.steps += 1
        if len(sb) == 0:
            return n_done
        n_full = self.ctx.n_batch
        n_batch, off = n_full, 0
        while off < len(sb):
            end = min(off + n_batch, len(sb))
            try:
                self._decode(sb, off, end)
            except KVCacheFullError as e:
                if n_batch > 1:
                    n_batch //= 2          # the server's retry: same offset, half the slice
                    st.retries += 1
                    self._event("retry")
                    continue
                i = int(sb.req[off])
                r = sched.requests[i]
                seq = r.seq_id
                sched.evict(i, f"request {r.rid} (seq {seq}) evicted: the KV cache is full even for a single "
                               f"token ({e})")
                self._retire(r)
                self._event("evicted", r.message)
                n_done += 1
                sb = sb.without(off, [i])
                n_batch = n_full
                continue
            except UbatchError as e:       # not expected; the server aborts the slots of the batch
                for i in np.unique(sb.req[off:end]).tolist():
                    r = sched.requests[i]
                    sched.evict(i, f"request {r.rid} evicted: decode failed: {e}")
                    self._retire(r)
                    self._event("error", r.message)
                    n_done += 1
                st.errors += 1
                sb = sb.without(off, np.unique(sb.req[off:end]))
                n_batch = n_full
                continue
            n_done += self._sample(sb, off, end)
            off = end
            n_batch = n_full
        return n_done

    def _decode(self, sb: StepBatch, off: int, end: int) -> None:
        ctx, st = self.ctx, self.stats
        batch = Batch.from_arrays(tokens=sb.tokens[off:end], pos=sb.pos[off:end], seq_ids=sb.seq[off:end],
                                  output=sb.output[off:end])
        st.decode_calls += 1
        t = time.perf_counter()
        try:
            ctx.decode(batch)
        except UbatchError:
            st.decode_s += time.perf_counter() - t
            st.failed_calls += 1
            raise
        now = time.perf_counter()
        st.decode_s += now - t
        rel = now - self.t0
        prompt = sb.prompt[off:end]
        st.prompt_tokens += int(prompt.sum())
        st.decode_tokens += int((~prompt).sum())
        seqs = sb.seq[off:end]
        st.ubatches.extend(ubatch_records(ctx.last_ubatches, seqs, prompt, st.decode_calls - 1, rel))
        used = [self.kv.used(k) for k in range(self.kv.n_stream)]
        st.kv_used.append((rel, used))
        st.peak_kv_cells = [max(a, b) for a, b in zip(st.peak_kv_cells, used)]

    def _sample(self, sb: StepBatch, off: int, end: int) -> int:
        """Greedy sampling of the slice's output rows; retires finished requests. Returns how many ended.
        get_logits() holds the output rows in batch order, so row k is the k-th output of the slice (the same
        rows get_logits_ith(j) returns, argmax'ed in one call)."""
        rows = np.flatnonzero(sb.output[off:end])
        if rows.size == 0:
            return 0
        logits = self.ctx.get_logits()
        if logits.shape[0] != rows.size:
            raise UbatchError(f"expected {rows.size} output rows, the context has {logits.shape[0]}")
        toks = np.argmax(logits, axis=1).tolist()
        n_done = 0
        for i, tok in zip(sb.req[off + rows].tolist(), toks):
            self.stats.generated_tokens += 1
            if self.sched.on_token(i, tok):
                self._retire(self.sched.requests[i])
                n_done += 1
        return n_done

__all__ = ["ContinuousBatcher", "RunStats", "UbatchRecord", "ubatch_records"]
