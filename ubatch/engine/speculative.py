"""Exact speculative decoding: drafts, the adaptive draft length, and the KV room a draft may use.

A step verifies a sequence's draft d1..dk by decoding its pending token and the k drafted tokens as k + 1 rows
of the batch (every row an output). Row r is sampled exactly as plain decoding samples that position: the same
sampler, the sequence's own random stream at counter len(generated) + r, the penalty window that plain decoding
would see if d1..dr were accepted. The sample of row r is accepted while it equals d(r+1); the first sample
that differs is still emitted (it is what plain decoding samples there) and the rows after it are removed from
the KV cache (seq_rm). Because ubatch's logits of a row do not depend on the other rows of the batch, every
emitted token is the token plain decoding emits: a draft changes the speed, never the output.

Drafters (make_drafter):
* PromptLookupDrafter: prompt lookup (the continuation of an earlier occurrence of the last n-gram, one C
  call, csrc/engine/ngram.c); `LlamaPromptLookupDecoding` instances map to it with their own parameters;
* CallableDrafter: any `LlamaDraftModel`-like callable(input_ids) -> token ids;
* ModelDrafter: a second model sharing the vocabulary, greedy, with its own Context and KV cache per sequence.

The draft length is chosen per step by DraftPolicy: each sequence has an acceptance rate (a decayed count of
accepted / drafted tokens; the j-th draft token is accepted with probability ~ alpha^j), the step time is
modelled as a * ubatches + b * rows (CostModel, fitted online on the engine's own decode steps), and the depths
chosen maximise the expected tokens per second of the step. Prompts with little to copy get no draft rows (and
with prompt lookup their acceptance is still learnt from the proposals not submitted), so they are not slowed
down. DraftGate checks the prediction against the clock: a batch whose drafted steps are measured slower than
its plain steps stops drafting, and probes again later.

KV room: a sliding-window (iSWA) cache may overwrite a cell whose position has left the window; a draft row
must never do that (the rejected row would leave the cache unlike plain decoding, and could evict positions
that the rollback needs), so a draft is limited to the empty cells after the stream's head (sliding_room).
"""
from __future__ import annotations

import math
import os
import time
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ubatch.engine.ngram import prompt_lookup_ngram

DEFAULT_DRAFT_MAX = 16
DEFAULT_NGRAM = 8


# ---------------------------------------------------------------------------------------------- drafters
class PromptLookupDrafter:
    """Prompt lookup: the tokens that followed the earliest (latest=True: most recent) earlier occurrence of
    the last n-gram of the history, n = max_ngram_size down to 1, at most num_pred_tokens of them. The engine's
    default looks for the longest match up to 8 tokens, most recent first; `keys` (after propose) are the
    matched n-gram sizes, by which the acceptance rate is kept (a long match is copied far more often)."""

    cheap = True            # proposals cost nothing: computed every step, also to learn the acceptance rate

    def __init__(self, max_ngram_size: int = DEFAULT_NGRAM, num_pred_tokens: int = DEFAULT_DRAFT_MAX,
                 latest: bool = True) -> None:
        for name, v in (("max_ngram_size", max_ngram_size), ("num_pred_tokens", num_pred_tokens)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"prompt lookup: {name} must be an int >= 1, got {v!r}")
        self.max_ngram_size = int(max_ngram_size)
        self.num_pred_tokens = int(num_pred_tokens)
        self.latest = bool(latest)
        self.depth_cost = 0.0
        self.keys: List[int] = []

    def propose(self, items: Sequence[Tuple[int, np.ndarray, int]]) -> List[np.ndarray]:
        """items: (seq id, history int32[n], at most this many tokens); one int32 array per item."""
        out, self.keys = [], []
        for _, hist, cap in items:
            sl, g = prompt_lookup_ngram(hist, self.max_ngram_size, min(self.num_pred_tokens, cap), self.latest)
            out.append(hist[sl])
            self.keys.append(g)
        return out

    def release(self, seq_id: int) -> None:
        pass

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return (f"prompt-lookup(max_ngram_size={self.max_ngram_size}, num_pred_tokens={self.num_pred_tokens}"
                f"{', latest' if self.latest else ''})")


