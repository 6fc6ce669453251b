"""Batched completions for `Llama` (beyond llama-cpp-python): a list of prompts, n > 1, and concurrent calls
from several threads on a `Llama(..., n_seq_max=N)` are decoded together by one worker thread with continuous
batching over the context's N sequences (unified KV cache). Each choice has its own llama.cpp sampler chain
(Llama._init_sampler, seed = the request's seed + choice index) and llama-cpp-python's stop rules (CompletionText),
so a request's tokens are those it gets alone: ubatch's logits do not depend on what else is in the batch.
n > 1 decodes the prompt once and forks it (llama_memory_seq_cp) into the other choices' sequences."""
from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Any, Dict, List

from ubatch.llama_cpp import llama_cpp as L
from ubatch.llama_cpp._completion import CompletionText, Prepared, final

_SAMPLING_KEYS = ("top_k", "top_p", "min_p", "typical_p", "temperature", "repeat_penalty", "frequency_penalty",
                  "presence_penalty", "tfs_z", "mirostat_mode", "mirostat_tau", "mirostat_eta")


class _Choice:
    def __init__(self, group: "_Group", k: int) -> None:
        self.group, self.k = group, k
        self.seq = -1
        self.state = CompletionText(group.llm, group.prep, group.prep.max_tokens)
        s = group.sampling
        self.sampler = group.llm._init_sampler(
            top_k=s["top_k"], top_p=s["top_p"], min_p=s["min_p"], typical_p=s["typical_p"], temp=s["temperature"],
            repeat_penalty=s["repeat_penalty"], frequency_penalty=s["frequency_penalty"],
            presence_penalty=s["presence_penalty"], mirostat_mode=s["mirostat_mode"],
            mirostat_tau=s["mirostat_tau"], mirostat_eta=s["mirostat_eta"],
            seed=(group.prep.seed + k) & 0xFFFFFFFF, logits_processor=group.prep.logits_processor,
            input_ids=self.input_ids)
        self.n_past = 0
        self.tail: List[int] = []   # tokens decoded after the prompt (what its KV holds beyond it)
        self.row = -1            # batch row of this choice's last token in the next decode (-1: none)
        self.done = False
        self.index = k           # its index among the call's choices
        self.rows: list = []     # logprobs: the logits row each completion token was sampled from
        self.returned = 0        # tokens already streamed

    def input_ids(self):
        """What the context holds for this choice: its prompt and the tokens decoded after it (intc)."""
        import numpy as np
        return np.asarray(list(self.group.prep.tokens) + self.tail, dtype=np.intc)


def _logits_row(llm, row: int):
    """The logits (float32[n_vocab], a copy) the choice's token was sampled from. 0.3.36's single path hands its
    stopping criteria an unrelated row (scores[0]); the batched path gives the row that was sampled."""
    import numpy as np
    return np.ctypeslib.as_array(L.llama_get_logits_ith(llm.ctx, row), shape=(llm._n_vocab,)).copy()


class _Group:
    """One prompt with its n choices."""

    def __init__(self, llm, prep: Prepared, n: int, sampling: dict, echo: bool, stopping_criteria=None) -> None:
        self.llm, self.prep, self.sampling, self.echo = llm, prep, sampling, echo
        self.stopping_criteria = stopping_criteria
        self.stream = None
        self.choices = [_Choice(self, k) for k in range(n)]
        self.fed = 0                       # prompt tokens decoded so far (into choices[0].seq)
        self.forked = False


class _Call:
    def __init__(self, groups: List[_Group]) -> None:
        self.groups = groups
        self.future: Future = Future()
        self.stream = None            # a queue of chunks when the caller streams


