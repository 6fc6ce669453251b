"""One completion request of `Llama` with llama-cpp-python 0.3.36's rules: how the prompt is tokenised (BOS
added per the vocabulary, a duplicate-BOS warning), the context-window checks, max_tokens capping, the seed
chain (random.Random(constructor seed)), stop on an end-of-generation token / a stop string (text cut before
it) / max_tokens, incomplete UTF-8 held back, streaming that holds back a possible stop-string prefix, echo,
logprobs (needs logits_all) and the OpenAI-style dicts."""
from __future__ import annotations

import random
import time
import uuid
import warnings
from typing import Any, Dict, Iterator, List, Optional

import numpy as np

from ubatch.llama_cpp import llama_cpp


class Prepared:
    """The request after the checks: prompt tokens, stop sequences, max_tokens, the sampler seed."""

    def __init__(self, llm, prompt, *, suffix=None, max_tokens=16, logprobs=None, stop=None, seed=None,
                 model=None, logit_bias=None, logits_processor=None, **_ignored) -> None:
        self.llm = llm
        self.id = f"cmpl-{uuid.uuid4()}"
        self.created = int(time.time())
        self.model_name = model if model is not None else llm.model_path
        self.prompt = prompt
        bos = llm.token_bos()
        if suffix is not None:
            self.tokens = fim_tokens(llm, prompt, suffix)
        elif isinstance(prompt, str):
            toks = llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True) if prompt != "" else []
            cls_id, sep_id = llm._model.token_cls(), llm._model.token_sep()
            lead = cls_id if cls_id != -1 else bos
            bos_tokens = [lead] if (llm._model.add_bos_token() and lead != -1) else []
            eos = sep_id if sep_id != -1 else llm.token_eos()
            eos_tokens = [eos] if (llm._model.add_eos_token() or sep_id != -1) and eos != -1 else []
            self.tokens = bos_tokens + toks + eos_tokens
        else:
            self.tokens = [int(t) for t in prompt]
        self.completion_seed: List[int] = [] if len(prompt) > 0 else [bos]
        if self.tokens[:2] == [bos] * 2 and bos != -1:
            warnings.warn(f'Detected duplicate leading "{llm._model.token_get_text(bos)}" in prompt, this will '
                          f'likely reduce response quality, consider removing it...', RuntimeWarning)
        n_ctx = llm._n_ctx
        if len(self.tokens) >= n_ctx:
            raise ValueError(f"Requested tokens ({len(self.tokens)}) exceed context window of {n_ctx}")
        if max_tokens is None or max_tokens <= 0:
            max_tokens = n_ctx - len(self.tokens)
        self.max_tokens = max_tokens if max_tokens + len(self.tokens) < n_ctx else n_ctx - len(self.tokens)
        stop = stop if isinstance(stop, list) else [stop] if isinstance(stop, str) else []
        self.stops = [s.encode("utf-8") for s in stop]
        if logprobs is not None and not llm._logits_all:
            raise ValueError("logprobs is not supported for models created with logits_all=False")
        self.logprobs = logprobs
        self.seed = seed if seed is not None else random.Random(llm._seed).randint(0, 2 ** 32)
        self.logits_processor = logits_processor
        if logit_bias is not None:
            bias = {int(k): float(v) for k, v in logit_bias.items()}

            def bias_proc(input_ids, scores):
                out = np.copy(scores)
                for tok, b in bias.items():
                    out[tok] = scores[tok] + b
                return out
            from ubatch.llama_cpp.llama import LogitsProcessorList
            extra = LogitsProcessorList([bias_proc])
            self.logits_processor = extra if logits_processor is None else LogitsProcessorList(
                list(logits_processor) + [bias_proc])