class CallableDrafter:
    """Any LlamaDraftModel-like callable: fn(input_ids intc[n]) -> token ids (truncated to the draft length;
    a token outside the vocabulary raises ValueError naming it)."""

    cheap = True

    def __init__(self, fn, n_vocab: int) -> None:
        if not callable(fn):
            raise ValueError(f"draft: {type(fn).__name__} is not callable")
        self.fn = fn
        self.n_vocab = int(n_vocab)
        self.depth_cost = 0.0

    def propose(self, items: Sequence[Tuple[int, np.ndarray, int]]) -> List[np.ndarray]:
        out = []
        for _, hist, cap in items:
            got = self.fn(hist.astype(np.intc, copy=True))
            a = np.asarray(got if got is not None else [])
            if a.size == 0:
                out.append(np.zeros(0, np.int32))
                continue
            if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
                raise ValueError(f"draft model {self.fn!r} must return a 1-D array of token ids, got "
                                 f"{a.dtype} with shape {a.shape}")
            a = a[:cap]
            bad = (a < 0) | (a >= self.n_vocab)
            if bad.any():
                raise ValueError(f"draft model {self.fn!r} returned token id {int(a[bad][0])}, outside the "
                                 f"vocabulary [0, {self.n_vocab})")
            out.append(a.astype(np.int32))
        return out

    def release(self, seq_id: int) -> None:
        pass

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"callable({self.fn!r})"


class ModelDrafter:
    """A second model sharing the vocabulary drafts greedily. It keeps each sequence's tokens in its own
    Context (one KV stream per sequence id of the engine): each call feeds what the sequence gained since the
    last call (dropping its rejected drafts with seq_rm) and decodes depth tokens one by one, all sequences
    of the step together."""

    cheap = False

    def __init__(self, model, *, n_vocab: int, n_seq_max: int, n_ctx_seq: int, n_batch: int,
                 n_threads: Optional[int], draft_max: int, tokenizer=None) -> None:
        from ubatch.engine.context import Context
        from ubatch.engine.llm import load_model
        self.model = load_model(model)
        if int(self.model.n_vocab) != int(n_vocab):
            raise ValueError(f"draft model: its vocabulary has {int(self.model.n_vocab)} tokens, the model's has "
                             f"{int(n_vocab)}: a draft model must share the vocabulary")
        _check_same_vocab(self.model, tokenizer, int(n_vocab))
        n_seq = int(n_seq_max)
        self.ctx = Context(self.model, n_ctx=(int(n_ctx_seq) + int(draft_max) + 256) * n_seq, n_batch=n_batch,
                           n_ubatch=n_batch, n_seq_max=n_seq, kv_unified=False, n_threads=n_threads)
        self.kv_tokens: List[np.ndarray] = [np.zeros(0, np.int32) for _ in range(n_seq)]
        self.depth_cost = 0.0         # seconds per draft decode (EMA)
        self.measure = True           # False keeps depth_cost as set (tests)

    def release(self, seq_id: int) -> None:
        pass                          # the tokens stay: a later prompt with the same prefix reuses them

    def _decode(self, tok, pos, seq) -> np.ndarray:
        """Decodes rows in slices of n_batch; the last row of each (seq, run) is an output. Returns the argmax
        of every output row, in row order."""
        from ubatch.batch.container import Batch
        out = np.zeros(len(tok), np.int8)
        last = np.ones(len(tok), bool)
        last[:-1] = seq[1:] != seq[:-1]
        out[last] = 1
        res = []
        nb = self.ctx.n_batch
        for off in range(0, len(tok), nb):
            sl = slice(off, off + nb)
            o = out[sl].copy()
            self.ctx.decode(Batch.from_arrays(tokens=tok[sl], pos=pos[sl], seq_ids=seq[sl], output=o))
            if o.any():
                res.append(np.argmax(self.ctx.get_logits(), axis=1).astype(np.int32))
        return np.concatenate(res) if res else np.zeros(0, np.int32)

    def propose(self, items: Sequence[Tuple[int, np.ndarray, int]]) -> List[np.ndarray]:
        items = [it for it in items]
        drafts = [np.zeros(0, np.int32) for _ in items]
        live = [i for i, (_, _, cap) in enumerate(items) if cap > 0]
        if not live:
            return drafts
        t0 = time.perf_counter()
        kv = self.ctx.memory
        tok, pos, seq = [], [], []
        for i in live:
            sid, hist, _ = items[i]
            have = self.kv_tokens[sid]
            m = min(len(have), len(hist) - 1)              # the last token is always fed (its logits are needed)
            neq = np.flatnonzero(have[:m] != hist[:m])
            c = int(neq[0]) if neq.size else m
            kv.seq_rm(sid, c, -1)
            tok.append(hist[c:])
            pos.append(np.arange(c, len(hist), dtype=np.int32))
            seq.append(np.full(len(hist) - c, sid, np.int32))
            self.kv_tokens[sid] = hist.copy()
        nxt = self._decode(np.concatenate(tok), np.concatenate(pos), np.concatenate(seq))
        steps = 1
        for j, i in enumerate(live):
            drafts[i] = nxt[j:j + 1]
        depth = max(items[i][2] for i in live)
        for r in range(1, depth):
            cont = [i for i in live if items[i][2] > r]
            if not cont:
                break
            sids = np.array([items[i][0] for i in cont], np.int32)
            last = np.array([drafts[i][-1] for i in cont], np.int32)
            p = np.array([len(self.kv_tokens[items[i][0]]) for i in cont], np.int32)
            nxt = self._decode(last, p, sids)
            steps += 1
            for j, i in enumerate(cont):
                sid = items[i][0]
                self.kv_tokens[sid] = np.append(self.kv_tokens[sid], last[j])
                drafts[i] = np.append(drafts[i], nxt[j])
        dt = (time.perf_counter() - t0) / steps
        if self.measure:
            self.depth_cost = dt if self.depth_cost == 0.0 else 0.8 * self.depth_cost + 0.2 * dt
        return drafts

    def close(self) -> None:
        self.ctx.close()

    def __repr__(self) -> str:
        return f"draft model({getattr(self.model, 'name', type(self.model).__name__)})"


