"""LLMEngine's speculative decoding (see ubatch/engine/speculative.py for the guarantee and the policy).

Per step, for the generating sequences that take part (the request did not opt out with
SamplingParams(speculative=False)): the drafter proposes, DraftPolicy (plan_depths) picks each one's depth, and
decode_rows gives the step's decode rows: [pending token, d1..dk] per sequence at consecutive positions, every
row an output. verify() accepts the samples of a sequence's rows while they equal its draft and removes the
rejected rows from the KV cache (seq_rm). A drafted step that hits a full KV cache is retried without its
draft rows (drop_drafts). The depth is bounded by the sequence's context, its max_tokens, n_batch, the free
cells of a unified cache and the empty cells of a sliding-window cache (sliding_room).
"""
from __future__ import annotations

import time
from typing import Dict, List, Optional

import numpy as np

from ubatch.engine.speculative import (DEFAULT_DRAFT_MAX, Acceptance, CostModel, DraftGate, make_drafter,
                                       plan_depths, sliding_room)


class SeqSpec:
    """A sequence's speculation state: its token history (prompt + generated, grown in place), acceptance
    rate, the draft of the current step and a proposal not submitted (to learn the acceptance from)."""

    __slots__ = ("hist", "n_hist", "accs", "key", "draft", "n_real", "pending", "pending_at", "pending_key")

    def __init__(self) -> None:
        self.hist = np.zeros(64, np.int32)
        self.n_hist = 0
        self.accs: Dict[int, Acceptance] = {}      # acceptance rate per proposal kind (prompt lookup: n-gram size)
        self.key = 0
        self.draft: Optional[np.ndarray] = None
        self.n_real = 0
        self.pending: Optional[np.ndarray] = None
        self.pending_at = 0
        self.pending_key = 0

    def acc(self, key: int) -> Acceptance:
        a = self.accs.get(key)
        if a is None:
            a = self.accs[key] = Acceptance()
        return a

    def sync(self, s) -> np.ndarray:
        n = s.n_tokens
        if self.n_hist > n:
            self.n_hist = 0
        if self.n_hist < n:
            add = s.tokens(self.n_hist, n)
            if n > len(self.hist):
                grown = np.zeros(max(n, 2 * len(self.hist)), np.int32)
                grown[:self.n_hist] = self.hist[:self.n_hist]
                self.hist = grown
            self.hist[self.n_hist:n] = add
            self.n_hist = n
        return self.hist[:n]


