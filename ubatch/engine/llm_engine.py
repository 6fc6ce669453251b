"""LLMEngine: text generation with continuous batching on one Context (docs/engine.md).

Each `step()` is one round of llama.cpp's server loop:
1. admission and the step's rows (scheduler.py): waiting requests take free sequence ids; the batch holds the
   pending sampled token of every generating sequence, then chunks of the admitted prompts up to n_batch tokens;
2. decode it in slices of n_batch; on KVCacheFullError the slice is halved and retried (the server's retry); a
   single token that still does not fit preempts the most recently admitted sequence (Scheduler.preempt): it
   recomputes its cells later, bitwise identical thanks to batch invariance, so nothing is lost or duplicated;
3. sampling of every output row in one C call (sampling.py), each sequence with its own seeded stream; when the
   last chunk of a prompt with n > 1 completions is decoded, its sequence is forked (seq_cp) into the other
   n - 1 sequences and all n sample from the same logits row: the prompt is decoded once;
4. a sequence ends on an end-of-generation token, a stop string (matched on the text, see detok.py), max_tokens,
   or when its next token would not fit in its context (n_ctx_seq cells): "stop" or "length". Its cells are
   freed (seq_rm) and its sequence id goes to the next admissions.
5. prefix caching (prefix_cache.py, on unless enable_prefix_caching=False): a finished sequence's cells stay as a
   cached entry instead of being freed; an admitted prompt takes the longest prefix some sequence holds (seq_cp) or
   waits for the running one computing it, and only the rest is decoded; cached cells are evicted before a full
   cache makes the engine retry or preempt.
Embeddings (embed) run on contexts of their own (embeddings.py).
"""
from __future__ import annotations

import itertools
import os
import random
import time
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ubatch.batch.container import Batch
from ubatch.common.errors import KVCacheFullError, UbatchError
from ubatch.engine.context import Context
from ubatch.engine.embeddings import Embedder
from ubatch.engine.engine_stats import EngineStats, RequestTimes, ubatch_records
from ubatch.engine.inputs import PromptTooLongError, grammar_of, prompt_tokens, resolve_tokenizer, start_grammar
from ubatch.engine.prefix_cache import PrefixCache
from ubatch.engine.sampling import SampleBatch, SamplingParams, sample
from ubatch.engine.scheduler import Scheduler
from ubatch.engine.sequence import DONE, FORK, GEN, PROMPT, CompletionOutput, Driver, Request, RequestOutput, Seq