def _check_same_vocab(model, tokenizer, n_vocab: int) -> None:
    """Both tokenizers (when there are) give the same piece for a spread of token ids."""
    try:
        other = getattr(model, "tokenizer", None)
    except Exception:             # a GGUF without a vocabulary
        other = None
    if tokenizer is None or other is None:
        return
    for t in np.linspace(0, n_vocab - 1, 64).astype(int).tolist():
        if tokenizer.token_to_piece(t, special=True) != other.token_to_piece(t, special=True):
            raise ValueError(f"draft model: token {t} is {other.token_to_piece(t, special=True)!r} there and "
                             f"{tokenizer.token_to_piece(t, special=True)!r} in the model: a draft model must "
                             f"share the vocabulary")


def make_drafter(draft, *, n_vocab: int, n_seq_max: int = 1, n_ctx_seq: int = 4096, n_batch: int = 512,
                 n_threads: Optional[int] = None, draft_max: int = DEFAULT_DRAFT_MAX, tokenizer=None):
    """The drafter for `draft`: "prompt-lookup" (or "ngram"), a PromptLookupDrafter / CallableDrafter /
    ModelDrafter, a LlamaPromptLookupDecoding (its parameters, searched in C), any LlamaDraftModel-like
    callable, a ubatch Model, or a model name / GGUF path (a draft model sharing the vocabulary)."""
    if isinstance(draft, (PromptLookupDrafter, CallableDrafter, ModelDrafter)):
        return draft
    if isinstance(draft, str) and draft.lower() in ("prompt-lookup", "prompt_lookup", "ngram", "pld"):
        return PromptLookupDrafter(num_pred_tokens=draft_max)
    if hasattr(draft, "find_candidate_pred_tokens") and hasattr(draft, "max_ngram_size") and \
            hasattr(draft, "num_pred_tokens") and type(draft).__call__ is _pld_call(draft):
        return PromptLookupDrafter(draft.max_ngram_size, draft.num_pred_tokens, latest=False)
    if isinstance(draft, (str, os.PathLike)) or hasattr(draft, "n_vocab") and hasattr(draft, "n_embd"):
        return ModelDrafter(draft, n_vocab=n_vocab, n_seq_max=n_seq_max, n_ctx_seq=n_ctx_seq, n_batch=n_batch,
                            n_threads=n_threads, draft_max=draft_max, tokenizer=tokenizer)
    if callable(draft):
        return CallableDrafter(draft, n_vocab)
    raise ValueError(f"draft must be 'prompt-lookup', a LlamaDraftModel-like callable, a model or a GGUF path, "
                     f"got {type(draft).__name__}")


