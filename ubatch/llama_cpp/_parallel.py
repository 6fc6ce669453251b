"""Batched completions for `Llama` (beyond llama-cpp-python): a list of prompts, n > 1, and concurrent calls
from several threads on a `Llama(..., n_seq_max=N)` are decoded together by one worker thread that drives an
LLMEngine on the Llama's own context (continuous batching over its N sequences, unified KV cache, the engine's
prefix cache). Each prompt is one engine request whose completions are sampled and stopped by a driver
(ubatch.engine.sequence.Driver): each choice has its own llama.cpp sampler chain (Llama._init_sampler, seed =
the request's seed + choice index, the call's logits processors) and llama-cpp-python's stop rules (CompletionText),
so a request's tokens are those it gets alone: ubatch's logits do not depend on what else is in the batch.
n > 1 decodes the prompt once and forks it (seq_cp) into the other choices' sequences."""
from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from typing import Any, Dict, List, Optional

import numpy as np

from ubatch.engine.llm_engine import LLMEngine, SamplingParams
from ubatch.llama_cpp import llama_cpp as L
from ubatch.llama_cpp._completion import CompletionText, Prepared, final
from ubatch.llama_cpp._sampler_api import sample_row

_SAMPLING_KEYS = ("top_k", "top_p", "min_p", "typical_p", "temperature", "repeat_penalty", "frequency_penalty",
                  "presence_penalty", "tfs_z", "mirostat_mode", "mirostat_tau", "mirostat_eta")


class _Choice:
    def __init__(self, group: "_Group", k: int) -> None:
        self.group, self.k = group, k
        self.state = CompletionText(group.llm, group.prep, group.prep.max_tokens)
        s = group.sampling
        self.sampler = group.llm._init_sampler(
            top_k=s["top_k"], top_p=s["top_p"], min_p=s["min_p"], typical_p=s["typical_p"], temp=s["temperature"],
            repeat_penalty=s["repeat_penalty"], frequency_penalty=s["frequency_penalty"],
            presence_penalty=s["presence_penalty"], mirostat_mode=s["mirostat_mode"],
            mirostat_tau=s["mirostat_tau"], mirostat_eta=s["mirostat_eta"],
            seed=(group.prep.seed + k) & 0xFFFFFFFF, logits_processor=group.prep.logits_processor,
            input_ids=self.input_ids)
        self.tail: List[int] = []   # tokens decoded after the prompt (what its KV holds beyond it)
        self.done = False
        self.index = k           # its index among the call's choices
        self.rows: list = []     # logprobs: the logits row each completion token was sampled from
        self.returned = 0        # tokens already streamed

    def input_ids(self):
        """What the context holds for this choice: its prompt and the tokens decoded after it (intc)."""
        return np.asarray(list(self.group.prep.tokens) + self.tail, dtype=np.intc)


class _Group:
    """One prompt with its n choices: one engine request, whose Driver this is."""

    def __init__(self, llm, prep: Prepared, n: int, sampling: dict, echo: bool, stopping_criteria=None) -> None:
        self.llm, self.prep, self.sampling, self.echo = llm, prep, sampling, echo
        self.stopping_criteria = stopping_criteria
        self.stream = None
        self.choices = [_Choice(self, k) for k in range(n)]

    # ---------------------------------------------------------------- the engine's Driver
    def sample(self, index: int, logits: np.ndarray) -> int:
        return sample_row(self.choices[index].sampler.sampler, logits)

    def on_token(self, index: int, token: int, logits: np.ndarray) -> Optional[str]:
        c = self.choices[index]
        st = c.state
        crit = self.stopping_criteria
        if crit is not None and crit(c.input_ids(), np.array(logits, np.float32)):
            st.text = self.llm.detokenize(st.tokens, prev_tokens=self.prep.tokens)
            st.finish = "stop"          # the criterion's token is not part of the completion
            return "stop"
        if self.prep.logprobs is not None:
            c.rows.append(np.array(logits, np.float32))
        if st.feed(token):
            return st.finish
        c.tail.append(token)
        if self.stream is not None and st._multibyte == 0:
            _emit_ready(c)
        return None

    def on_finish(self, index: int, reason: str) -> None:
        c = self.choices[index]
        st = c.state
        if st.finish is None:           # ended by the engine (its context is full) or aborted
            st.text = self.llm.detokenize(st.tokens, prev_tokens=self.prep.tokens)
            st.finish = "length" if reason == "length" else reason
        c.done = True
        if self.stream is not None:
            _emit_rest(c)
        c.sampler.close()