class ParallelRunner:
    def __init__(self, llm) -> None:
        self.llm = llm
        self.n_seq = int(llm.n_seq_max)
        self.free = list(range(self.n_seq))
        self.queue: "queue.Queue[_Call]" = queue.Queue()
        self.waiting: List[_Call] = []
        self.active: List[_Group] = []
        self.calls: List[_Call] = []
        self.closed = False
        self.batch = L.llama_batch_init(max(llm.n_batch, self.n_seq), 0, 1)
        self.prefix = _prefix_for(llm, self.n_seq)
        self.thread = threading.Thread(target=self._loop, name="ubatch-llama-parallel", daemon=True)
        self.thread.start()

    def submit(self, call: _Call) -> Dict[str, Any]:
        self.queue.put(call)
        return call.future.result()

    def close(self) -> None:
        self.closed = True
        self.queue.put(None)
        self.thread.join(timeout=5)

    # ------------------------------------------------------------------ worker
    def _loop(self) -> None:
        while not self.closed:
            if not self.active and not self.waiting:
                call = self.queue.get()
                if call is None:
                    return
                self.waiting.append(call)
            while True:
                try:
                    call = self.queue.get_nowait()
                except queue.Empty:
                    break
                if call is None:
                    return
                self.waiting.append(call)
            try:
                with self.llm._lock:
                    self._admit()
                    self._step()
            except BaseException as e:       # fail every call in flight, keep the worker alive
                for c in self.calls + self.waiting:
                    if not c.future.done():
                        c.future.set_exception(e)
                    if c.stream is not None:
                        c.stream.put(None)
                self._clear_all()

    def _clear_all(self) -> None:
        mem = L.llama_get_memory(self.llm.ctx)
        L.llama_memory_clear(mem, True)
        if self.prefix is not None:
            self.prefix = _prefix_for(self.llm, self.n_seq)
        self.free = list(range(self.n_seq))
        self.active, self.calls, self.waiting = [], [], []

    def _admit(self) -> None:
        if self.llm.n_tokens:                     # the single-sequence path's cached prompt lives in seq 0
            self.llm.reset()
            L.llama_memory_seq_rm(L.llama_get_memory(self.llm.ctx), 0, -1, -1)
        while self.waiting:
            call = self.waiting[0]
            need = [len(g.choices) for g in call.groups]
            if max(need) > self.n_seq:
                call.future.set_exception(ValueError(f"n = {max(need)} choices need {max(need)} sequences; this "
                                                     f"Llama has n_seq_max = {self.n_seq}"))
                self.waiting.pop(0)
                continue
            pending = [g for g in call.groups if g not in self.active and g.choices[0].seq < 0]
            admitted = False
            for g in pending:
                if len(self.free) < len(g.choices):
                    break
                for c in g.choices:
                    c.seq = self.free.pop(0)
                if self.prefix is not None:       # the longest cached prefix, shared (seq_cp), is not decoded
                    g.fed = self.prefix.lookup(g.prep.tokens, g.choices[0].seq)
                self.active.append(g)
                admitted = True
            if call not in self.calls:
                self.calls.append(call)
            if all(g.choices[0].seq >= 0 for g in call.groups):
                self.waiting.pop(0)
            elif not admitted:
                break

    def _step(self) -> None:
        llm, b = self.llm, self.batch
        cap = max(llm.n_batch, 1)
        n = 0
        rows: List[tuple] = []           # (choice, row) that get logits this step
        mem = L.llama_get_memory(llm.ctx)
        for g in self.active:            # generating choices: one token each
            for c in g.choices:
                if c.done or c.row != -2 or n >= cap:
                    continue
                tok = c.state.tokens[-1]
                b.token[n], b.pos[n], b.n_seq_id[n], b.seq_id[n][0], b.logits[n] = tok, c.n_past, 1, c.seq, 1
                c.tail.append(tok)
                rows.append((c, n))
                c.n_past += 1
                n += 1
        for g in self.active:            # prompts: chunks of what is left of the batch
            c0 = g.choices[0]
            if g.forked or n >= cap:
                continue
            take = min(len(g.prep.tokens) - g.fed, cap - n)
            for j in range(take):
                p = g.fed + j
                b.token[n], b.pos[n], b.n_seq_id[n], b.seq_id[n][0] = g.prep.tokens[p], p, 1, c0.seq
                b.logits[n] = p == len(g.prep.tokens) - 1
                if p == len(g.prep.tokens) - 1:
                    rows.append((c0, n))
                n += 1
            g.fed += take
        if n == 0:
            return
        b.n_tokens = n
        rc = L.llama_decode(llm.ctx, b)
        while rc == 1 and self.prefix is not None and self.prefix.evict_for(n):
            rc = L.llama_decode(llm.ctx, b)     # cached cells went first: the decode fails only as without them
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc} in the batched completion path")
        for c, row in rows:
            g = c.group
            if c.row == -1:              # prompt finished: fork into the other choices
                for s in g.choices:
                    s.n_past = len(g.prep.tokens)
                for other in g.choices[1:]:
                    L.llama_memory_seq_cp(mem, c.seq, other.seq, -1, -1)
                g.forked = True
                targets = g.choices
            else:
                targets = [c]
            for t in targets:
                tok = L.llama_sampler_sample(t.sampler.sampler, llm.ctx, row)
                t.row = -2
                crit = g.stopping_criteria
                if crit is not None and crit(t.input_ids(), _logits_row(llm, row)):
                    t.state.text = llm.detokenize(t.state.tokens, prev_tokens=g.prep.tokens)
                    t.state.finish = "stop"          # the criterion's token is not part of the completion
                    self._finish(t)
                else:
                    if g.prep.logprobs is not None:
                        t.rows.append(_logits_row(llm, row))
                    if t.state.feed(tok):
                        self._finish(t)
                        continue
                    if g.stream is not None and t.state._multibyte == 0:
                        _emit_ready(t)
                    continue

        self._retire()

    def _finish(self, c: _Choice) -> None:
        c.done = True
        if c.group.stream is not None:
            _emit_rest(c)
        if self.prefix is not None and c.n_past > 0:
            toks = (list(c.group.prep.tokens) + c.tail)[:c.n_past]
            self.prefix.store(c.seq, toks)       # its cells stay as a cached prefix (or are freed)
        else:
            L.llama_memory_seq_rm(L.llama_get_memory(self.llm.ctx), c.seq, -1, -1)
        self.free.append(c.seq)
        self.free.sort()
        c.sampler.close()

    def _retire(self) -> None:
        self.active = [g for g in self.active if not all(c.done for c in g.choices)]
        for call in list(self.calls):
            if all(c.done for g in call.groups for c in g.choices):
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


def _prefix_for(llm, n_seq: int):
    """The prefix reuse of this Llama's batched paths (None when Llama(prefix_cache=False) or the KV cache has
    one stream per sequence)."""
    if not getattr(llm, "prefix_cache", False):
        return None
    from ubatch.llama_cpp._handles import REGISTRY
    from ubatch.llama_cpp._prefix import DropInPrefix
    kv = REGISTRY.get(llm._ctx.ctx, "context").kv
    if kv.n_stream != 1:
        return None
    return DropInPrefix(kv, n_seq)


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
                import numpy as np
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
    groups = []
    for p in prompts:
        prep = Prepared(llm, p, **prep_args)
        llm.set_seed(prep.seed)          # the seed chain advances as for sequential calls
        groups.append(_Group(llm, prep, n, sampling, bool(args.get("echo")), args.get("stopping_criteria")))
    with llm._lock:
        if llm._parallel is None:
            llm._parallel = ParallelRunner(llm)
        runner = llm._parallel
    index = 0
    for g in groups:
        for c in g.choices:
            c.row = -1
            c.index, index = index, index + 1
    call = _Call(groups)
    if stream:
        return _stream_call(runner, call)
    return runner.submit(call)


def _stream_call(runner: "ParallelRunner", call: _Call):
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