def fim_tokens(llm, prompt, suffix: str) -> List[int]:
    """The fill-in-the-middle prompt: [BOS] FIM_PRE prompt FIM_SUF suffix FIM_MID [EOS] (suffix first with
    spm_infill), with the model's own FIM tokens. llama-cpp-python 0.3.36 has token id 0 in place of all three
    (its "TODO: Fix"), which is no FIM prompt at all; a model without FIM tokens raises ValueError."""
    if not isinstance(suffix, str):
        raise TypeError("suffix must be a str")
    from ubatch.llama_cpp import llama_cpp as L
    vocab = L.llama_model_get_vocab(llm.model)
    pre, suf, mid = L.llama_vocab_fim_pre(vocab), L.llama_vocab_fim_suf(vocab), L.llama_vocab_fim_mid(vocab)
    if min(pre, suf, mid) < 0:
        raise ValueError("create_completion(suffix=...): the model has no fill-in-the-middle tokens "
                         "(tokenizer.ggml.fim_pre_token_id / fim_suf / fim_mid)")
    if isinstance(prompt, str):
        body = llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=False) if prompt else []
    else:
        body = [int(t) for t in prompt]
    tail = llm.tokenize(suffix.encode("utf-8"), add_bos=False, special=False) if suffix else []
    if suffix and llm.metadata.get("tokenizer.ggml.add_space_prefix", "true") == "true":
        # an SPM vocabulary puts a space before the text: tokenise after a marker and drop the marker's tokens
        mark = llm.tokenize("\u263a".encode("utf-8"), add_bos=False, special=False)
        marked = llm.tokenize(("\u263a" + suffix).encode("utf-8"), add_bos=False, special=False)
        if marked[:len(mark)] == mark:
            tail = marked[len(mark):]
    bos, cls_id, sep_id = llm.token_bos(), llm._model.token_cls(), llm._model.token_sep()
    lead = cls_id if cls_id != -1 else bos
    bos_tokens = [lead] if (llm._model.add_bos_token() and lead != -1) else []
    eos = sep_id if sep_id != -1 else llm.token_eos()
    eos_tokens = [eos] if (llm._model.add_eos_token() or sep_id != -1) and eos != -1 else []
    prefix, suffix_part = [pre] + body, [suf] + tail
    middle = (suffix_part + prefix) if llm.spm_infill else (prefix + suffix_part)
    return bos_tokens + middle + [mid] + eos_tokens


class CompletionText:
    """The completion text as tokens arrive: EOG and stop strings end it; an incomplete UTF-8 tail waits."""

    def __init__(self, llm, prep: Prepared, max_tokens: int) -> None:
        self.llm, self.prep, self.max_tokens = llm, prep, max_tokens
        self.tokens: List[int] = list(prep.completion_seed)
        self.text = b""
        self.finish: Optional[str] = None
        self._multibyte = 0

    def feed(self, token: int) -> bool:
        """Returns True when the completion is finished (self.finish set)."""
        llm = self.llm
        if llama_cpp.llama_vocab_is_eog(llm._model.vocab, token):
            self.text = llm.detokenize(self.tokens, prev_tokens=self.prep.tokens)
            self.finish = "stop"
            return True
        self.tokens.append(token)
        all_text = llm.detokenize(self.tokens, prev_tokens=self.prep.tokens)
        for k, ch in enumerate(all_text[-3:]):
            k = 3 - k
            for num, pattern in ((2, 192), (3, 224), (4, 240)):
                if num > k and pattern & ch == pattern:
                    self._multibyte = num - k
        if self._multibyte > 0:
            self._multibyte -= 1
            return self._length()
        hits = [s for s in self.prep.stops if s in all_text]
        if hits:
            self.text = all_text[: all_text.index(hits[0])]
            self.finish = "stop"
            return True
        self.all_text = all_text
        return self._length()

    def _length(self) -> bool:
        if len(self.tokens) >= self.max_tokens:
            self.text = self.llm.detokenize(self.tokens, prev_tokens=self.prep.tokens)
            self.finish = "length"
            return True
        return False


def chunk(prep: Prepared, text: str, finish: Optional[str], logprobs=None, index: int = 0) -> Dict[str, Any]:
    return {"id": prep.id, "object": "text_completion", "created": prep.created, "model": prep.model_name,
            "choices": [{"text": text, "index": index, "logprobs": logprobs, "finish_reason": finish}]}


def final(prep: Prepared, choices: List[Dict[str, Any]], n_completion: int) -> Dict[str, Any]:
    return {"id": prep.id, "object": "text_completion", "created": prep.created, "model": prep.model_name,
            "choices": choices,
            "usage": {"prompt_tokens": len(prep.tokens), "completion_tokens": n_completion,
                      "total_tokens": len(prep.tokens) + n_completion}}


