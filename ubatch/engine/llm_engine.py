"""LLMEngine: text generation with continuous batching on one Context (docs/engine.md).

Each `step()` is one round of llama.cpp's server loop:
1. admission: waiting requests take free sequence ids, first come first served (a request with n completions
   takes n ids at once). With one shared KV stream a request is admitted only when the free cells can hold its
   prompt besides what the running sequences still have to place (unless nothing runs);
2. the batch: the pending sampled token of every generating sequence, then chunks of the admitted prompts up to
   n_batch tokens, both in sequence-id order; only a prompt's last token is an output;
3. decode it in slices of n_batch; on KVCacheFullError the slice is halved and retried (the server's retry); a
   single token that still does not fit preempts the most recently admitted sequence: its cells are freed
   (seq_rm) and it goes back to the head of the queue with everything it generated, to be recomputed later —
   bitwise identical thanks to batch invariance, so nothing is lost or duplicated;
4. sampling of every output row in one C call (ubatch/engine/sampling.py), each sequence with its own seeded
   stream; when the last chunk of a prompt with n > 1 completions is decoded, its sequence is forked (seq_cp)
   into the other n - 1 sequences and all n sample from the same logits row: the prompt is decoded once;
5. a sequence ends on an end-of-generation token, a stop string (matched on the text, see detok.py), max_tokens,
   or when its next token would not fit in its context (n_ctx_seq cells): "stop" or "length". Its cells are
   freed (seq_rm) and its sequence id goes to the next admissions.
6. prefix caching (prefix_cache.py, on unless enable_prefix_caching=False): a finished sequence's cells stay as a
   cached entry instead of being freed; an admitted prompt takes the longest prefix some sequence holds (seq_cp) or
   waits for the running one computing it, and only the rest is decoded; cached cells are evicted before a full
   cache makes the engine retry or preempt.
"""
from __future__ import annotations

import heapq
import itertools
import os
import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Deque, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ubatch.batch.container import Batch
from ubatch.common.errors import KVCacheFullError, UbatchError
from ubatch.engine.batcher import ubatch_records
from ubatch.engine.context import Context
from ubatch.engine.detok import TextState
from ubatch.engine.engine_stats import EngineStats, RequestTimes
from ubatch.engine.prefix_cache import PrefixCache
from ubatch.engine.sampling import SampleBatch, SamplingParams, sample


class PromptTooLongError(ValueError):
    """A prompt that cannot fit in the context of one sequence (raised by add_request, before any decode)."""


@dataclass
class CompletionOutput:
    """One completion of a request, as of the last step that advanced it. token_ids never hold the
    end-of-generation token; text never holds a stop string. logprobs_delta (when the request asked for
    logprobs): per new token a dict {"token_id", "logprob", "top_logprobs": [(token_id, logprob), ...]} with
    the log-softmax of the raw logits."""

    index: int
    text: str = ""
    token_ids: List[int] = field(default_factory=list)
    text_delta: str = ""
    token_ids_delta: List[int] = field(default_factory=list)
    finish_reason: Optional[str] = None
    logprobs_delta: Optional[list] = None


@dataclass
class RequestOutput:
    """What a step did to one request."""

    request_id: str
    prompt_tokens: int
    finished: bool
    outputs: List[CompletionOutput]
    prompt_token_ids: List[int] = field(default_factory=list)


WAITING, PROMPT, FORK, GEN, DONE = "waiting", "prompt", "fork", "generating", "done"