class LLMEngine:
    """Continuous-batching generation on one Context (see the module docstring). Not thread-safe: one thread
    owns it and calls add_request / abort_request / step."""

    def __init__(self, model, *, n_ctx: int = 4096, n_batch: int = 512, n_ubatch: int = 512, n_seq_max: int = 8,
                 kv_unified: bool = False, type_k: str = "f16", type_v: str = "f16", n_threads: Optional[int] = None,
                 tokenizer=None, timeline: bool = False, enable_prefix_caching: bool = True,
                 prefix_cache_max_cells: Optional[int] = None, draft=None, draft_max: int = 16) -> None:
        if model is None:
            raise ValueError("LLMEngine needs a model (ubatch.models.load(name) or a ubatch.Model)")
        ctx = Context(model, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_ubatch, n_seq_max=n_seq_max,
                      kv_unified=kv_unified, type_k=type_k, type_v=type_v, n_threads=n_threads)
        self._setup(ctx, True, None, tokenizer=tokenizer, timeline=timeline, n_threads=n_threads,
                    enable_prefix_caching=enable_prefix_caching, prefix_cache_max_cells=prefix_cache_max_cells,
                    draft=draft, draft_max=draft_max)

    @classmethod
    def on_context(cls, ctx: Context, *, decode=None, tokenizer=None, timeline: bool = False,
                   enable_prefix_caching: bool = True, prefix_cache_max_cells: Optional[int] = None,
                   n_threads: Optional[int] = None) -> "LLMEngine":
        """An engine on an existing generation Context (not closed by close()): its sizes, KV layout and
        sequence ids are the context's. decode(batch): the call that decodes on it (default ctx.decode; a
        caller that keeps state of its own about the context, as ubatch.llama_cpp does, wraps it)."""
        if ctx.model is None or ctx.embeddings:
            raise ValueError("LLMEngine.on_context needs a Context with a model and embeddings=False")
        eng = cls.__new__(cls)
        eng._setup(ctx, False, decode, tokenizer=tokenizer, timeline=timeline, n_threads=n_threads,
                   enable_prefix_caching=enable_prefix_caching, prefix_cache_max_cells=prefix_cache_max_cells)
        return eng

    def _setup(self, ctx: Context, owned: bool, decode, *, tokenizer, timeline: bool, n_threads: Optional[int],
               enable_prefix_caching: bool, prefix_cache_max_cells: Optional[int], draft=None,
               draft_max: int = 16) -> None:
        model = ctx.model
        self.model = model
        self.ctx = ctx
        self._owns_ctx = owned
        self._decode_batch = decode
        self._tokenizer_arg = tokenizer
        self._tokenizer_set = False
        self.n_vocab = int(model.n_vocab)
        self.n_threads = n_threads or os.cpu_count() or 1
        self._kv = self.ctx.memory
        self._reqs: Dict[str, Request] = {}
        self._ids = itertools.count()
        self._last_step_s = 0.0
        self._grammars: Dict[tuple, object] = {}          # compiled grammars by text (inputs.grammar_of)
        self._embedder = Embedder(model, self.ctx, self._prompt_tokens)
        self._t0 = time.perf_counter()
        self.statistics = EngineStats(n_ubatch=self.ctx.n_ubatch, n_stream=self._kv.n_stream, kv_size=self._kv.size,
                                      peak_kv_cells=[0] * self._kv.n_stream, timeline=bool(timeline))
        self.scheduler = Scheduler(self._kv, self.ctx.n_seq_max, self.ctx.n_batch, self.statistics)
        self._seed_rng = random.SystemRandom()
        # automatic prefix caching (prefix_cache.py); None when turned off
        self._prefix: Optional[PrefixCache] = (PrefixCache(self, max_cells=prefix_cache_max_cells)
                                               if enable_prefix_caching else None)
        self._spec = None                 # speculative decoding (spec_engine.py): draft = prompt lookup / model / callable
        if draft is not None:
            from ubatch.engine.spec_engine import EngineSpeculator
            self._spec = EngineSpeculator(self, draft, draft_max)
        self.scheduler.prefix, self.scheduler.spec = self._prefix, self._spec

    @property
    def tokenizer(self):
        """The tokenizer (the one given, else the model's, resolved on first use; None: token ids only)."""
        if not self._tokenizer_set:
            self._tokenizer = resolve_tokenizer(self.model, self._tokenizer_arg)
            self._tokenizer_set = True
        return self._tokenizer

    @tokenizer.setter
    def tokenizer(self, tok) -> None:
        self._tokenizer, self._tokenizer_set = tok, True

    # ------------------------------------------------------------------ requests
    def _prompt_tokens(self, prompt) -> np.ndarray:
        return prompt_tokens(prompt, self.tokenizer, self.n_vocab)

    def add_request(self, prompt: Union[str, Sequence[int]], params: Optional[SamplingParams] = None,
                    request_id: Optional[str] = None, *, driver: Optional[Driver] = None) -> str:
        """Queues a request; validates it now (ValueError naming the field; PromptTooLongError for a prompt
        longer than a sequence's context); nothing is decoded until step(). driver (sequence.Driver): samples
        and stops the request's completions instead of the engine (params then gives only n and the seed)."""
        params = (params or SamplingParams()).validated(self.n_vocab)
        if driver is not None:
            if params.grammar is not None or params.json_schema is not None:
                raise ValueError("a request with a driver is sampled by it: grammar / json_schema are the driver's")
            params.speculative = False
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
        grammar = grammar_of(params, self.tokenizer, self._grammars)
        if grammar is not None:
            grammar = start_grammar(params, grammar)
        times = RequestTimes(added=time.perf_counter())
        req = Request(rid, toks, params, times, grammar, driver)
        base = params.seed if params.seed is not None else self._seed_rng.getrandbits(64)
        req.seqs = [Seq(req, j, (base + j) % 2**64) for j in range(params.n)]
        self._reqs[rid] = req
        self.scheduler.add(req)
        self.statistics.requests += 1
        self.statistics.times.append(times)
        return rid

    def abort_request(self, request_id: str) -> None:
        """Drops a request: its running sequences leave the KV cache (seq_rm) now."""
        req = self._reqs.pop(str(request_id), None)
        if req is None:
            return
        req.aborted = True
        self.scheduler.drop(req)
        for s in req.seqs:
            if req.driver is not None and s.state != DONE:
                req.driver.on_finish(s.index, "abort")
            s.state = DONE
            s.finish_reason = s.finish_reason or "abort"

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished()

    def waiting_request_ids(self) -> set:
        """The request ids still queued for admission (no sequence of theirs is in any decode yet)."""
        return self.scheduler.waiting_ids()

    def stats(self) -> dict:
        st = self.statistics
        return {"waiting": self.scheduler.n_waiting(), "running": len(self.scheduler.active),
                "kv_cells_used": sum(self._kv.used(k) for k in range(self._kv.n_stream)), "steps": st.steps,
                "ubatches": st.n_ubatches, "last_step_s": self._last_step_s,
                "tokens": st.prompt_tokens + st.decode_tokens, "prompt_tokens": st.prompt_tokens,
                "generated_tokens": st.generated_tokens, "decode_calls": st.decode_calls, "retries": st.retries,
                "preemptions": st.preemptions, **self.prefix_stats(),
                **(self._spec.stats() if self._spec is not None else {})}

    @property
    def prefix_cache(self) -> Optional[PrefixCache]:
        """The automatic prefix cache (None when enable_prefix_caching=False)."""
        return self._prefix

    def prefix_stats(self) -> dict:
        """The prefix cache's counters (prefix_cache_*: queries, hits, tokens queried / saved, hit rate = saved /
        queried, cached cells and entries, evictions); {"prefix_cache": False} when it is off."""
        return self._prefix.stats() if self._prefix is not None else {"prefix_cache": False}

    # ------------------------------------------------------------------ one step
    def step(self) -> List[RequestOutput]:
        """One decode step (see the module docstring); returns the outputs of the requests that progressed."""
        t_step = time.perf_counter()
        st = self.statistics
        mark = (st.decode_s + st.sample_s, st.n_ubatches, st.prompt_tokens + st.decode_tokens)
        self.scheduler.admit()
        if self._prefix is not None:
            self._prefix.resolve()
        tok, pos, seq, out, owners, own, prompt = self.scheduler.build()
        st.steps += 1
        touched: Dict[str, Request] = {}
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
                    st.event("retry")
                    continue
                gone = self.scheduler.preempt()
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
        outs = [r.output() for r in touched.values()]
        for r in touched.values():
            if r.finished:
                self._reqs.pop(r.rid, None)
        self._last_step_s = time.perf_counter() - t_step
        st.wall_s = time.perf_counter() - self._t0
        if self._spec is not None:
            self._spec.observe(st.n_ubatches - mark[1], st.prompt_tokens + st.decode_tokens - mark[2],
                               st.decode_s + st.sample_s - mark[0])
        return outs

    def _unwind(self, owners: List[Seq], own: np.ndarray, pos: np.ndarray) -> None:
        """After an unexpected decode error: the rows not decoded go back to their sequences."""
        for k in np.unique(own).tolist():
            s = owners[k]
            if s.spec is not None:
                s.spec.draft = None
            if s.seq_id >= 0:
                s.n_past = min(s.n_past, int(pos[own == k].min()))

    def _decode(self, tok, pos, seq, out, prompt) -> None:
        st = self.statistics
        batch = Batch.from_arrays(tokens=tok, pos=pos, seq_ids=seq, output=out)
        st.decode_calls += 1
        t = time.perf_counter()
        try:
            if self._decode_batch is None:
                self.ctx.decode(batch)
            else:
                self._decode_batch(batch)
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

    def _sample_slice(self, owners: List[Seq], own: np.ndarray, out: np.ndarray, touched: Dict[str, Request]) -> None:
        """Samples every output row of the decoded slice (forking prompts with n > 1 first); a drafted sequence's
        rows are sampled as plain decoding would sample them and verified (spec_engine.verify)."""
        rows = np.flatnonzero(out)
        if rows.size == 0:
            return
        logits = self.ctx.get_logits()
        sb = SampleBatch()
        seqs: List[Seq] = []
        spec_at: Dict[int, int] = {}            # entry index of a drafted sequence's first row -> its row count
        custom: List[Tuple[Seq, int]] = []       # (sequence, output row) of requests with a driver
        owner_of = own[rows].tolist()
        j = 0
        while j < len(owner_of):
            s = owners[owner_of[j]]
            if s.state == GEN and s.spec is not None and s.spec.draft is not None:
                j = self._spec.add_rows(sb, seqs, spec_at, s, j)
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
                if g.req.driver is not None:      # sampled by its driver (below), not by the C sampler
                    custom.append((g, j))
                    continue
                p = g.req.params
                sb.add(j, p, g.seed, len(g.generated), g.history(p.repeat_last_n) if p.penalised else None)
                seqs.append(g)
            j += 1
        if custom:
            self._drive(custom, logits, touched)
        if not seqs:
            return
        n_lp = max((g.req.params.logprobs for g in seqs if g.req.params.logprobs is not None), default=-1)
        t = time.perf_counter()
        logits = self._constrain(logits, sb, seqs)
        toks, lp, top_id, top_lp = sample(logits, sb, n_logprobs=n_lp, n_threads=self.n_threads)
        self.statistics.sample_s += time.perf_counter() - t
        now = time.perf_counter()

        def info_of(i: int, g: Seq, t_: int) -> Optional[dict]:
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

    def _drive(self, custom: List[Tuple[Seq, int]], logits: np.ndarray, touched: Dict[str, Request]) -> None:
        """The rows of requests with a driver: each completion's token from driver.sample, then on_token."""
        for g, j in custom:
            t = time.perf_counter()
            row = logits[j]
            token = int(g.req.driver.sample(g.index, row))
            now = time.perf_counter()
            self.statistics.sample_s += now - t
            if not g.req.times.first_token:
                g.req.times.first_token = now
                g.req.times.ub_first = self.statistics.n_ubatches
            self.statistics.generated_tokens += 1
            self._on_token(g, token, None, row)
            touched[g.req.rid] = g.req

    @staticmethod
    def _constrain(logits: np.ndarray, sb: SampleBatch, seqs: List[Seq]) -> np.ndarray:
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

    def _on_token(self, s: Seq, token: int, info: Optional[dict], row: Optional[np.ndarray] = None) -> None:
        p = s.req.params
        if s.req.driver is not None:             # the driver owns the text and the stop rules
            reason = s.req.driver.on_token(s.index, token, row)
            if reason is not None:
                self._finish(s, str(reason))
                return
            s.generated.append(token)
            s.d_tok.append(token)
            if s.n_past >= self.ctx.n_ctx_seq:
                self._finish(s, "length")
            return
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

    def _finish(self, s: Seq, reason: str) -> None:
        s.d_text += s.text.finish()
        s.finish_reason = reason
        if s.req.driver is not None:
            s.req.driver.on_finish(s.index, reason)
        if s.seq_id >= 0:
            self.scheduler.release(s)
        s.state = DONE
        req = s.req
        if req.finished:
            req.times.finished = time.perf_counter()
            req.times.ub_finished = self.statistics.n_ubatches
            self.statistics.finished += 1

    # ------------------------------------------------------------------ embeddings
    def embed(self, inputs: Sequence[Union[str, Sequence[int]]], *, pooling: str = "mean", normalize: bool = True
              ) -> np.ndarray:
        """float32[len(inputs), n_embd]: pooled hidden states of whole sequences (mean / cls / last), many
        inputs per decode (at most n_seq_max sequences and n_batch tokens, every sequence whole in one ubatch),
        L2-normalised when normalize. Uses its own context (created on first use per pooling)."""
        return self._embedder.embed(inputs, pooling=pooling, normalize=normalize)

    def close(self) -> None:
        """Frees the contexts' C state now (a context given to on_context stays open)."""
        if self._owns_ctx:
            self.ctx.close()
        self._embedder.close()


__all__ = ["CompletionOutput", "LLMEngine", "PromptTooLongError", "RequestOutput", "SamplingParams"]