class _Call:
    def __init__(self, groups: List[_Group]) -> None:
        self.groups = groups
        self.future: Future = Future()
        self.stream = None            # a queue of chunks when the caller streams
        self.rids: List[str] = []

    @property
    def done(self) -> bool:
        return all(c.done for g in self.groups for c in g.choices)


class EngineThread:
    """The worker thread of one Llama's batched paths and the LLMEngine it drives on the Llama's context."""

    def __init__(self, llm) -> None:
        from ubatch.llama_cpp._handles import REGISTRY
        self.llm = llm
        self.n_seq = int(llm.n_seq_max)
        self.cctx = REGISTRY.get(llm._ctx.ctx, "context")
        self.queue: "queue.Queue[Optional[_Call]]" = queue.Queue()
        self.calls: List[_Call] = []
        self.closed = False
        self.engine = self._engine()
        self.thread = threading.Thread(target=self._loop, name="ubatch-llama-parallel", daemon=True)
        self.thread.start()

    def _engine(self) -> LLMEngine:
        kv = self.cctx.kv
        return LLMEngine.on_context(self.cctx.ctx, decode=self._decode, n_threads=self.cctx.n_threads,
                                    enable_prefix_caching=bool(getattr(self.llm, "prefix_cache", False))
                                    and kv.n_stream == 1)

    @property
    def prefix(self):
        """The engine's prefix cache (None when Llama(prefix_cache=False))."""
        return self.engine.prefix_cache

    def _decode(self, batch) -> None:
        """llama_decode's bookkeeping around the engine's decode: the abort callback, the outputs the low-level
        getters hand out, the perf counters."""
        c = self.cctx
        if c.abort_cb is not None and c.abort_cb[0](c.abort_cb[1]):
            raise RuntimeError("llama_decode returned 2 (aborted by the abort callback) in the batched completion "
                               "path")
        t0 = time.perf_counter()
        c.ctx.decode(batch)
        c.outputs_changed()
        c.count(batch.n_tokens, time.perf_counter() - t0)

    def submit(self, call: _Call) -> Dict[str, Any]:
        self.queue.put(call)
        return call.future.result()

    def close(self) -> None:
        self.closed = True
        self.queue.put(None)
        self.thread.join(timeout=5)
        self.engine.close()

    # ------------------------------------------------------------------ worker
    def _loop(self) -> None:
        while not self.closed:
            items = []
            if not self.calls:
                items.append(self.queue.get())
            while True:
                try:
                    items.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            if None in items:
                return
            try:
                with self.llm._lock:
                    for call in items:
                        self._add(call)
                    if self.llm.n_tokens:        # the single-sequence path's cached prompt lives in seq 0
                        self.llm.reset()
                        L.llama_memory_seq_rm(L.llama_get_memory(self.llm.ctx), 0, -1, -1)
                    if self.engine.has_unfinished_requests():
                        self.engine.step()
                self._retire()
            except BaseException as e:       # fail every call in flight, keep the worker alive
                for c in self.calls:
                    if not c.future.done():
                        c.future.set_exception(e)
                    if c.stream is not None:
                        c.stream.put(None)
                self._clear_all()

    def _add(self, call: _Call) -> None:
        """Every prompt of the call becomes an engine request (in order: admission is first come first served)."""
        try:
            for g in call.groups:
                params = SamplingParams(n=len(g.choices), max_tokens=None, ignore_eos=True, seed=0)
                call.rids.append(self.engine.add_request(g.prep.tokens, params, driver=g))
        except Exception as e:
            for rid in call.rids:
                self.engine.abort_request(rid)
            call.future.set_exception(e)
            if call.stream is not None:
                call.stream.put(None)
            return
        self.calls.append(call)

    def _clear_all(self) -> None:
        L.llama_memory_clear(L.llama_get_memory(self.llm.ctx), True)
        self.engine.close()
        self.engine = self._engine()
        self.calls = []

    def _retire(self) -> None:
        for call in [c for c in self.calls if c.done]:
            self.calls.remove(call)
            call.future.set_result(_response(call))
            if call.stream is not None:
                call.stream.put(None)


