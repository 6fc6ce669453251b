"""The engine's scheduler: the waiting queue, the sequence ids, admission, preemption and each step's batch rows
(no decoding, no sampling: llm_engine.py does those).

- admission: waiting requests take free sequence ids, first come first served (a request with n completions
  takes n ids at once). With one shared KV stream a request is admitted only when the free cells can hold its
  prompt besides what the running sequences still have to place (unless nothing runs);
- the batch: the pending sampled token of every generating sequence (plus draft rows when drafting), then chunks
  of the admitted prompts up to n_batch tokens, both in sequence-id order; only a prompt's last token is an
  output;
- preemption (a single token that does not fit): the most recently admitted sequence's cells are freed and it
  goes back to the head of the queue with everything it generated, to be recomputed later (bitwise identical
  thanks to batch invariance).
"""
from __future__ import annotations

import heapq
import itertools
from collections import deque
from typing import Deque, Dict, List, Optional, Tuple

import numpy as np

from ubatch.engine.engine_stats import EngineStats
from ubatch.engine.sequence import FORK, GEN, PROMPT, WAITING, Request, Seq

Rows = Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, List[Seq], np.ndarray, np.ndarray]


class Scheduler:
    """Sequence ids and the queue of one engine. kv: its memory; prefix: its PrefixCache or None; spec: its
    EngineSpeculator or None (both may be set after construction)."""

    def __init__(self, kv, n_seq_max: int, n_batch: int, statistics: EngineStats) -> None:
        self.kv = kv
        self.n_batch = int(n_batch)
        self.statistics = statistics
        self.prefix = None
        self.spec = None
        self.free: List[int] = list(range(int(n_seq_max)))          # min-heap of free sequence ids
        self.active: Dict[int, Seq] = {}                             # seq id -> running sequence
        self.waiting: Deque[Tuple[Request, List[Seq]]] = deque()     # admission units
        self._stamp = itertools.count(1)

    # ------------------------------------------------------------------ the queue
    def add(self, req: Request) -> None:
        self.waiting.append((req, list(req.seqs)))

    def drop(self, req: Request) -> None:
        """Takes req out of the queue and its running sequences out of the KV cache."""
        self.waiting = deque(u for u in self.waiting if u[0] is not req)
        for s in req.seqs:
            if s.seq_id >= 0:
                self.release(s)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.active)

    def waiting_ids(self) -> set:
        return {u[0].rid for u in self.waiting}

    def n_waiting(self) -> int:
        return sum(len(u[1]) for u in self.waiting)

    # ------------------------------------------------------------------ sequence slots
    def release(self, s: Seq) -> None:
        """s leaves the KV cache (its cells may stay as a prefix-cache entry) and gives its sequence id back."""
        if s.spec is not None and s.spec.draft is not None and s.seq_id >= 0:
            self.kv.seq_rm(s.seq_id, s.n_past, -1)      # draft rows past its last token: as without a draft
        if self.prefix is not None:
            self.prefix.release(s)
        else:
            self.kv.seq_rm(s.seq_id)
        del self.active[s.seq_id]
        heapq.heappush(self.free, s.seq_id)
        s.seq_id = -1
        s.n_past = 0

    def _room(self, unit: List[Seq]) -> bool:
        """With one shared stream: do the free cells hold this unit's tokens besides what the running sequences
        still have to place? (Per-sequence streams always have room: a sequence never outgrows its stream.)"""
        if self.kv.n_stream > 1 or not self.active:
            return True
        pending = sum(s.n_tokens - s.n_past for s in self.active.values() if s.state != FORK)
        need = unit[0].n_tokens + sum(1 for s in unit[1:])
        used = self.kv.used(0)
        if self.prefix is not None and used + pending + need > self.kv.size:
            used -= self.prefix.cached_cells()      # cells held only by the prefix cache are evicted on demand
        return used + pending + need <= self.kv.size

    def admit(self) -> None:
        while self.waiting:
            req, unit = self.waiting[0]
            if len(unit) > len(self.free) or not self._room(unit):
                break
            self.waiting.popleft()
            first = req.times.ub_admitted < 0
            if first:
                req.times.ub_admitted = self.statistics.n_ubatches
            stamp = next(self._stamp)
            for k, s in enumerate(unit):
                s.seq_id = (heapq.heappop(self.free) if self.prefix is None
                            else self.prefix.take_id(self.free, s, k == 0))
                s.stamp = stamp
                s.n_past = 0
                s.state = PROMPT if k == 0 else FORK
                self.active[s.seq_id] = s
            if first:
                req.times.seq_id = unit[0].seq_id
            if self.prefix is not None:
                self.prefix.start(unit[0])           # the longest cached prefix, or a wait for a running one

    def preempt(self) -> List[Seq]:
        """Frees the most recently admitted running sequence (with its fork group if it has not forked yet) and
        puts it back at the head of the queue; returns the sequences removed ([] when nothing can be)."""
        if len(self.active) <= 1:
            return []
        victim = max(self.active.values(), key=lambda s: (s.stamp, s.index))
        group = [victim]
        if victim.state in (PROMPT, FORK):     # not forked yet: the lead and its forks go back together
            unit = [s for s in self.active.values() if s.stamp == victim.stamp and s.state in (PROMPT, FORK)]
            if any(s.state == FORK for s in unit):
                group = sorted(unit, key=lambda s: (s.state != PROMPT, s.index))
        for s in group:
            self.release(s)
            s.state = WAITING
        self.waiting.appendleft((victim.req, group))
        self.statistics.preemptions += 1
        self.statistics.event("preempted", f"request {victim.req.rid} (completion {victim.index}) preempted: its "
                                           f"KV cells were freed, it will recompute them")
        return group

    # ------------------------------------------------------------------ one step's rows
    def build(self) -> Rows:
        """The step's rows: (tokens, pos, seq ids, output flags, owners, owner index per row, prompt flag)."""
        n_batch = self.n_batch
        seqs = [self.active[k] for k in sorted(self.active)]
        owners: List[Seq] = []
        dec = [s for s in seqs if s.state == GEN]
        if self.spec is not None:        # the pending token, plus draft rows for the sequences that draft
            self.spec.plan(dec, min(n_batch - len(dec), sum(s.n_tokens - s.n_past for s in seqs if s.state == PROMPT)))
            t_, p_, o_, _ = self.spec.decode_rows(dec)
            tok, pos, own, out = [t_], [p_], [o_], [np.ones(len(t_), np.int8)]
        else:
            tok = [np.array([s.generated[-1] for s in dec], np.int32)]
            pos = [np.array([s.n_past for s in dec], np.int32)]
            own = [np.arange(len(dec), dtype=np.int32)]
            out = [np.ones(len(dec), np.int8)]
            for s in dec:
                s.n_past += 1
        owners.extend(dec)
        n = n_dec = len(tok[0])
        for s in seqs:
            if n >= n_batch:
                break
            if s.state != PROMPT:
                continue
            k = min(n_batch - n, s.n_tokens - s.n_past)
            if self.prefix is not None:
                k = self.prefix.cap(s, k)
            if k <= 0:
                continue
            p0 = s.n_past
            tok.append(s.tokens(p0, p0 + k))
            pos.append(np.arange(p0, p0 + k, dtype=np.int32))
            own.append(np.full(k, len(owners), np.int32))
            o = np.zeros(k, np.int8)
            if p0 + k == s.n_tokens:
                o[-1] = 1
            out.append(o)
            owners.append(s)
            s.n_past += k
            n += k
        prompt = np.ones(n, bool)
        prompt[:n_dec] = False
        own_a = np.concatenate(own)
        seq_ids = np.array([s.seq_id for s in owners], np.int32)[own_a] if owners else np.zeros(0, np.int32)
        return np.concatenate(tok), np.concatenate(pos), seq_ids, np.concatenate(out), owners, own_a, prompt


__all__ = ["Scheduler"]