class _Seq:
    """One completion: while running, one KV sequence. Its tokens are prompt + generated; the KV holds the
    first n_past of them; a generating sequence has exactly one token (the last sampled) left to place."""

    __slots__ = ("req", "index", "seed", "seq_id", "n_past", "generated", "text", "finish_reason", "state", "stamp",
                 "d_text", "d_tok", "d_lp", "gstate", "spec")

    def __init__(self, req: "_Req", index: int, seed: int) -> None:
        self.req = req
        self.index = index
        self.seed = seed
        self.seq_id = -1
        self.n_past = 0
        self.generated: List[int] = []
        self.text = TextState(req.params.stop)
        self.finish_reason: Optional[str] = None
        self.state = WAITING
        self.stamp = 0
        self.d_text = ""
        self.d_tok: List[int] = []
        self.d_lp: Optional[list] = [] if req.params.logprobs is not None else None
        self.gstate = req.grammar.clone() if req.grammar is not None else None   # its own grammar position
        self.spec = None                  # speculative decoding state (spec_engine.SeqSpec)

    @property
    def n_tokens(self) -> int:
        return len(self.req.prompt) + len(self.generated)

    def tokens(self, a: int, b: int) -> np.ndarray:
        """int32 tokens [a, b) of prompt + generated."""
        p = self.req.prompt
        P = len(p)
        if b <= P:
            return p[a:b]
        gen = np.asarray(self.generated[max(a - P, 0):b - P], np.int32)
        return gen if a >= P else np.concatenate([p[a:], gen])

    def history(self, last_n: int) -> np.ndarray:
        """The last last_n tokens (prompt included) the repeat penalty looks at (-1: all)."""
        n = self.n_tokens
        return self.tokens(0 if last_n < 0 else max(0, n - last_n), n)


class _Req:
    __slots__ = ("rid", "prompt", "params", "seqs", "times", "aborted", "grammar")

    def __init__(self, rid: str, prompt: np.ndarray, params: SamplingParams, times: RequestTimes,
                 grammar=None) -> None:
        self.grammar = grammar
        self.rid = rid
        self.prompt = prompt
        self.params = params
        self.seqs: List[_Seq] = []
        self.times = times
        self.aborted = False

    @property
    def finished(self) -> bool:
        return all(s.state == DONE for s in self.seqs)


def _resolve_tokenizer(model, tokenizer):
    """The tokenizer to use: the one given, else the model's, else a byte tokenizer for a 256-token vocabulary
    without one (the embedded tiny model), else None (token-id prompts only)."""
    if tokenizer is not None:
        return tokenizer
    try:
        tok = getattr(model, "tokenizer", None)
    except Exception:       # a GGUF without a vocabulary
        tok = None
    if tok is None and int(model.n_vocab) == 256:
        from ubatch.engine.byte_tokenizer import ByteTokenizer
        tok = ByteTokenizer()
    return tok