class EngineSpeculator:
    def __init__(self, engine, draft, draft_max: int = DEFAULT_DRAFT_MAX) -> None:
        if isinstance(draft_max, bool) or not isinstance(draft_max, (int, np.integer)) or not 1 <= draft_max <= 256:
            raise ValueError(f"draft_max must be an int in [1, 256], got {draft_max!r}")
        self.eng = engine
        self.k_max = int(draft_max)
        ctx = engine.ctx
        self.drafter = make_drafter(draft, n_vocab=engine.n_vocab, n_seq_max=ctx.n_seq_max, n_ctx_seq=ctx.n_ctx_seq,
                                    n_batch=ctx.n_batch, n_threads=engine.n_threads, draft_max=self.k_max,
                                    tokenizer=engine.tokenizer)
        self.cost = CostModel()
        self.gate = DraftGate(lambda rows: self.cost.predict(1, rows))
        self.per_seq_streams = engine._kv.n_stream > 1
        self.draft_rows = 0           # draft rows decoded
        self.draft_tokens = 0         # real draft tokens decoded (draft_rows minus padding)
        self.accepted = 0             # draft tokens accepted
        self.drafted_steps = 0
        self.gated_steps = 0          # steps the gate kept plain (closed, or measuring the plain reference)
        self._t_plan = 0.0            # this step: when planning began, its decoding sequences, draft rows and
        self._n_seq = self._n_dr = self._extra = 0      # tokens emitted beyond one per sequence

    # ------------------------------------------------------------------ planning
    def _state(self, s) -> SeqSpec:
        st = getattr(s, "spec", None)
        if st is None:
            st = SeqSpec()
            s.spec = st
        return st

    def _learn_pending(self, sp: SeqSpec, hist: np.ndarray) -> None:
        """A proposal that was not submitted, against the tokens that followed it."""
        prop, at = sp.pending, sp.pending_at
        sp.pending = None
        new = hist[at:]
        n = min(len(new), len(prop))
        if n == 0:
            return
        neq = np.flatnonzero(prop[:n] != new[:n])
        m = int(neq[0]) if neq.size else n
        sp.acc(sp.pending_key).update(m, len(prop) if neq.size else m)

    def plan(self, dec: List, prompt_rows: int) -> None:
        """Sets s.spec.draft (int32 array, possibly padded) for every sequence of dec that drafts this step."""
        eng = self.eng
        ctx = eng.ctx
        B = len(dec)
        self._t_plan = time.perf_counter()
        self._n_seq, self._n_dr, self._extra = B, 0, 0
        for s in dec:
            if getattr(s, "spec", None) is not None:
                s.spec.draft = None
        if B == 0:
            return
        common = self.per_seq_streams and B > 1
        if common and prompt_rows > 0:
            return                                 # split_equal would cut drafted rows into extra ubatches
        kv = eng._kv
        caps = np.zeros(B, np.int64)
        room_total = ctx.n_batch - B - prompt_rows
        if not self.per_seq_streams:
            room_total = min(room_total, kv.size - kv.used(0) - B - prompt_rows)
            sr = sliding_room(kv, 0)
            if sr is not None:
                room_total = min(room_total, sr - B - prompt_rows)
        if room_total <= 0:
            return
        items, idx = [], []
        for i, s in enumerate(dec):
            p = s.req.params
            if not p.speculative:
                continue
            sp = self._state(s)
            hist = sp.sync(s)
            if sp.pending is not None:
                self._learn_pending(sp, hist)
            cap = min(self.k_max, ctx.n_ctx_seq - s.n_past - 1)
            if p.max_tokens is not None:
                cap = min(cap, p.max_tokens - len(s.generated) - 1)
            if self.per_seq_streams:
                sr = sliding_room(kv, s.seq_id)
                if sr is not None:
                    cap = min(cap, sr - 1)
            if cap <= 0:
                continue
            caps[i] = cap
            items.append((s.seq_id, hist, cap))
            idx.append(i)
        if not idx:
            return
        if common and len(idx) < B:
            return                                 # some sequence cannot draft: no common depth
        drafter = self.drafter
        lengths = caps.copy()
        props: Dict[int, np.ndarray] = {}
        if drafter.cheap:
            got = drafter.propose(items)
            keys = getattr(drafter, "keys", None) or [0] * len(got)
            for i, prop, key in zip(idx, got, keys):
                props[i] = prop
                lengths[i] = len(prop)
                dec[i].spec.key = key
        else:
            for i in idx:
                dec[i].spec.key = 0
        if not (self.gate.tick(B) if prompt_rows == 0 else self.gate.closed_for == 0):
            depths = np.zeros(B, np.int32)         # the gate is closed, or the plain reference is measured
            self.gated_steps += 1
        else:
            alpha = np.array([dec[i].spec.acc(dec[i].spec.key).alpha if caps[i] > 0 else 0.0 for i in range(B)])
            depths = plan_depths(alpha, np.minimum(caps, room_total // B if common else room_total),
                                 a=self.cost.a, b=self.cost.b, base_rows=B + prompt_rows,
                                 base_value=B + prompt_rows, n_ubatch=ctx.n_ubatch, common_depth=common,
                                 depth_cost=drafter.depth_cost, lengths=lengths)
        if not common and depths.sum() > room_total:
            depths = _trim(depths, room_total)
        if drafter.cheap:
            for i in idx:
                if depths[i] == 0 and len(props[i]):
                    sp = dec[i].spec
                    sp.pending, sp.pending_at, sp.pending_key = props[i].copy(), sp.n_hist, sp.key
        elif depths.any():
            want = [k for k, i in enumerate(idx) if depths[i] > 0]
            got = drafter.propose([(items[k][0], items[k][1], int(depths[idx[k]])) for k in want])
            for k, prop in zip(want, got):
                props[idx[k]] = prop
        for i in np.flatnonzero(depths).tolist():
            s = dec[i]
            sp = s.spec
            d = int(depths[i])
            real = props.get(i, np.zeros(0, np.int32))[:d]
            if len(real) < d:                      # a common depth pads with rows that gain nothing
                fill = real[-1] if len(real) else sp.hist[sp.n_hist - 1]
                real_n = len(real)
                real = np.concatenate([real, np.full(d - len(real), fill, np.int32)])
            else:
                real_n = d
            sp.draft = real.astype(np.int32, copy=False)
            sp.n_real = real_n

    # ------------------------------------------------------------------ rows, verification
    def decode_rows(self, dec: List):
        """The decode rows of the step: (tokens, positions, owner index, n draft rows); advances n_past."""
        counts = np.ones(len(dec), np.int64)
        parts_t, parts_p = [], []
        n_dr = 0
        for i, s in enumerate(dec):
            sp = getattr(s, "spec", None)
            d = sp.draft if sp is not None else None
            k = 0 if d is None else len(d)
            counts[i] = 1 + k
            t = np.empty(1 + k, np.int32)
            t[0] = s.generated[-1]
            if k:
                t[1:] = d
            parts_t.append(t)
            parts_p.append(np.arange(s.n_past, s.n_past + 1 + k, dtype=np.int32))
            s.n_past += 1 + k
            n_dr += k
        if n_dr:
            self.drafted_steps += 1
        self._n_dr = n_dr
        own = np.repeat(np.arange(len(dec), dtype=np.int32), counts)
        if not dec:
            return np.zeros(0, np.int32), np.zeros(0, np.int32), own, 0
        return np.concatenate(parts_t), np.concatenate(parts_p), own, n_dr

    @staticmethod
    def keep_mask(owners: List, own: np.ndarray) -> np.ndarray:
        """bool[len(own)]: the rows of the step that are not draft rows (a drafted sequence's first row is its
        pending token, the rows after it are its draft)."""
        keep = np.ones(len(own), bool)
        for k, s in enumerate(owners):
            sp = getattr(s, "spec", None)
            if sp is not None and sp.draft is not None:
                r = np.flatnonzero(own == k)
                keep[r[1:]] = False
        return keep

    def add_rows(self, sb, seqs: List, spec_at: Dict[int, int], s, j: int) -> int:
        """The engine's sampling entries (sb: its SampleBatch) for the k + 1 rows (from output row j) of s's drafted
        decode: row r is sampled at counter len(generated) + r with the penalty window plain decoding would have
        after d1..dr; spec_at[entry of the first row] = k + 1. Returns the output row after them."""
        d = s.spec.draft
        p = s.req.params
        hist = s.history(p.repeat_last_n) if p.penalised else None
        spec_at[len(seqs)] = len(d) + 1
        for r in range(len(d) + 1):
            h = None
            if hist is not None:
                h = np.concatenate([hist, d[:r]]) if r else hist
                if p.repeat_last_n >= 0:
                    h = h[max(len(h) - p.repeat_last_n, 0):]
            sb.add(j + r, p, s.seed, len(s.generated) + r, h)
            seqs.append(s)
        return j + len(d) + 1

    def drop_drafts(self, owners: List) -> None:
        """The drafted decode was refused (full KV cache): the sequences go back to one row each."""
        for s in owners:
            sp = getattr(s, "spec", None)
            if sp is not None and sp.draft is not None:
                s.n_past -= len(sp.draft)
                sp.draft = None
        self._n_dr = -1                            # an irregular step: not measured

    def verify(self, s, toks: np.ndarray, info_of) -> int:
        """Accepts the samples toks (int32[k + 1], rows in order) of s's drafted rows while each equals the
        next draft token, each emitted through the engine's _on_token; the rejected rows leave the KV cache.
        Returns the number of tokens emitted."""
        from ubatch.engine.sequence import DONE
        eng = self.eng
        sp = s.spec
        d = sp.draft
        k = len(d)
        n0 = s.n_past - (k + 1)
        m = 0
        for r in range(k + 1):
            t = int(toks[r])
            s.n_past = n0 + r + 1
            eng._on_token(s, t, info_of(r, t))
            if s.state == DONE or r == k or t != int(d[r]):
                break
            m += 1
        if s.state != DONE and s.seq_id >= 0 and s.n_past < n0 + k + 1:
            eng._kv.seq_rm(s.seq_id, s.n_past, -1)
        real = sp.n_real
        if real:
            sp.acc(sp.key).update(min(m, real), real)
        self.draft_rows += k
        self.draft_tokens += real
        self.accepted += min(m, real)
        sp.draft = None
        self._extra += r
        return r + 1

    def observe(self, ubatches: int, rows: int, seconds: float) -> None:
        """The step is over: ubatches and rows decoded, seconds of decoding and sampling. Only decode steps whose
        rows are exactly their sequences' rows and drafts are measured (no prompt rows, no retry): the cost model
        takes the decode and sampling seconds (what rows cost), the gate the whole step from its planning on
        (what the tokens per second are made of)."""
        B, n_dr = self._n_seq, self._n_dr
        self._n_seq = 0
        if B <= 0 or n_dr < 0 or rows != B + n_dr:
            return
        self.cost.observe(ubatches, rows, seconds)
        self.gate.observe(B, n_dr > 0, B + self._extra, time.perf_counter() - self._t_plan)

    def stats(self) -> dict:
        return {"draft": repr(self.drafter), "draft_rows": self.draft_rows, "draft_tokens": self.draft_tokens,
                "draft_accepted": self.accepted, "drafted_steps": self.drafted_steps,
                "acceptance": self.accepted / self.draft_tokens if self.draft_tokens else 0.0,
                "cost_a_s": self.cost.a, "cost_b_s": self.cost.b, "gate_closures": self.gate.closures,
                "gated_steps": self.gated_steps, "draft_speedup": self.gate.speedup}

    def close(self) -> None:
        self.drafter.close()


def _trim(depths: np.ndarray, room: int) -> np.ndarray:
    """Lowers the deepest drafts first until the total fits room."""
    d = depths.copy()
    while d.sum() > room:
        d[int(np.argmax(d))] -= 1
    return d


__all__ = ["EngineSpeculator", "SeqSpec"]