class _View:
    """What CompletionRun's stream helpers read (llm, prep) for one choice."""

    def __init__(self, c: _Choice) -> None:
        self.llm, self.prep = c.group.llm, c.group.prep


def _chunk(c: _Choice, text: str, finish) -> Dict[str, Any]:
    from ubatch.llama_cpp._completion import chunk
    return chunk(c.group.prep, text, finish, None, c.index)


def _emit_ready(c: _Choice) -> None:
    """Streams the text of c that can go out now (whole characters, no possible start of a stop string): the
    single path's rule (CompletionRun._stream_ready)."""
    from ubatch.llama_cpp._completion import CompletionRun
    out, c.returned = CompletionRun._stream_ready(_View(c), c.state, c.returned)
    for ch in out:
        ch["choices"][0]["index"] = c.index
        c.group.stream.put(ch)


def _emit_rest(c: _Choice) -> None:
    llm, prep, st = c.group.llm, c.group.prep, c.state
    rest = st.text[len(llm.detokenize(st.tokens[:c.returned], prev_tokens=prep.tokens)):] if c.returned else st.text
    if rest:
        c.group.stream.put(_chunk(c, rest.decode("utf-8", errors="ignore"), None))
    c.group.stream.put(_chunk(c, "", st.finish))


def _response(call: _Call) -> Dict[str, Any]:
    choices = []
    n_completion = 0
    n_prompt = 0
    for gi, g in enumerate(call.groups):
        n_prompt += len(g.prep.tokens)
        for c in g.choices:
            text = c.state.text.decode("utf-8", errors="ignore")
            if g.echo:
                p = g.prep.prompt
                text = (p if isinstance(p, str) else g.llm.detokenize(list(p)).decode("utf-8", "ignore")) + text
            lp = None
            if g.prep.logprobs is not None:
                from ubatch.llama_cpp._completion import logprobs_block
                rows = np.stack(c.rows) if c.rows else np.zeros((0, g.llm._n_vocab), np.float32)
                lp = logprobs_block(g.llm, g.prep, c.state, False, None, rows=rows)
            choices.append({"text": text, "index": len(choices), "logprobs": lp,
                            "finish_reason": c.state.finish})
            n_completion += len(c.state.tokens)
    out = final(call.groups[0].prep, choices, n_completion)
    out["usage"] = {"prompt_tokens": n_prompt, "completion_tokens": n_completion,
                    "total_tokens": n_prompt + n_completion}
    return out


def parallel_completion(llm, prompts: list, n: int, args: Dict[str, Any], stream: bool = False):
    if args.get("logprobs") is not None and (stream or args.get("echo")):
        raise NotImplementedError("create_completion(logprobs=...) with stream=True or echo=True in the batched path "
                                  "(several prompts, n > 1 or n_seq_max > 1)")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    sampling = {k: args[k] for k in _SAMPLING_KEYS}
    prep_args = {k: args.get(k) for k in ("suffix", "max_tokens", "stop", "seed", "model", "logit_bias",
                                          "logits_processor", "logprobs")}
    preps = []
    for p in prompts:
        preps.append(Prepared(llm, p, **prep_args))
        llm.set_seed(preps[-1].seed)     # the seed chain advances as for sequential calls
    if n > int(llm.n_seq_max):
        raise ValueError(f"n = {n} choices need {n} sequences; this Llama has n_seq_max = {int(llm.n_seq_max)}")
    groups = [_Group(llm, prep, n, sampling, bool(args.get("echo")), args.get("stopping_criteria")) for prep in preps]
    with llm._lock:
        if llm._parallel is None:
            llm._parallel = EngineThread(llm)
        runner = llm._parallel
    index = 0
    for g in groups:
        for c in g.choices:
            c.index, index = index, index + 1
    call = _Call(groups)
    if stream:
        return _stream_call(runner, call)
    return runner.submit(call)


def _stream_call(runner: "EngineThread", call: _Call):
    """The chunks of every choice as the worker produces them (llama-cpp-python's stream chunks, each with its
    choice's index); ends after the last choice's finish chunk."""
    call.stream = queue.Queue()
    first = call.groups[0].prep
    for g in call.groups:
        g.stream = call.stream
        g.prep.id, g.prep.created = first.id, first.created      # one completion id for the call's chunks
    runner.queue.put(call)
    while True:
        item = call.stream.get()
        if item is None:
            break
        yield item
    call.future.result()              # re-raises what failed the call in the worker