class LLMEngine:
    """Continuous-batching generation on one Context (see the module docstring). Not thread-safe: one thread
    owns it and calls add_request / abort_request / step."""

    def __init__(self, model, *, n_ctx: int = 4096, n_batch: int = 512, n_ubatch: int = 512, n_seq_max: int = 8,
                 kv_unified: bool = False, type_k: str = "f16", type_v: str = "f16", n_threads: Optional[int] = None,
                 tokenizer=None, timeline: bool = False, enable_prefix_caching: bool = True,
                 prefix_cache_max_cells: Optional[int] = None, draft=None, draft_max: int = 16) -> None:
        if model is None:
            raise ValueError("LLMEngine needs a model (ubatch.models.load(name) or a ubatch.Model)")
        self.model = model
        self.ctx = Context(model, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_ubatch, n_seq_max=n_seq_max,
                           kv_unified=kv_unified, type_k=type_k, type_v=type_v, n_threads=n_threads)
        self.tokenizer = _resolve_tokenizer(model, tokenizer)
        self.n_vocab = int(model.n_vocab)
        self.n_threads = n_threads or os.cpu_count() or 1
        self._kv = self.ctx.memory
        self._free: List[int] = list(range(self.ctx.n_seq_max))        # min-heap of free sequence ids
        self._active: Dict[int, _Seq] = {}                             # seq id -> running sequence
        self._waiting: Deque[Tuple[_Req, List[_Seq]]] = deque()        # admission units
        self._reqs: Dict[str, _Req] = {}
        self._ids = itertools.count()
        self._stamp = itertools.count(1)
        self._last_step_s = 0.0
        self._embed_ctx: Dict[str, Context] = {}
        self._t0 = time.perf_counter()
        self.statistics = EngineStats(n_ubatch=self.ctx.n_ubatch, n_stream=self._kv.n_stream, kv_size=self._kv.size,
                                      peak_kv_cells=[0] * self._kv.n_stream, timeline=bool(timeline))
        self._seed_rng = random.SystemRandom()
        # automatic prefix caching (prefix_cache.py); None when turned off
        self._prefix: Optional[PrefixCache] = (PrefixCache(self, max_cells=prefix_cache_max_cells)
                                               if enable_prefix_caching else None)
        self._spec = None                 # speculative decoding (spec_engine.py): draft = prompt lookup / model / callable
        if draft is not None:
            from ubatch.engine.spec_engine import EngineSpeculator
            self._spec = EngineSpeculator(self, draft, draft_max)

    # ------------------------------------------------------------------ requests
    def _prompt_tokens(self, prompt) -> np.ndarray:
        if isinstance(prompt, (str, bytes)):
            if self.tokenizer is None:
                raise ValueError("a text prompt needs a tokenizer (this model has none): pass token ids")
            ids = self.tokenizer.encode(prompt, add_special=True, parse_special=True)
            bos = getattr(self.tokenizer, "bos", -1)
            if len(ids) >= 2 and bos >= 0 and ids[0] == bos and ids[1] == bos:
                ids = ids[1:]       # a template that writes the BOS itself, plus the one add_special adds
            arr = np.asarray(ids, np.int32)
        else:
            try:
                arr = np.asarray(list(prompt))
            except TypeError:
                raise ValueError(f"prompt must be a string or a list of token ids, got {type(prompt).__name__}")
            if arr.size and (arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer)):
                raise ValueError("prompt token ids must be a flat list of ints")
            arr = arr.astype(np.int64)
            if arr.size and (arr.min() < 0 or arr.max() >= self.n_vocab):
                bad = int(arr[(arr < 0) | (arr >= self.n_vocab)][0])
                raise ValueError(f"prompt token id {bad} is outside the vocabulary [0, {self.n_vocab})")
            arr = arr.astype(np.int32)
        if arr.size == 0:
            raise ValueError("the prompt is empty (no tokens)")
        return arr

    def add_request(self, prompt: Union[str, Sequence[int]], params: Optional[SamplingParams] = None,
                    request_id: Optional[str] = None) -> str:
        """Queues a request; validates it now (ValueError naming the field; PromptTooLongError for a prompt
        longer than a sequence's context); nothing is decoded until step()."""
        params = (params or SamplingParams()).validated(self.n_vocab)
        if params.n > self.ctx.n_seq_max:
            raise ValueError(f"n = {params.n} completions need {params.n} sequences, n_seq_max is "
                             f"{self.ctx.n_seq_max}")
        if params.stop and self.tokenizer is None:
            raise ValueError("stop strings need a tokenizer (this model has none)")
        toks = self._prompt_tokens(prompt)
        if len(toks) > self.ctx.n_ctx_seq:
            raise PromptTooLongError(f"the prompt has {len(toks)} tokens, more than the {self.ctx.n_ctx_seq} cells "
                                     f"of a sequence's context (n_ctx {self.ctx.n_ctx}, n_seq_max "
                                     f"{self.ctx.n_seq_max}{', unified KV' if self.ctx.kv_unified else ''})")
        rid = str(request_id) if request_id is not None else f"req-{next(self._ids)}"
        if rid in self._reqs:
            raise ValueError(f"request_id {rid!r} is already in use")
        grammar = self._grammar_of(params)
        if grammar is not None:
            if hasattr(params, "speculative"):
                params.speculative = False    # drafts would be verified without the grammar: not drafted
            grammar = grammar.state()         # the requests' start state (its completions clone it)
            if params.grammar_prefix:
                from ubatch.grammar import GrammarRejected
                try:
                    grammar.accept_text(params.grammar_prefix)
                except GrammarRejected:
                    raise ValueError("grammar_prefix: the grammar does not allow this text") from None
        times = RequestTimes(added=time.perf_counter())
        req = _Req(rid, toks, params, times, grammar)
        base = params.seed if params.seed is not None else self._seed_rng.getrandbits(64)
        req.seqs = [_Seq(req, j, (base + j) % 2**64) for j in range(params.n)]
        self._reqs[rid] = req
        self._waiting.append((req, list(req.seqs)))
        self.statistics.requests += 1
        self.statistics.times.append(times)
        return rid

    def _grammar_of(self, params: SamplingParams):
        """The compiled grammar of a request (grammar= GBNF / Grammar / LlamaGrammar, or json_schema=), or None.
        Compiled grammars are kept (a few, by text) so that their per-state caches serve later requests."""
        if params.grammar is None and params.json_schema is None:
            return None
        from ubatch.grammar import Grammar, GrammarVocab
        from ubatch.grammar.schema import json_schema_to_gbnf
        if self.tokenizer is None or not hasattr(self.tokenizer, "token_to_piece"):
            raise ValueError("grammar / json_schema need the model's tokenizer")
        g = params.grammar
        root = "root"
        if g is None:
            text = json_schema_to_gbnf(params.json_schema)
        elif isinstance(g, Grammar):
            if g.vocab is not None and g.vocab.tokenizer is self.tokenizer:
                return g
            text, root = g.text, g.root
        elif isinstance(g, (str, bytes)):
            text = g.decode("utf-8") if isinstance(g, bytes) else g
        else:                                   # LlamaGrammar
            text, root = g._grammar, getattr(g, "_root", "root")
        cache = self.__dict__.setdefault("_grammars", {})
        key = (text, root)
        hit = cache.pop(key, None)
        if hit is None:
            hit = Grammar(text, GrammarVocab.of(self.tokenizer), root)
        cache[key] = hit
        while len(cache) > 16:
            cache.pop(next(iter(cache)))
        if hasattr(g, "trigger_words"):         # a LazyGrammar: free until its trigger (ubatch/grammar/lazy.py)
            return g.bind(hit)
        return hit

    def abort_request(self, request_id: str) -> None:
        """Drops a request: its running sequences leave the KV cache (seq_rm) now."""
        req = self._reqs.pop(str(request_id), None)
        if req is None:
            return
        req.aborted = True
        self._waiting = deque(u for u in self._waiting if u[0] is not req)
        for s in req.seqs:
            if s.seq_id >= 0:
                self._release(s)
            s.state = DONE
            s.finish_reason = s.finish_reason or "abort"

    def has_unfinished_requests(self) -> bool:
        return bool(self._waiting or self._active)

    def waiting_request_ids(self) -> set:
        """The request ids still queued for admission (no sequence of theirs is in any decode yet)."""
        return {u[0].rid for u in self._waiting}

    def stats(self) -> dict:
        st = self.statistics
        return {"waiting": sum(len(u[1]) for u in self._waiting), "running": len(self._active),
                "kv_cells_used": sum(self._kv.used(k) for k in range(self._kv.n_stream)), "steps": st.steps,
                "ubatches": st.n_ubatches, "last_step_s": self._last_step_s,
                "tokens": st.prompt_tokens + st.decode_tokens, "prompt_tokens": st.prompt_tokens,
                "generated_tokens": st.generated_tokens, "decode_calls": st.decode_calls, "retries": st.retries,
                "preemptions": st.preemptions, **self.prefix_stats(),
                **(self._spec.stats() if self._spec is not None else {})}

    def prefix_stats(self) -> dict:
        """The prefix cache's counters (prefix_cache_*: queries, hits, tokens queried / saved, hit rate = saved /
        queried, cached cells and entries, evictions); {"prefix_cache": False} when it is off."""
        return self._prefix.stats() if self._prefix is not None else {"prefix_cache": False}

    # ------------------------------------------------------------------ sequence slots
    def _release(self, s: _Seq) -> None:
        """s leaves the KV cache (its cells may stay as a prefix-cache entry) and gives its sequence id back."""
        if s.spec is not None and s.spec.draft is not None and s.seq_id >= 0:
            self._kv.seq_rm(s.seq_id, s.n_past, -1)      # draft rows past its last token: as without a draft
        if self._prefix is not None:
            self._prefix.release(s)
        else:
            self._kv.seq_rm(s.seq_id)
        del self._active[s.seq_id]
        heapq.heappush(self._free, s.seq_id)
        s.seq_id = -1
        s.n_past = 0

    def _room(self, unit: List[_Seq]) -> bool:
        """With one shared stream: do the free cells hold this unit's tokens besides what the running sequences
        still have to place? (Per-sequence streams always have room: a sequence never outgrows its stream.)"""
        if self._kv.n_stream > 1 or not self._active:
            return True
        pending = sum(s.n_tokens - s.n_past for s in self._active.values() if s.state != FORK)
        need = unit[0].n_tokens + sum(1 for s in unit[1:])
        used = self._kv.used(0)
        if self._prefix is not None and used + pending + need > self._kv.size:
            used -= self._prefix.cached_cells()      # cells held only by the prefix cache are evicted on demand
        return used + pending + need <= self._kv.size

    def _admit(self) -> None:
        while self._waiting:
            req, unit = self._waiting[0]
            if len(unit) > len(self._free) or not self._room(unit):
                break
            self._waiting.popleft()
            first = req.times.ub_admitted < 0
            if first:
                req.times.ub_admitted = self.statistics.n_ubatches
            stamp = next(self._stamp)
            for k, s in enumerate(unit):
                s.seq_id = (heapq.heappop(self._free) if self._prefix is None
                            else self._prefix.take_id(self._free, s, k == 0))
                s.stamp = stamp
                s.n_past = 0
                s.state = PROMPT if k == 0 else FORK
                self._active[s.seq_id] = s
            if first:
                req.times.seq_id = unit[0].seq_id
            if self._prefix is not None:
                self._prefix.start(unit[0])           # the longest cached prefix, or a wait for a running one

    def _preempt(self) -> List[_Seq]:
        """Frees the most recently admitted running sequence (with its fork group if it has not forked yet) and
        puts it back at the head of the queue; returns the sequences removed ([] when nothing can be)."""
        if len(self._active) <= 1:
            return []
        victim = max(self._active.values(), key=lambda s: (s.stamp, s.index))
        group = [victim]
        if victim.state in (PROMPT, FORK):     # not forked yet: the lead and its forks go back together
            unit = [s for s in self._active.values() if s.stamp == victim.stamp and s.state in (PROMPT, FORK)]
            if any(s.state == FORK for s in unit):
                group = sorted(unit, key=lambda s: (s.state != PROMPT, s.index))
        for s in group:
            self._release(s)
            s.state = WAITING
        self._waiting.appendleft((victim.req, group))
        self.statistics.preemptions += 1
        self._event("preempted", f"request {victim.req.rid} (completion {victim.index}) preempted: its KV cells "
                                 f"were freed, it will recompute them")
        return group

    # ------------------------------------------------------------------ one step
    def _build(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, List[_Seq], np.ndarray]:
        """The step's rows: (tokens, pos, seq ids, output flags, owners, owner index per row, prompt flag)."""
        n_batch = self.ctx.n_batch
        seqs = [self._active[k] for k in sorted(self._active)]
        owners: List[_Seq] = []
        dec = [s for s in seqs if s.state == GEN]
        if self._spec is not None:        # the pending token, plus draft rows for the sequences that draft
            self._spec.plan(dec, min(n_batch - len(dec), sum(s.n_tokens - s.n_past for s in seqs if s.state == PROMPT)))
            t_, p_, o_, _ = self._spec.decode_rows(dec)
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
            if self._prefix is not None:
                k = self._prefix.cap(s, k)
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

    def step(self) -> List[RequestOutput]:
        """One decode step (see the module docstring); returns the outputs of the requests that progressed."""
        t_step = time.perf_counter()
        st = self.statistics
        mark = (st.decode_s + st.sample_s, st.n_ubatches, st.prompt_tokens + st.decode_tokens)
        self._admit()
        if self._prefix is not None:
            self._prefix.resolve()
        tok, pos, seq, out, owners, own, prompt = self._build()
        st.steps += 1
        touched: Dict[str, _Req] = {}
        n_full = self.ctx.n_batch
        nb, off = n_full, 0
        while off < len(tok):
            end = min(off + nb, len(tok))
            try:
                self._decode(tok[off:end], pos[off:end], seq[off:end], out[off:end], prompt[off:end])
            except KVCacheFullError:
                if self._spec is not None and off == 0 and any(getattr(s.spec, "draft", None) is not None
                                                               for s in owners):
                    keep = self._spec.keep_mask(owners, own)          # retry the step without its draft rows
                    tok, pos, seq, out, own, prompt = tok[keep], pos[keep], seq[keep], out[keep], own[keep], prompt[keep]
                    self._spec.drop_drafts(owners)
                    continue
                if self._prefix is not None and self._prefix.evict_for_full(end - off):
                    continue                              # cached cells went first: retry the same slice
                if end - off > 1:
                    nb = max(1, (end - off) // 2)        # the server's retry: same offset, half the slice
                    st.retries += 1
                    self._event("retry")
                    continue
                gone = self._preempt()
                if not gone:                              # alone and still no room: its context is full
                    s = owners[int(own[off])]
                    s.n_past = int(pos[off])
                    self._finish(s, "length")
                    touched[s.req.rid] = s.req
                    gone = [s]
                drop = np.isin(own[off:], [owners.index(s) for s in gone if s in owners])
                if drop.any():
                    sel = np.r_[np.ones(off, bool), ~drop]
                    tok, pos, seq, out, own, prompt = tok[sel], pos[sel], seq[sel], out[sel], own[sel], prompt[sel]
                nb = n_full
                continue
            except UbatchError:
                self._unwind(owners, own[off:], pos[off:])
                raise
            self._sample_slice(owners, own[off:end], out[off:end], touched)
            off = end
            nb = n_full
        outs = [self._output(r) for r in touched.values()]
        for r in touched.values():
            if r.finished:
                self._reqs.pop(r.rid, None)
        self._last_step_s = time.perf_counter() - t_step
        st.wall_s = time.perf_counter() - self._t0
        if self._spec is not None:
            self._spec.observe(st.n_ubatches - mark[1], st.prompt_tokens + st.decode_tokens - mark[2],
                               st.decode_s + st.sample_s - mark[0])
        return outs

    def _unwind(self, owners: List[_Seq], own: np.ndarray, pos: np.ndarray) -> None:
        """After an unexpected decode error: the rows not decoded go back to their sequences."""
        for k in np.unique(own).tolist():
            s = owners[k]
            if s.spec is not None:
                s.spec.draft = None
            if s.seq_id >= 0:
                s.n_past = min(s.n_past, int(pos[own == k].min()))

    def _event(self, kind: str, message: str = "") -> None:
        self.statistics.events.append((self.statistics.n_ubatches, kind, message))

    def _decode(self, tok, pos, seq, out, prompt) -> None:
        st = self.statistics
        batch = Batch.from_arrays(tokens=tok, pos=pos, seq_ids=seq, output=out)
        st.decode_calls += 1
        t = time.perf_counter()
        try:
            self.ctx.decode(batch)
        except UbatchError:
            st.decode_s += time.perf_counter() - t
            st.failed_calls += 1
            raise
        now = time.perf_counter()
        st.decode_s += now - t
        st.prompt_tokens += int(prompt.sum())
        st.decode_tokens += int((~prompt).sum())
        ubs = self.ctx.last_ubatches
        st.count_ubatches(ubs)
        used = [self._kv.used(k) for k in range(self._kv.n_stream)]
        st.peak_kv_cells = [max(a, b) for a, b in zip(st.peak_kv_cells, used)]
        if not st.timeline:
            return
        rel = now - self._t0
        st.kv_used.append((rel, used))
        st.ubatches.extend(ubatch_records(ubs, seq, prompt, st.decode_calls - 1, rel))

    def _sample_slice(self, owners: List[_Seq], own: np.ndarray, out: np.ndarray, touched: Dict[str, _Req]) -> None:
        """Samples every output row of the decoded slice (forking prompts with n > 1 first); a drafted sequence's
        rows are sampled as plain decoding would sample them and verified (spec_engine.verify)."""
        rows = np.flatnonzero(out)
        if rows.size == 0:
            return
        logits = self.ctx.get_logits()
        sb = SampleBatch()
        seqs: List[_Seq] = []
        spec_at: Dict[int, int] = {}            # entry index of a drafted sequence's first row -> its row count
        owner_of = own[rows].tolist()
        j = 0
        while j < len(owner_of):
            s = owners[owner_of[j]]
            if s.state == GEN and s.spec is not None and s.spec.draft is not None:
                j = self._add_drafted(sb, seqs, spec_at, s, j)
                continue
            group = [s]
            if s.state == PROMPT:
                forks = [f for f in s.req.seqs if f.state == FORK and f.seq_id >= 0]
                for f in forks:               # the prompt is decoded once: its cells go to the other completions
                    self._kv.seq_cp(s.seq_id, f.seq_id)
                    f.n_past = s.n_past
                group += forks
            for g in group:
                g.state = GEN
                p = g.req.params
                sb.add(j, p, g.seed, len(g.generated), g.history(p.repeat_last_n) if p.penalised else None)
                seqs.append(g)
            j += 1
        n_lp = max((g.req.params.logprobs for g in seqs if g.req.params.logprobs is not None), default=-1)
        t = time.perf_counter()
        logits = self._constrain(logits, sb, seqs)
        toks, lp, top_id, top_lp = sample(logits, sb, n_logprobs=n_lp, n_threads=self.n_threads)
        self.statistics.sample_s += time.perf_counter() - t
        now = time.perf_counter()

        def info_of(i: int, g: _Seq, t_: int) -> Optional[dict]:
            if g.d_lp is None:
                return None
            k = g.req.params.logprobs
            return {"token_id": t_, "logprob": float(lp[i]),
                    "top_logprobs": list(zip(top_id[i, :k].tolist(), top_lp[i, :k].tolist()))}

        toks_l = toks.tolist()
        i = 0
        while i < len(seqs):
            g = seqs[i]
            nr = spec_at.get(i)
            if nr:
                self.statistics.generated_tokens += self._spec.verify(
                    g, toks[i:i + nr], lambda r, t_, i=i, g=g: info_of(i + r, g, t_))
                touched[g.req.rid] = g.req
                i += nr
                continue
            t_ = toks_l[i]
            if not g.req.times.first_token:
                g.req.times.first_token = now
                g.req.times.ub_first = self.statistics.n_ubatches
            self.statistics.generated_tokens += 1
            self._on_token(g, t_, info_of(i, g, t_))
            touched[g.req.rid] = g.req
            i += 1

    def _add_drafted(self, sb: SampleBatch, seqs: List[_Seq], spec_at: Dict[int, int], s: _Seq, j: int) -> int:
        """Sampling entries for the k + 1 rows (from output row j) of s's drafted decode: row r is sampled at
        counter len(generated) + r with the penalty window plain decoding would have after d1..dr."""
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

    @staticmethod
    def _constrain(logits: np.ndarray, sb: SampleBatch, seqs: List[_Seq]) -> np.ndarray:
        """Rows of grammar-constrained sequences: a copy of their logits row with the tokens their grammar
        state does not allow at -inf (one C call each), appended after the decoded rows; sb points at them."""
        gi = [i for i, g in enumerate(seqs) if g.gstate is not None]
        if not gi:
            return logits
        n = logits.shape[0]
        ext = np.empty((n + len(gi), logits.shape[1]), np.float32)
        ext[:n] = logits
        for k, i in enumerate(gi):
            ext[n + k] = logits[sb.row[i]]
            seqs[i].gstate.apply(ext[n + k])
            sb.row[i] = n + k
        return ext

    def _on_token(self, s: _Seq, token: int, info: Optional[dict]) -> None:
        p = s.req.params
        tok = self.tokenizer
        if tok is not None and not p.ignore_eos and tok.is_eog(token):
            self._finish(s, "stop")
            return
        if s.gstate is not None and not (tok is not None and tok.is_eog(token)):
            from ubatch.grammar import GrammarRejected
            try:
                s.gstate.accept(token)
            except GrammarRejected:              # llama.cpp would throw here: the completion ends
                self._finish(s, "stop")
                return
        s.generated.append(token)
        s.d_tok.append(token)
        if info is not None:
            s.d_lp.append(info)
        if tok is not None:
            s.d_text += s.text.add(tok.token_to_piece(token))
            if s.text.stopped:
                self._finish(s, "stop")
                return
        if p.max_tokens is not None and p.max_tokens > 0 and len(s.generated) >= p.max_tokens:
            self._finish(s, "length")
        elif s.n_past >= self.ctx.n_ctx_seq:      # the pending token has no cell left in its context
            self._finish(s, "length")

    def _finish(self, s: _Seq, reason: str) -> None:
        s.d_text += s.text.finish()
        s.finish_reason = reason
        if s.seq_id >= 0:
            self._release(s)
        s.state = DONE
        req = s.req
        if req.finished:
            req.times.finished = time.perf_counter()
            req.times.ub_finished = self.statistics.n_ubatches
            self.statistics.finished += 1

    def _output(self, req: _Req) -> RequestOutput:
        outs = []
        for s in req.seqs:
            outs.append(CompletionOutput(index=s.index, text=s.text.text[:s.text.emitted], token_ids=list(s.generated),
                                         text_delta=s.d_text, token_ids_delta=s.d_tok, finish_reason=s.finish_reason,
                                         logprobs_delta=s.d_lp))
            s.d_text, s.d_tok = "", []
            if s.d_lp is not None:
                s.d_lp = []
        return RequestOutput(request_id=req.rid, prompt_tokens=len(req.prompt), finished=req.finished, outputs=outs,
                             prompt_token_ids=req.prompt.tolist())

    # ------------------------------------------------------------------ embeddings
    def embed(self, inputs: Sequence[Union[str, Sequence[int]]], *, pooling: str = "mean", normalize: bool = True
              ) -> np.ndarray:
        """float32[len(inputs), n_embd]: pooled hidden states of whole sequences (mean / cls / last), many
        inputs per decode (at most n_seq_max sequences and n_batch tokens, every sequence whole in one ubatch),
        L2-normalised when normalize. Uses its own context (created on first use per pooling)."""
        if pooling not in ("mean", "cls", "last"):
            raise ValueError(f"pooling must be 'mean', 'cls' or 'last', got {pooling!r}")
        if isinstance(inputs, (str, bytes)):
            raise ValueError("embed takes a list of texts (or of token-id lists), got a single string")
        toks = [self._prompt_tokens(x) for x in inputs]
        n_embd = int(self.model.n_embd)
        res = np.zeros((len(toks), n_embd), np.float32)
        if not toks:
            return res
        longest = max(len(t) for t in toks)
        ctx = self._embed_ctx.get(pooling)
        if ctx is None or ctx.n_ubatch < longest:
            n_ctx = max(self.ctx.n_ctx_seq, longest)
            n_b = max(min(self.ctx.n_batch, n_ctx), longest)
            if longest > self.ctx.n_ctx_seq:
                raise PromptTooLongError(f"an input has {longest} tokens, more than the {self.ctx.n_ctx_seq} of "
                                         f"a sequence's context")
            ctx = Context(self.model, n_ctx=n_ctx, n_batch=n_b, n_ubatch=n_b, n_seq_max=self.ctx.n_seq_max,
                          kv_unified=True, embeddings=True, pooling=pooling, type_k=self.ctx.type_k,
                          type_v=self.ctx.type_v, n_threads=self.ctx.n_threads)
            self._embed_ctx[pooling] = ctx
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
        """Frees the contexts' C state now."""
        self.ctx.close()
        for c in self._embed_ctx.values():
            c.close()
        self._embed_ctx.clear()


__all__ = ["CompletionOutput", "LLMEngine", "PromptTooLongError", "RequestOutput", "SamplingParams"]