def _pld_call(obj):
    """The __call__ of the LlamaPromptLookupDecoding class obj is an instance of (ubatch's or
    llama-cpp-python's, not overridden), else None."""
    for k in type(obj).__mro__:
        if k.__name__ == "LlamaPromptLookupDecoding" and "__call__" in k.__dict__:
            return k.__dict__["__call__"]
    return None


# ---------------------------------------------------------------------------------------------- policy
class Acceptance:
    """A sequence's acceptance rate of draft tokens: decayed counts of accepted / tried tokens (a draft of k
    tokens of which m are accepted tries m + 1 tokens when m < k, else k), with a prior."""

    __slots__ = ("acc", "tried")
    PRIOR, WEIGHT, DECAY = 0.5, 2.0, 0.85

    def __init__(self) -> None:
        self.acc = 0.0
        self.tried = 0.0

    def update(self, accepted: int, drafted: int) -> None:
        if drafted <= 0:
            return
        self.acc = self.acc * self.DECAY + accepted
        self.tried = self.tried * self.DECAY + (accepted + 1 if accepted < drafted else drafted)

    @property
    def alpha(self) -> float:
        return (self.acc + self.PRIOR * self.WEIGHT) / (self.tried + self.WEIGHT)


class CostModel:
    """Seconds of a decode step ~ a * ubatches + b * rows, by decayed least squares over the observed decode
    steps with a weak prior b = R0 * a (which is all there is while every step has the same shape).

    Only steps without prompt rows are fitted (observe(..., prompt_rows=k) with k > 0 is ignored): a prompt row
    has no output (no lm_head product, no sampling) and a 512-row prefill ubatch runs the matmuls at a far better
    rate per row than a decode step's few rows, so with their large row counts the prefill steps outweighed every
    decode step of the fit and b came out at about half of what a draft row costs (Qwen2.5 0.5B, 8 sequences:
    fitted b/a 0.07 against 0.17-0.3 measured on the decode steps): draft rows looked nearly free."""

    R0, DECAY, PRIOR_W, CLIP, N_CLIP = 0.15, 0.97, 0.5, 2.0, 8

    def __init__(self) -> None:
        self.s = np.zeros(5)          # sum u*u, u*n, n*n, u*y, n*y
        self.n_obs = 0
        self.a, self.b = 1.0, self.R0

    def observe(self, ubatches: int, rows: int, seconds: float, prompt_rows: int = 0) -> None:
        if prompt_rows or ubatches <= 0 or rows <= 0 or not (seconds > 0.0) or not math.isfinite(seconds):
            return
        u, n, y = float(ubatches), float(rows), float(seconds)
        if self.n_obs >= self.N_CLIP:             # a stall (a loaded machine) moves the fit by at most 2x
            p = self.predict(ubatches, rows)
            y = min(max(y, p / self.CLIP), p * self.CLIP)
        self.s = self.s * self.DECAY + np.array([u * u, u * n, n * n, u * y, n * y])
        self.n_obs += 1
        suu, sun, snn, suy, sny = self.s
        w = self.PRIOR_W * (snn / max(self.n_obs, 1) + 1.0)        # prior: (b - R0 a)^2 with weight w
        A = np.array([[suu + w * self.R0 ** 2, sun - w * self.R0], [sun - w * self.R0, snn + w]])
        try:
            a, b = np.linalg.solve(A, np.array([suy, sny]))
        except np.linalg.LinAlgError:
            return
        if not (a > 0.0):
            a = y / (u + self.R0 * n)
        b = min(max(b, 0.01 * a), 2.0 * a)
        self.a, self.b = float(a), float(b)

    def predict(self, ubatches: int, rows: int) -> float:
        return self.a * ubatches + self.b * rows