def logprobs_block(llm, prep: Prepared, st: CompletionText, echo: bool, scores: np.ndarray,
                   rows: Optional[np.ndarray] = None) -> Dict[str, Any]:
    """llama-cpp-python's non-stream logprobs: one entry per (prompt when echo +) completion token. rows (the
    batched path, echo off): the logits each completion token was sampled from, instead of the context's scores."""
    bos = llm.token_bos()
    text_offset = 0 if echo else len(prep.prompt)
    token_offset = 0 if echo else len(prep.tokens[1:])
    if echo:
        all_tokens = prep.tokens[1 if prep.tokens and prep.tokens[0] == bos else 0:] + st.tokens
    else:
        all_tokens = st.tokens
    strs = [llm.detokenize([t], prev_tokens=all_tokens[:i]).decode("utf-8", errors="ignore")
            for i, t in enumerate(all_tokens)]
    all_lp = llm.logits_to_logprobs(rows) if rows is not None else llm.logits_to_logprobs(scores)[token_offset:]
    offsets, token_lp, toks, tops = [], [], [], []
    for idx, (tok, s, lp) in enumerate(zip(all_tokens, strs, all_lp)):
        if tok == bos:
            continue
        offsets.append(text_offset + len(llm.detokenize(all_tokens[:idx]).decode("utf-8", errors="ignore")))
        toks.append(s)
        token_lp.append(float(lp[int(tok)]))
        order = np.argsort(-lp, kind="stable")[: prep.logprobs]
        top = {llm.detokenize([int(i)], prev_tokens=all_tokens[:idx]).decode("utf-8", errors="ignore"): float(lp[i])
               for i in order}
        top[s] = float(lp[int(tok)])
        tops.append(top)
    if echo and all_tokens:
        token_lp[0] = None
        tops[0] = None
    return {"tokens": toks, "text_offset": offsets, "token_logprobs": token_lp, "top_logprobs": tops}


