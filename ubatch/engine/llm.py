"""ubatch.LLM (docs/api.md): many prompts in, completions out, through LLMEngine's continuous batching."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence, Union

import numpy as np

from ubatch.engine.llm_engine import LLMEngine, RequestOutput
from ubatch.engine.sampling import SamplingParams

Prompt = Union[str, Sequence[int]]


@dataclass
class Completion:
    """One completion: text (no stop string), tokens (no end-of-generation token), finish_reason "stop" (EOG or
    a stop string) or "length" (max_tokens or the context) — "tool_calls" for a chat answer with tool calls —,
    prompt_tokens, index (the completion's number among the n of its prompt)."""

    text: str
    tokens: List[int]
    finish_reason: str
    prompt_tokens: int
    index: int
    tool_calls: Optional[List[dict]] = None   # chat(tools=...): OpenAI's tool_calls (finish_reason "tool_calls")


def load_model(model):
    """A ubatch Model from a Model, a registry name ("tiny-llama", "gemma3-270m", ...) or a GGUF path."""
    if not isinstance(model, (str, os.PathLike)):
        return model
    from ubatch import models
    return models.load(os.fspath(model))


def _is_one_token_prompt(p) -> bool:
    return isinstance(p, (list, tuple, np.ndarray)) and len(p) > 0 and all(
        isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in p)


class LLM:
    """Generation with continuous batching (docs/api.md). Keyword arguments of generate / stream / chat:
    max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, seed, stop, n (SamplingParams).
    enable_prefix_caching (default True): reuse the K/V of earlier prompts' shared prefixes (bitwise the same
    outputs); prefix_cache_max_cells bounds the cells the cache may hold (None: the KV cache, evicted on demand).
    draft= enables exact speculative decoding ("prompt-lookup", a LlamaDraftModel-like callable, or a model /
    GGUF path sharing the vocabulary; ubatch/engine/speculative.py), draft_max bounds the draft length;
    speculative=False opts a call out. The output is the same token for token with or without a draft."""

    def __init__(self, model, *, n_ctx: int = 4096, n_batch: int = 512, n_ubatch: int = 512, n_seq_max: int = 8,
                 kv_unified: bool = False, type_k: str = "f16", type_v: str = "f16", n_threads: Optional[int] = None,
                 tokenizer=None, enable_prefix_caching: bool = True, prefix_cache_max_cells: Optional[int] = None,
                 draft=None, draft_max: int = 16) -> None:
        self.engine = LLMEngine(load_model(model), n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_ubatch,
                                n_seq_max=n_seq_max, kv_unified=kv_unified, type_k=type_k, type_v=type_v,
                                n_threads=n_threads, tokenizer=tokenizer, enable_prefix_caching=enable_prefix_caching,
                                prefix_cache_max_cells=prefix_cache_max_cells, draft=draft, draft_max=draft_max)

    @property
    def model(self):
        return self.engine.model

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    @property
    def ctx(self):
        return self.engine.ctx

    @staticmethod
    def _params(max_tokens=128, temperature=0.0, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.0, seed=None,
                stop=None, n=1, **extra) -> SamplingParams:
        return SamplingParams(max_tokens=max_tokens, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                              repeat_penalty=repeat_penalty, seed=seed, stop=stop, n=n, **extra)

    def _add_all(self, prompts: List[Prompt], params: SamplingParams) -> List[str]:
        """Queues every prompt (all validated before the first decode; none stays queued if one is bad)."""
        eng = self.engine
        rids: List[str] = []
        try:
            for i, p in enumerate(prompts):
                try:
                    rids.append(eng.add_request(p, params))
                except ValueError as e:
                    raise type(e)(f"prompt {i}: {e}") from None
        except BaseException:
            for r in rids:
                eng.abort_request(r)
            raise
        return rids

    def generate(self, prompts: Union[str, Sequence[Prompt]], *, progress: bool = False, **sampling
                 ) -> List[Completion]:
        """Completions of every prompt (n per prompt, in prompt order), all prompts decoded together."""
        if isinstance(prompts, (str, bytes)) or _is_one_token_prompt(prompts):
            prompts = [prompts]
        prompts = list(prompts)
        params = self._params(**sampling)
        rids = self._add_all(prompts, params)
        final = {}
        bar = None
        if progress:
            from tqdm import tqdm
            bar = tqdm(total=len(rids), unit="prompt", desc="generate", dynamic_ncols=True, leave=False)
        try:
            pending = set(rids)
            while pending:
                for out in self.engine.step():
                    if out.finished and out.request_id in pending:
                        final[out.request_id] = out
                        pending.discard(out.request_id)
                        if bar is not None:
                            bar.update(1)
                if pending and not self.engine.has_unfinished_requests():
                    raise RuntimeError(f"the engine stopped with {len(pending)} requests unfinished")
        except BaseException:
            for r in rids:
                if r not in final:
                    self.engine.abort_request(r)
            raise
        finally:
            if bar is not None:
                bar.close()
        return [c for r in rids for c in _completions(final[r])]

    def stream(self, prompt: Prompt, **sampling) -> Iterator[str]:
        """The text of one completion as it is generated (never a broken UTF-8 sequence); closing the iterator
        early aborts the request."""
        params = self._params(**sampling)
        if params.n != 1:
            raise ValueError(f"stream gives one completion: n must be 1, got {params.n}")
        rid = self.engine.add_request(prompt, params)
        return self._stream(rid)

    def _stream(self, rid: str) -> Iterator[str]:
        done = False
        try:
            while not done:
                for out in self.engine.step():
                    if out.request_id != rid:
                        continue
                    if out.outputs[0].text_delta:
                        yield out.outputs[0].text_delta
                    done = out.finished
        finally:
            if not done:
                self.engine.abort_request(rid)

    def chat_format(self, chat_format: Optional[str] = None, template: Optional[str] = None):
        """The chat format chat() renders with (ubatch.chat.resolve: a named format or Jinja template, else the
        GGUF's template or the format guessed from it, else the architecture's, else "llama-2")."""
        from ubatch.chat.resolve import resolve_for
        if self.tokenizer is None:
            raise ValueError("chat needs a tokenizer (this model has none)")
        return resolve_for(self.tokenizer, getattr(self.model, "arch", None), chat_format=chat_format,
                           template=template)

    def chat(self, messages: List[dict], *, chat_format: Optional[str] = None, template: Optional[str] = None,
             tools: Optional[List[dict]] = None, tool_choice=None, parse_special: bool = False,
             **sampling) -> Completion:
        """One completion of the conversation rendered in the model's chat format (chat_format / template
        choose another, see chat_format()); generation ends on the vocabulary's end-of-generation tokens,
        `stop` strings as in generate. Message contents are tokenized as text (a user's `<|im_end|>` stays
        text), only the format's markup gives special tokens; parse_special=True parses special-token text in
        the contents too (llama-cpp-python's way). tools / tool_choice (OpenAI's shapes, as ubatch serve takes
        them, ValueError naming a malformed field): the calls the model makes are in .tool_calls, the rest of
        its answer in .text (see ubatch.chat.tools)."""
        tok = self.tokenizer
        fmt = self.chat_format(chat_format, template)
        if sampling.get("n", 1) != 1:
            raise ValueError(f"chat gives one completion: n must be 1, got {sampling['n']}")
        from ubatch.chat.tool_plan import check
        from ubatch.tokenizer.chat_encode import chat_prompt_ids
        plan = check(tools, tool_choice, constrained=True)    # the grammar engine constrains a forced call
        if plan.active:
            fmt = plan.chat_format(fmt)
            if plan.forced is not None:                   # one call asked for: it ends at its </tool_call>
                from ubatch.chat.tools import CLOSE
                stop = sampling.get("stop")
                sampling["stop"] = ([stop] if isinstance(stop, str) else list(stop or [])) + [CLOSE]
                sampling.update(plan.sampling())          # its arguments under the tool's JSON schema
            elif sampling.get("grammar") is None and sampling.get("json_schema") is None:
                sampling.update(plan.calls_sampling())    # "auto" / "required": calls under the tools' schemas
        c = self.generate([chat_prompt_ids(tok, fmt, messages, parse_special=parse_special)], **sampling)[0]
        if plan.active:
            msg, c.finish_reason = plan.message(c.text, c.finish_reason)
            c.text, c.tool_calls = msg["content"] or "", msg.get("tool_calls")
        return c

    def embed(self, texts: Sequence[Prompt], *, pooling: str = "mean", normalize: bool = True) -> np.ndarray:
        """float32[len(texts), n_embd] pooled embeddings (see LLMEngine.embed)."""
        return self.engine.embed(texts, pooling=pooling, normalize=normalize)

    def close(self) -> None:
        self.engine.close()

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _completions(out: RequestOutput) -> List[Completion]:
    return [Completion(text=o.text, tokens=list(o.token_ids), finish_reason=o.finish_reason or "length",
                       prompt_tokens=out.prompt_tokens, index=o.index) for o in out.outputs]


__all__ = ["Completion", "LLM", "load_model"]