class DraftGate:
    """Whether a batch drafts at all, from measured step times (the cost model and the acceptance rates only
    predict). A drafted decode step of B sequences that emitted E tokens in t seconds would have taken E / B
    plain steps of T(B) seconds: its speedup is E T(B) / (B t). T(B) is the decayed mean of the measured plain
    decode steps of B sequences, or, for a B not measured, the nearest measured one scaled by the cost model
    (predict(rows) -> seconds). The gate keeps the decayed ratio of those sums over the drafted steps since it
    opened; once MIN_STEPS drafted steps are in and the ratio is below LOW, it closes for `backoff` steps
    (OFF_MIN, doubled at every probe that fails again, up to OFF_MAX; back to OFF_MIN once a probe pays), then
    opens again: the probe. While it is open a step is kept plain when no plain step was measured yet or
    REF_EVERY drafted steps ago: the reference is measured, not predicted; and before it closes, one plain step
    re-measures T(B) (that measurement becomes T(B) and the ratio is re-scaled to it): a reference measured at a
    quieter moment of a shared machine does not close it.

    tick(B) is asked once per step that could draft; observe(B, drafted, emitted, seconds) takes the step's
    measurement (decode steps only: no prompt rows)."""

    DECAY, PLAIN_DECAY, MIN_STEPS, LOW = 0.9, 0.7, 8, 0.95
    OFF_MIN, OFF_MAX, REF_EVERY = 8, 256, 48

    def __init__(self, predict=None) -> None:
        self.predict = predict        # rows -> predicted seconds of a decode step (None: only measured B)
        self.plain: dict = {}         # B -> decayed mean seconds of a plain decode step of B sequences
        self.since_plain = -1         # drafted steps since the last plain one (-1: none measured)
        self.num = 0.0                # decayed sum of E T(B) / B over the drafted steps since the gate opened
        self.den = 0.0                # decayed sum of their seconds
        self.n = 0                    # drafted steps since the gate opened
        self.closed_for = 0
        self.backoff = self.OFF_MIN
        self.closures = 0
        self.confirm = False          # the ratio fell below LOW: the next step is plain, then it is decided

    @property
    def speedup(self) -> float:
        """The measured speedup of the drafted steps since the gate opened (1.0 before any)."""
        return self.num / self.den if self.den > 0.0 else 1.0

    def reference(self, B: int) -> Optional[float]:
        """T(B): seconds of a plain decode step of B sequences (None: nothing measured to go by)."""
        t = self.plain.get(B)
        if t is not None or not self.plain:
            return t
        B0 = min(self.plain, key=lambda k: (abs(k - B), k))
        if self.predict is None:
            return None
        p0, p = self.predict(B0), self.predict(B)
        return self.plain[B0] * p / p0 if p0 > 0.0 and p > 0.0 else None

    def tick(self, B: int) -> bool:
        """A step with B decoding sequences is planned: True when it may carry draft rows."""
        if self.closed_for > 0:
            self.closed_for -= 1
            if self.closed_for == 0:
                self.num = self.den = 0.0
                self.n = 0
            return False
        return not self.confirm and 0 <= self.since_plain < self.REF_EVERY and self.reference(B) is not None

    def observe(self, B: int, drafted: bool, emitted: int, seconds: float) -> None:
        if B <= 0 or not (seconds > 0.0) or not math.isfinite(seconds):
            return
        if not drafted:
            t = self.plain.get(B)
            if self.confirm and t is not None:      # the confirming step: the fresh measurement is the reference
                self.plain[B] = seconds
                self.confirm = False
                self.num *= seconds / t
                self._decide()
            else:
                self.plain[B] = seconds if t is None else t + (1.0 - self.PLAIN_DECAY) * (seconds - t)
            self.since_plain = 0
            return
        ref = self.reference(B)
        if ref is None or self.closed_for > 0:
            return
        self.since_plain += 1
        self.num = self.num * self.DECAY + emitted * ref / B
        self.den = self.den * self.DECAY + seconds
        self.n += 1
        if self.n >= self.MIN_STEPS:
            if self.speedup < self.LOW:
                self.confirm = True
            elif self.speedup >= 1.0:
                self.backoff = self.OFF_MIN

    def _decide(self) -> None:
        """After the confirming plain step: closes for `backoff` steps if the ratio is still below LOW."""
        if self.speedup < self.LOW:
            self.closed_for = self.backoff
            self.backoff = min(2 * self.backoff, self.OFF_MAX)
            self.closures += 1