class CompletionRun:
    """The single-sequence completion (Llama.generate on seq 0), as llama-cpp-python runs it."""

    def __init__(self, llm, prompt, *, echo=False, temperature=0.8, top_p=0.95, min_p=0.05, typical_p=1.0,
                 frequency_penalty=0.0, presence_penalty=0.0, repeat_penalty=1.0, top_k=40, tfs_z=1.0,
                 mirostat_mode=0, mirostat_tau=5.0, mirostat_eta=0.1, stopping_criteria=None, grammar=None,
                 **kw) -> None:
        self.llm = llm
        self.prep = Prepared(llm, prompt, **kw)
        self.echo = echo
        self.stopping_criteria = stopping_criteria
        self.sampling = dict(top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p, temp=temperature,
                             tfs_z=tfs_z, mirostat_mode=mirostat_mode, mirostat_tau=mirostat_tau,
                             mirostat_eta=mirostat_eta, frequency_penalty=frequency_penalty,
                             presence_penalty=presence_penalty, repeat_penalty=repeat_penalty,
                             stopping_criteria=stopping_criteria, logits_processor=self.prep.logits_processor,
                             grammar=grammar)

    def _cache_lookup(self) -> None:
        llm, prep = self.llm, self.prep
        from ubatch.llama_cpp._cache_holders import holders_for
        hold = holders_for(llm)
        if hold is not None and self._held_lookup(hold):
            return
        try:
            item = llm.cache[prep.tokens]
        except KeyError:
            return
        if llm.longest_token_prefix(item.input_ids[: item.n_tokens].tolist(), prep.tokens) > \
                llm.longest_token_prefix(llm._input_ids.tolist(), prep.tokens):
            llm.load_state(item)

    def _held_lookup(self, hold) -> bool:
        """The cache's entry for the prompt served from a holder's cells (_cache_holders.py): the cache sees the
        same lookup (its LRU order moves as load_state's path moves it) and seq 0 gets the entry's K/V by seq_cp.
        False when no holder has that entry (the caller restores it as before)."""
        llm, prep, cache = self.llm, self.prep, self.llm.cache
        key = cache._find_longest_prefix_key(tuple(prep.tokens))
        if key is None:
            return True                                   # nothing shares a token: nothing to restore
        found = hold.find(key, cache)
        if found is None:
            return False
        h, toks, seed = found
        # the scores rows a logits_all Llama reads back (prompt logprobs) come from the saved state itself
        item = cache[prep.tokens] if llm._logits_all or not hasattr(cache, "touch") else cache.touch(key)
        if llm.longest_token_prefix(toks, prep.tokens) <= llm.longest_token_prefix(llm._input_ids, prep.tokens):
            return True
        try:
            hold.restore(h, len(toks))
        except ValueError:
            return False
        with llm._lock:
            n = len(toks)
            llm.input_ids[:n] = toks
            if llm._logits_all:                            # as load_state restores them
                llm.scores[:n, :] = item.scores
                rest = llm.scores[n:, :]
                rest[rest > 0] = 0.0
            llm.n_tokens = n
            llm._requires_eval = True
            llm._seed = seed
        return True

    def iterate(self, stream: bool) -> Iterator[Dict[str, Any]]:
        llm, prep = self.llm, self.prep
        if llm.cache:
            self._cache_lookup()
        llm.set_seed(prep.seed)
        st = CompletionText(llm, prep, prep.max_tokens)
        returned = 0
        done = False
        for token in llm.generate(prep.tokens, **self.sampling):
            done = st.feed(token)
            if stream and not done and st._multibyte == 0:
                out, returned = self._stream_ready(st, returned)
                yield from out
            if done:
                break
        if not done:
            st.text = llm.detokenize(st.tokens, prev_tokens=prep.tokens)
            st.finish = "stop"          # ended by a stopping criterion
        if llm.cache:
            key = prep.tokens + st.tokens
            llm.cache[key] = llm.save_state()
            from ubatch.llama_cpp._cache_holders import holders_for
            hold = holders_for(llm)
            if hold is not None:
                hold.store(tuple(key), llm._input_ids.copy(), llm._seed, llm.cache._entry_tag(tuple(key)))
                hold.prune(llm.cache._has_key)
        if stream and prep.logprobs is not None:     # the rest token by token, the last one cut at a stop string
            shown = len(llm.detokenize(st.tokens[:returned], prev_tokens=prep.tokens)) if returned else 0
            out, returned = self._stream_logprobs(st, returned, st.tokens[returned:], len(st.text) - shown, cut=True)
            yield from out
            yield chunk(prep, "", st.finish)
            return
        if stream:
            rest = st.text[len(llm.detokenize(st.tokens[:returned], prev_tokens=prep.tokens)):] \
                if returned else st.text
            if rest:
                yield chunk(prep, rest.decode("utf-8", errors="ignore"), None)
            yield chunk(prep, "", st.finish)
            return
        text = st.text.decode("utf-8", errors="ignore")
        if self.echo:
            text = (prep.prompt if isinstance(prep.prompt, str) else
                    llm.detokenize(prep.prompt).decode("utf-8", errors="ignore")) + text
        lp = None
        if prep.logprobs is not None:
            lp = logprobs_block(llm, prep, st, self.echo, llm._scores)
        yield final(prep, [{"text": text, "index": 0, "logprobs": lp, "finish_reason": st.finish}], len(st.tokens))

    def _stream_ready(self, st: CompletionText, returned: int):
        """The chunks that can go out now: whole UTF-8 characters, not a possible start of a stop string."""
        llm, prep = self.llm, self.prep
        rem = st.tokens[returned:]
        rem_text = llm.detokenize(rem, prev_tokens=prep.tokens + st.tokens[:returned])
        hold = 0
        for s in prep.stops:
            for i in range(min(len(s), len(rem_text)), 0, -1):
                if rem_text.endswith(s[:i]):
                    hold = max(hold, i)
                    break
        out = []
        end_pos = 0
        if prep.logprobs is not None:       # one chunk per token with its logprobs, as 0.3.36 streams them
            return self._stream_logprobs(st, returned, rem, len(rem_text) - hold)
        while rem:
            for i in range(1, len(rem) + 1):
                bs = llm.detokenize(rem[:i], prev_tokens=prep.tokens + st.tokens[:returned])
                try:
                    ts = bs.decode("utf-8")
                    break
                except UnicodeError:
                    continue
            else:
                break
            end_pos += len(bs)
            if end_pos > len(rem_text) - hold:
                break
            rem = rem[i:]
            returned += i
            out.append(chunk(prep, ts, None))
        return out, returned

    def _stream_logprobs(self, st: CompletionText, returned: int, rem: List[int], limit: int, cut: bool = False):
        """Chunks of one token each with its logprobs entry, while the text stays within limit bytes (cut: the
        token crossing the limit goes out with its text cut there, and ends the stream)."""
        llm, prep = self.llm, self.prep
        bos = llm.token_bos()
        prompt_len = len(prep.prompt)
        out, end_pos = [], 0
        for token in rem:
            prev = prep.tokens + st.tokens[:returned]
            if token == bos:
                returned += 1
                continue
            piece = llm.detokenize([token], prev_tokens=prev)
            end_pos += len(piece)
            if end_pos > limit and not cut:
                break
            token_str = piece.decode("utf-8", errors="ignore")
            text_offset = prompt_len + len(llm.detokenize(st.tokens[:returned], prev_tokens=prev)
                                           .decode("utf-8", errors="ignore"))
            lp = llm.logits_to_logprobs(llm._scores[len(prep.tokens) + returned - 1, :])
            order = np.argsort(-lp, kind="stable")[: prep.logprobs]
            top = {llm.detokenize([int(i)]).decode("utf-8", errors="ignore"): float(lp[i]) for i in order}
            top[token_str] = float(lp[int(token)])
            returned += 1
            raw = llm.detokenize([token], prev_tokens=prep.tokens + st.tokens[:returned])
            if cut and end_pos > limit:
                raw = raw[: len(raw) - (end_pos - limit)]
            text = raw.decode("utf-8", errors="ignore")
            out.append(chunk(prep, text, None, {"tokens": [token_str], "text_offset": [text_offset],
                                                "token_logprobs": [float(lp[int(token)])], "top_logprobs": [top]}))
            if cut and end_pos >= limit:
                break
        return out, returned