MARGIN = 1.02


def plan_depths(alpha: np.ndarray, caps: np.ndarray, *, a: float, b: float, base_rows: int, base_value: float,
                n_ubatch: int, common_depth: bool, depth_cost: float = 0.0,
                lengths: Optional[np.ndarray] = None) -> np.ndarray:
    """Draft depth per sequence (int32[len(alpha)]) maximising expected tokens / expected step time.
    alpha: acceptance rates; caps: the most draft tokens each sequence can take (0: none). The step without
    drafts has base_rows rows and yields base_value (tokens, prompt rows counted as one each).
    common_depth (one KV stream per sequence, several sequences): split_equal cuts rows of unequal counts
    into separate ubatches, so either every sequence drafts the same depth (all caps >= it) or none does.
    Otherwise rows are taken greedily by their acceptance probability alpha^j across sequences.
    lengths: the real draft tokens each sequence has (<= caps; default caps): beyond them a common depth pads
    with rows that gain nothing."""
    B = len(alpha)
    depths = np.zeros(B, np.int32)
    if B == 0 or int(caps.max(initial=0)) <= 0:
        return depths
    nu = max(int(n_ubatch), 1)
    t0 = a * max(math.ceil(base_rows / nu), 1) + b * base_rows
    best = base_value / t0 * MARGIN
    alpha = np.clip(alpha.astype(np.float64), 0.0, 0.999)
    caps = np.asarray(caps, np.int64)
    lengths = caps if lengths is None else np.minimum(np.asarray(lengths, np.int64), caps)
    if common_depth:
        D_max = int(caps.min())
        if D_max <= 0:
            return depths
        j = np.arange(1, D_max + 1)
        gain = np.where(j[None, :] <= lengths[:, None], alpha[:, None] ** j[None, :], 0.0)
        cum = np.cumsum(gain, axis=1).sum(axis=0)                               # expected accepted, by depth
        rows = base_rows + B * j
        T = a * np.ceil(rows / nu) + b * rows + depth_cost * j
        ratio = (base_value + cum) / T
        k = int(np.argmax(ratio))
        if ratio[k] > best:
            depths[:] = j[k]
        return depths
    if int(lengths.max(initial=0)) <= 0:
        return depths
    owner = np.repeat(np.arange(B), lengths)
    jj = np.arange(owner.size) - np.repeat(np.cumsum(lengths) - lengths, lengths) + 1
    g = alpha[owner] ** jj
    order = np.lexsort((jj, -g))
    g, owner, jj = g[order], owner[order], jj[order]
    rows = base_rows + np.arange(1, len(g) + 1)
    T = a * np.ceil(rows / nu) + b * rows + depth_cost * np.maximum.accumulate(jj)
    ratio = (base_value + np.cumsum(g)) / T
    k = int(np.argmax(ratio))
    if ratio[k] > best:
        np.add.at(depths, owner[:k + 1], 1)
    return depths


# ---------------------------------------------------------------------------------------------- KV room
def sliding_room(memory, stream: int) -> Optional[int]:
    """How many rows can be placed in `stream` without overwriting a cell that holds data: None when the
    memory has no sliding-window cache (a plain cache only ever fills empty cells), else the empty cells
    after the sliding cache's head when nothing is stored at or after it and find_slot will not restart
    from cell 0, else 0."""
    swa = getattr(memory, "swa", None)
    if swa is None:
        return None
    head, used, top = swa.head(stream), swa.used(stream), swa.used_max_p1(stream)
    if head < top or head > used + 2:
        return 0
    return max(swa.size - head, 0)


__all__ = ["Acceptance", "CallableDrafter", "CostModel", "DEFAULT_DRAFT_MAX", "DraftGate", "ModelDrafter",
           "PromptLookupDrafter", "make_drafter", "plan_depths", "sliding_room"]
