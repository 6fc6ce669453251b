"""`Llama`: llama-cpp-python 0.3.36's high-level class re-written over ubatch.llama_cpp's low-level API (so its
results are those of the low-level path: same prompt tokens, sampler chain, RNG and stop rules as
llama-cpp-python). Beyond it: `n_seq_max=N` gives the context N sequences (unified KV), a list of prompts in
create_completion and n > 1 are decoded together (ubatch.llama_cpp._parallel), and several threads may call
one Llama at once (their requests are batched)."""
from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import sys
import threading
import time
from collections import deque  # noqa: F401  (llama_cpp.llama.deque and the names below, as 0.3.36 has them)
from pathlib import Path  # noqa: F401
from typing import Any, Callable, Deque, Dict, Generator, Iterator, List, Optional, Sequence, Union  # noqa: F401

import numpy as np

from ubatch.chat.response import StoppingCriteriaList  # noqa: F401  (llama_cpp.llama's name)
from ubatch.llama_cpp import _internals as internals
from ubatch.llama_cpp import _state
from ubatch.llama_cpp import llama_cpp
from ubatch.llama_cpp import llama_chat_format
from ubatch.llama_cpp._completion import CompletionRun
from ubatch.llama_cpp.llama_cache import token_prefix
from ubatch.llama_cpp.llama_grammar import LlamaGrammar
from ubatch.llama_cpp.llama_cache import BaseLlamaCache, LlamaCache, LlamaDiskCache, LlamaRAMCache  # noqa: F401
from ubatch.llama_cpp.llama_types import *  # noqa: F401,F403  (llama_cpp.llama re-exports the types, as 0.3.36)
from ubatch.llama_cpp._logger import set_verbose  # noqa: F401
from ubatch.llama_cpp._utils import suppress_stdout_stderr  # noqa: F401
from ubatch.llama_cpp.llama_speculative import LlamaDraftModel  # noqa: F401

LLAMA_DEFAULT_SEED = llama_cpp.LLAMA_DEFAULT_SEED


LogitsProcessor = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""A logits processor: (input_ids intc[n], scores single[n_vocab]) -> scores (0.3.36's type alias)."""
StoppingCriteria = Callable[[np.ndarray, np.ndarray], bool]
"""A stopping criterion: (input_ids intc[n], logits single[n_vocab]) -> stop? (0.3.36's type alias)."""


class LogitsProcessorList(list):
    def __call__(self, input_ids, scores):
        for p in self:
            scores = p(input_ids, scores)
        return scores


class MinTokensLogitsProcessor:
    def __init__(self, min_tokens: int, token_eos: int) -> None:
        self.min_tokens, self.token_eos, self.prompt_tokens = min_tokens, token_eos, None

    def __call__(self, input_ids, scores):
        if self.prompt_tokens is None:
            self.prompt_tokens = len(input_ids)
        if len(input_ids) - self.prompt_tokens < self.min_tokens:
            scores[self.token_eos] = -np.inf
        return scores


class LlamaState:
    """A context's state saved in-process (KV cells and K/V data snapshots, tokens, scores, seed)."""

    def __init__(self, input_ids, scores, n_tokens: int, llama_state, llama_state_size: int, seed: int) -> None:
        self.input_ids, self.scores, self.n_tokens = input_ids, scores, n_tokens
        self.llama_state, self.llama_state_size, self.seed = llama_state, llama_state_size, seed


class LlamaTokenizer:
    def __init__(self, llama: "Llama") -> None:
        self._model = llama._model

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = True) -> List[int]:
        return self._model.tokenize(text, add_bos=add_bos, special=special)

    def detokenize(self, tokens: List[int], prev_tokens: Optional[List[int]] = None, special: bool = False) -> bytes:
        return self._model.detokenize(tokens, special=special)

    def encode(self, text: str, add_bos: bool = True, special: bool = True) -> List[int]:
        return self.tokenize(text.encode("utf-8", errors="ignore"), add_bos=add_bos, special=special)

    def decode(self, tokens: List[int]) -> str:
        return self.detokenize(tokens).decode("utf-8", errors="ignore")


BaseLlamaTokenizer = LlamaTokenizer
_UNSUPPORTED = {"lora_path": "LoRA adapters", "lora_base": "LoRA adapters",
                "kv_overrides": "GGUF metadata overrides (kv_overrides)", "rpc_servers": "RPC offload",
                "tensor_split": "multi-GPU tensor split"}


class Llama:
    """llama-cpp-python's Llama over ubatch. n_gpu_layers and the other GPU options are accepted and ignored
    (ubatch computes on the CPU), unknown keyword arguments are ignored as llama-cpp-python ignores them."""

    def __init__(self, model_path: str, *, n_gpu_layers: int = 0, split_mode: int = llama_cpp.LLAMA_SPLIT_MODE_LAYER,
                 main_gpu: int = 0, tensor_split=None, vocab_only: bool = False, use_mmap: bool = True,
                 use_mlock: bool = False, kv_overrides=None, seed: int = LLAMA_DEFAULT_SEED, n_ctx: int = 512,
                 n_batch: int = 512, n_ubatch: int = 512, n_threads: Optional[int] = None,
                 n_threads_batch: Optional[int] = None, rope_scaling_type: Optional[int] = -1, pooling_type: int = -1,
                 attention_type: int = -1, rope_freq_base: float = 0.0, rope_freq_scale: float = 0.0,
                 yarn_ext_factor: float = -1.0, yarn_attn_factor: float = 1.0, yarn_beta_fast: float = 32.0,
                 yarn_beta_slow: float = 1.0, yarn_orig_ctx: int = 0, logits_all: bool = False,
                 embedding: bool = False, offload_kqv: bool = True, flash_attn: bool = False, op_offload=None,
                 swa_full=None, no_perf: bool = False, last_n_tokens_size: int = 64, lora_base=None,
                 lora_scale: float = 1.0, lora_path=None, numa=False, chat_format: Optional[str] = None,
                 chat_handler=None, draft_model=None, tokenizer=None, type_k: Optional[int] = None,
                 type_v: Optional[int] = None, spm_infill: bool = False, verbose: bool = True,
                 n_seq_max: Optional[int] = None, prefix_cache: bool = True, **kwargs) -> None:
        for name, what in _UNSUPPORTED.items():
            v = locals().get(name)
            if v:
                raise NotImplementedError(f"Llama({name}=...): {what} is not supported by ubatch.llama_cpp")
        self.verbose = verbose
        self.model_path = model_path
        self._seed = seed or LLAMA_DEFAULT_SEED       # 0.3.36: seed=0 means the default (random) seed
        self.last_n_tokens_size = last_n_tokens_size
        self.spm_infill = spm_infill
        self.draft_model = draft_model
        self._draft_state = None
        if draft_model is not None:
            if not callable(draft_model):
                raise ValueError(f"Llama(draft_model=...): {type(draft_model).__name__} is not callable (a "
                                 f"LlamaDraftModel such as LlamaPromptLookupDecoding)")
            from ubatch.llama_cpp._speculative import DraftState
            self._draft_state = DraftState(self)
        self.cache = None
        self.prefix_cache = bool(prefix_cache)   # ubatch: prefix reuse across the batched paths' requests
        self.lora_path, self.lora_base, self.lora_scale = None, None, lora_scale
        self.numa = numa
        self._use_mlock = bool(use_mlock)

        self.model_params = llama_cpp.llama_model_default_params()
        self.model_params.n_gpu_layers = 0x7FFFFFFF if n_gpu_layers == -1 else n_gpu_layers
        self.model_params.split_mode = split_mode
        self.model_params.main_gpu = main_gpu
        self.model_params.vocab_only = vocab_only
        self.model_params.load_mode = (llama_cpp.LLAMA_LOAD_MODE_MMAP if use_mmap else llama_cpp.LLAMA_LOAD_MODE_NONE)

        self.n_batch = min(n_ctx, n_batch) if n_ctx else n_batch
        n_threads = n_threads or max(multiprocessing.cpu_count() // 2, 1)
        n_threads_batch = n_threads_batch or multiprocessing.cpu_count()
        self.context_params = cp = llama_cpp.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = self.n_batch
        cp.n_ubatch = min(self.n_batch, n_ubatch)
        cp.n_threads, cp.n_threads_batch = n_threads, n_threads_batch
        cp.rope_scaling_type = rope_scaling_type if rope_scaling_type is not None else -1
        cp.pooling_type = pooling_type
        cp.attention_type = attention_type
        cp.rope_freq_base, cp.rope_freq_scale = rope_freq_base, rope_freq_scale
        cp.yarn_ext_factor, cp.yarn_attn_factor = yarn_ext_factor, yarn_attn_factor
        cp.yarn_beta_fast, cp.yarn_beta_slow, cp.yarn_orig_ctx = yarn_beta_fast, yarn_beta_slow, yarn_orig_ctx
        cp.embeddings = embedding
        cp.offload_kqv = offload_kqv
        cp.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else \
            llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        if op_offload is not None:
            cp.op_offload = op_offload
        if swa_full is not None:
            cp.swa_full = swa_full
        if type_k is not None:
            cp.type_k = type_k
        if type_v is not None:
            cp.type_v = type_v
        cp.no_perf = no_perf
        self._logits_all = logits_all if draft_model is None else True
        if embedding:
            cp.n_seq_max = min(self.n_batch, 256)
            cp.kv_unified = True
        if n_seq_max is not None:            # ubatch's extension: N parallel sequences over one unified KV cache
            cp.n_seq_max = max(int(n_seq_max), 1)
            cp.kv_unified = True
        self.n_seq_max = int(cp.n_seq_max)
        self._batched = n_seq_max is not None and self.n_seq_max > 1

        from ubatch.llama_cpp._constants import KV_TYPE_NAMES
        from ubatch.llama_cpp._context import check_rope
        check_rope(cp)                      # YaRN / LongRoPE raise NotImplementedError here, naming the parameter
        for name in ("type_k", "type_v"):
            if int(getattr(cp, name)) not in KV_TYPE_NAMES:
                raise NotImplementedError(f"Llama({name}={int(getattr(cp, name))}): not a K/V cache type (GGML_TYPE_* "
                                          f"ids {sorted(KV_TYPE_NAMES)})")
        if not os.path.exists(model_path):
            raise ValueError(f"Model path does not exist: {model_path}")
        self._stack = contextlib.ExitStack()
        self._model = internals.LlamaModel(path_model=model_path, params=self.model_params, verbose=verbose)
        self._stack.callback(self._model.close)
        self.tokenizer_ = tokenizer or LlamaTokenizer(self)
        if n_ctx == 0:
            n_ctx = self._model.n_ctx_train()
            self.n_batch = min(n_ctx, n_batch)
            cp.n_ctx, cp.n_batch, cp.n_ubatch = n_ctx, self.n_batch, min(self.n_batch, n_ubatch)
        self._ctx = internals.LlamaContext(model=self._model, params=cp, verbose=verbose)
        self._stack.callback(self._ctx.close)
        self._batch = internals.LlamaBatch(n_tokens=self.n_batch, embd=0, n_seq_max=cp.n_ctx, verbose=verbose)
        self._stack.callback(self._batch.close)

        self._n_vocab = self.n_vocab()
        self._n_ctx = self.n_ctx()
        self._token_nl = self.token_nl()
        self._token_eos = self.token_eos()
        self._is_recurrent = self._is_hybrid = False
        self.n_tokens = 0
        self.input_ids = np.ndarray((self._n_ctx,), dtype=np.intc)
        # every evaluated row's logits are kept when logits_all or draft_model (llama-cpp-python sizes this by
        # logits_all alone, so a draft_model without logits_all fails once n_batch positions are evaluated)
        self.scores = np.ndarray((self._n_ctx if self._logits_all else self.n_batch, self._n_vocab), dtype=np.single)
        self._mirostat_mu = ctypes.c_float(2.0 * 5.0)
        self._sampler = None
        self._requires_eval = True
        self._lock = threading.RLock()
        self._parallel = None
        self._holders = None                  # set_cache users' prefix reuse (_cache_holders.py)

        try:
            self.metadata = self._model.metadata()
        except Exception as e:
            self.metadata = {}
            if verbose:
                print(f"Failed to load metadata: {e}", file=sys.stderr)
        if self.verbose:
            print(llama_cpp.llama_print_system_info().decode("utf-8"), file=sys.stderr)
            print(f"Model metadata: {self.metadata}", file=sys.stderr)

        self.chat_format = chat_format
        self.chat_handler = chat_handler
        self._chat_handlers: Dict[str, Any] = {}
        self._init_chat_formats(verbose)

    # ------------------------------------------------------------------ escape hatches and sizes
    @property
    def ctx(self):
        return self._ctx.ctx

    @property
    def model(self):
        return self._model.model

    @property
    def _input_ids(self) -> np.ndarray:
        return self.input_ids[: self.n_tokens]

    @property
    def _scores(self) -> np.ndarray:
        return self.scores[: self.n_tokens, :]

    @property
    def eval_tokens(self):
        from collections import deque
        return deque(self.input_ids[: self.n_tokens].tolist(), maxlen=self._n_ctx)

    def n_ctx(self) -> int:
        return self._ctx.n_ctx()

    def n_embd(self) -> int:
        return self._model.n_embd()

    def n_vocab(self) -> int:
        return self._model.n_vocab()

    def token_bos(self) -> int:
        return self._model.token_bos()

    def token_eos(self) -> int:
        return self._model.token_eos()

    def token_nl(self) -> int:
        return self._model.token_nl()

    def pooling_type(self) -> int:
        return self._ctx.pooling_type()

    def tokenizer(self) -> LlamaTokenizer:
        return LlamaTokenizer(self)

    def close(self) -> None:
        if self._parallel is not None:
            self._parallel.close()
            self._parallel = None
        self._stack.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    @staticmethod
    def logits_to_logprobs(logits, axis: int = -1) -> np.ndarray:
        logits = np.asarray(logits, dtype=np.single)
        m = np.amax(logits, axis=axis, keepdims=True)
        sub = logits - m
        with np.errstate(divide="ignore"):
            return sub - np.log(np.sum(np.exp(sub), axis=axis, keepdims=True))

    @staticmethod
    def longest_token_prefix(a: Sequence[int], b: Sequence[int]) -> int:
        return token_prefix(a, b)

    # ------------------------------------------------------------------ tokens
    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> List[int]:
        return self.tokenizer_.tokenize(text, add_bos, special)

    def detokenize(self, tokens: List[int], prev_tokens: Optional[List[int]] = None, special: bool = False) -> bytes:
        return self.tokenizer_.detokenize(tokens, prev_tokens=prev_tokens, special=special)

    def set_cache(self, cache) -> None:
        if self._holders is not None:         # the holders kept the entries of the cache being replaced
            self._holders.forget()
            self._holders = None
        self.cache = cache

    def set_seed(self, seed: int) -> None:
        self._seed = seed

    # ------------------------------------------------------------------ evaluation and sampling
    def reset(self) -> None:
        self.n_tokens = 0
        self._requires_eval = True

    def eval(self, tokens: Sequence[int]) -> None:
        self._ctx.kv_cache_seq_rm(0, self.n_tokens, -1)
        for i in range(0, len(tokens), self.n_batch):
            chunk = list(tokens[i: min(len(tokens), i + self.n_batch)])
            n_past, n = self.n_tokens, len(chunk)
            self._batch.set_batch(batch=chunk, n_past=n_past, logits_all=self._logits_all)
            self._decode_chunk(n)
            self.input_ids[n_past: n_past + n] = chunk
            if self._logits_all:
                logits = np.ctypeslib.as_array(self._ctx.get_logits(), shape=(n * self._n_vocab,))
                self.scores[n_past: n_past + n, :].reshape(-1)[:] = logits
            self.n_tokens += n
            self._requires_eval = False

    def _decode_chunk(self, n: int) -> None:
        """Decodes self._batch; a full KV cache first evicts what the batched paths' prefix reuse keeps
        (the engine's prefix cache) or the set_cache holders (_cache_holders.py) keep, so cached prefixes never
        make a decode fail that would succeed without."""
        pre = self._parallel.prefix if self._parallel is not None else None
        holders = self._holders if self._parallel is None else None
        while True:
            rc = llama_cpp.llama_decode(self._ctx.ctx, self._batch.batch)
            if rc == 1 and ((pre is not None and pre.evict_for_full(n))
                            or (holders is not None and holders.evict_for(n))):
                continue
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc}")
            return

    def _init_sampler(self, top_k=40, top_p=0.95, min_p=0.05, typical_p=1.0, temp=0.80, repeat_penalty=1.0,
                      frequency_penalty=0.0, presence_penalty=0.0, tfs_z=1.0, mirostat_mode=0, mirostat_eta=0.1,
                      mirostat_tau=5.0, penalize_nl=True, logits_processor=None, grammar=None, seed=None,
                      input_ids=None):
        """input_ids: () -> the token ids the logits processors see (default: this context's evaluated tokens;
        the batched paths give each choice its own)."""
        seed = self._seed if seed is None else seed
        s = internals.LlamaSampler()
        if logits_processor is not None:
            if input_ids is None:
                input_ids = lambda: self._input_ids  # noqa: E731

            def apply_func(cur_p):
                size = cur_p.contents.size
                addr = ctypes.addressof(cur_p.contents.data.contents)
                rec = np.recarray((size,), dtype=np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)],
                                                          align=True),
                                  buf=(llama_cpp.llama_token_data * size).from_address(addr))
                for proc in logits_processor:
                    rec.logit[:] = proc(input_ids(), rec.logit)
            s.add_custom(apply_func)
        s.add_penalties(n_vocab=self._n_vocab, penalty_last_n=self.last_n_tokens_size, penalty_repeat=repeat_penalty,
                        penalty_freq=frequency_penalty, penalty_present=presence_penalty)
        if grammar is not None:
            s.add_grammar(self._model, grammar)
        if temp < 0.0:
            s.add_dist(seed)
        elif temp == 0.0:
            s.add_greedy()
        elif mirostat_mode == 1:
            s.add_mirostat(self._n_vocab, seed, mirostat_tau, mirostat_eta, 100)
        elif mirostat_mode == 2:
            s.add_mirostat_v2(seed, mirostat_tau, mirostat_eta)
        else:
            s.add_top_k(top_k)
            s.add_typical(typical_p, 1)
            s.add_top_p(top_p, 1)
            s.add_min_p(min_p, 1)
            s.add_temp(temp)
            s.add_dist(seed)
        return s

    def sample(self, top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05, typical_p: float = 1.0,
               temp: float = 0.80, repeat_penalty: float = 1.0, frequency_penalty: float = 0.0,
               presence_penalty: float = 0.0, tfs_z: float = 1.0, mirostat_mode: int = 0, mirostat_eta: float = 0.1,
               mirostat_tau: float = 5.0, penalize_nl: bool = True, logits_processor=None, grammar=None,
               idx: Optional[int] = None) -> int:
        if self.n_tokens <= 0:
            raise RuntimeError("Llama.sample: nothing evaluated yet (call eval first)")
        tmp = self._sampler is None
        if tmp:
            self._sampler = self._init_sampler(top_k, top_p, min_p, typical_p, temp, repeat_penalty,
                                               frequency_penalty, presence_penalty, tfs_z, mirostat_mode,
                                               mirostat_eta, mirostat_tau, penalize_nl, logits_processor, grammar)
        ridx = idx - self.n_tokens if idx is not None else -1
        try:
            return self._sampler.sample(self._ctx, ridx)
        finally:
            if tmp:
                self._sampler = None

    def generate(self, tokens: Sequence[int], top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
                 typical_p: float = 1.0, temp: float = 0.80, repeat_penalty: float = 1.0, reset: bool = True,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0, tfs_z: float = 1.0,
                 mirostat_mode: int = 0, mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                 penalize_nl: bool = True, logits_processor=None, stopping_criteria=None, grammar=None):
        self._mirostat_mu = ctypes.c_float(2.0 * mirostat_tau)
        self._sampler = self._init_sampler(top_k, top_p, min_p, typical_p, temp, repeat_penalty, frequency_penalty,
                                           presence_penalty, tfs_z, mirostat_mode, mirostat_eta, mirostat_tau,
                                           penalize_nl, logits_processor, grammar)
        tokens = list(tokens)
        if reset and self.n_tokens > 0:
            longest = self.longest_token_prefix(self._input_ids.tolist(), tokens)
            consumed = longest == len(tokens)
            if self.n_tokens == len(tokens) and consumed and not self._requires_eval:
                reset, tokens, reuse = False, [], 0
            else:
                reuse = longest - 1 if consumed else longest
            if reuse > 0 and self._ctx.kv_cache_seq_rm(0, reuse, -1):
                reset = False
                tokens = tokens[reuse:]
                self.n_tokens = reuse
                self._requires_eval = True
                if self.verbose:
                    print(f"Llama.generate: {reuse} prefix-match hit, remaining {len(tokens)} prompt tokens to eval",
                          file=sys.stderr)
        if reset:
            self.reset()
        sample_idx = self.n_tokens + len(tokens) - 1
        spec = self._draft_state
        n_draft = 0
        n_prompt = len(tokens)          # the first eval is the prompt's (rows without a sample of their own)
        try:
            while True:
                t_eval = time.perf_counter()
                self.eval(tokens)
                if spec is not None:
                    spec.observe_eval(len(tokens), time.perf_counter() - t_eval, prompt_rows=n_prompt)
                n_prompt = 0
                matched = 0
                while sample_idx < self.n_tokens:
                    token = self.sample(idx=sample_idx)
                    sample_idx += 1
                    if stopping_criteria is not None and stopping_criteria(
                            self._input_ids[:sample_idx], self._scores[sample_idx - self.n_tokens, :]):
                        return
                    extra = yield token
                    tokens = [token] + (list(extra) if extra is not None else [])
                    if sample_idx < self.n_tokens and token != self._input_ids[sample_idx]:
                        self.n_tokens = sample_idx
                        self._ctx.kv_cache_seq_rm(0, self.n_tokens, -1)
                        self._requires_eval = True
                        break
                    if sample_idx < self.n_tokens:
                        matched += 1     # the sample equals the evaluated draft token after it
                if spec is not None:     # llama-cpp-python's draft step, cut by the adaptive policy
                    spec.verified(n_draft, matched)
                    drafts = spec.draft(tokens)
                    n_draft = len(drafts)
                    tokens = tokens + drafts
        finally:
            if spec is not None and self.n_tokens > sample_idx:
                # the generator stops after a token: draft rows evaluated beyond it leave the KV cache, which
                # then holds what decoding without the draft holds at this point
                self.n_tokens = sample_idx
                self._ctx.kv_cache_seq_rm(0, sample_idx, -1)

    # ------------------------------------------------------------------ completions
    def create_completion(self, prompt: Union[str, List[int], List[str], List[List[int]]], suffix: Optional[str] = None,
                          max_tokens: Optional[int] = 16, temperature: float = 0.8, top_p: float = 0.95,
                          min_p: float = 0.05, typical_p: float = 1.0, logprobs: Optional[int] = None,
                          echo: bool = False, stop: Optional[Union[str, List[str]]] = [],
                          frequency_penalty: float = 0.0, presence_penalty: float = 0.0, repeat_penalty: float = 1.0,
                          top_k: int = 40, stream: bool = False, seed: Optional[int] = None, tfs_z: float = 1.0,
                          mirostat_mode: int = 0, mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                          model: Optional[str] = None, stopping_criteria=None, logits_processor=None, grammar=None,
                          logit_bias: Optional[Dict[int, float]] = None, n: int = 1):
        args = dict(suffix=suffix, max_tokens=max_tokens, temperature=temperature, top_p=top_p, min_p=min_p,
                    typical_p=typical_p, logprobs=logprobs, echo=echo, stop=stop,
                    frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
                    repeat_penalty=repeat_penalty, top_k=top_k, seed=seed, tfs_z=tfs_z, mirostat_mode=mirostat_mode,
                    mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta, model=model,
                    stopping_criteria=stopping_criteria, logits_processor=logits_processor, grammar=grammar,
                    logit_bias=logit_bias)
        multi = isinstance(prompt, list) and len(prompt) > 0 and not isinstance(prompt[0], (int, np.integer))
        single_only = args.get("logprobs") is not None or args.get("grammar") is not None
        if multi or n > 1 or (self._batched and not stream and not single_only):
            from ubatch.llama_cpp._parallel import parallel_completion
            return parallel_completion(self, prompt if multi else [prompt], n, args, stream=stream)
        with self._lock:
            run = CompletionRun(self, prompt, **args)
            if stream:
                return self._locked_stream(run)
            out = None
            for out in run.iterate(stream=False):
                pass
            return out

    def _locked_stream(self, run):
        with self._lock:
            yield from run.iterate(stream=True)

    def __call__(self, prompt, *args, **kwargs):
        return self.create_completion(prompt, *args, **kwargs)

    # ------------------------------------------------------------------ chat
    def _init_chat_formats(self, verbose: bool) -> None:
        """The GGUF's templates as handlers ("chat_template.default", "chat_template.<name>"), and the chat
        format when none is given: ubatch.chat.resolve's one rule (the guessed registry format, the template,
        the architecture's format, "llama-2")."""
        from ubatch.chat.resolve import default_chat_format, template_choices
        eos_id, bos_id = self.token_eos(), self.token_bos()
        eos = self._model.token_get_text(eos_id) if eos_id != -1 else ""
        bos = self._model.token_get_text(bos_id) if bos_id != -1 else ""
        metadata = dict(self.metadata)
        for name, template in template_choices(metadata).items():
            try:
                self._chat_handlers[name] = llama_chat_format.Jinja2ChatFormatter(
                    template=template, eos_token=eos, bos_token=bos, stop_token_ids=[eos_id]).to_chat_handler()
            except Exception as e:              # a template jinja2 cannot compile: left out (and said so)
                if name == "chat_template.default":
                    metadata.pop("tokenizer.chat_template", None)
                if verbose:
                    print(f"Failed to load the chat template {name}: {e}", file=sys.stderr)
        if self.chat_format is None and self.chat_handler is None:
            self.chat_format = default_chat_format(metadata, metadata.get("general.architecture"))
            if verbose:
                print(f"Using chat format: {self.chat_format}", file=sys.stderr)

    def create_chat_completion(self, messages: List[Dict[str, Any]], functions=None, function_call=None, tools=None,
                               tool_choice=None, temperature: float = 0.2, top_p: float = 0.95, top_k: int = 40,
                               min_p: float = 0.05, typical_p: float = 1.0, stream: bool = False,
                               stop: Optional[Union[str, List[str]]] = [], seed: Optional[int] = None,
                               response_format=None, max_tokens: Optional[int] = None, presence_penalty: float = 0.0,
                               frequency_penalty: float = 0.0, repeat_penalty: float = 1.0, tfs_z: float = 1.0,
                               mirostat_mode: int = 0, mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                               model: Optional[str] = None, logits_processor=None, grammar=None, logit_bias=None,
                               logprobs: Optional[bool] = None, top_logprobs: Optional[int] = None):
        """The chat handler (Llama(chat_handler=...), else the chat format's: the GGUF's template or a registry
        format, see llama_chat_format) renders the conversation and runs create_completion; tools /
        tool_choice / functions as the handler supports them (chatml-function-calling, functionary, a forced
        tool with any format)."""
        handler = (self.chat_handler or self._chat_handlers.get(self.chat_format)
                   or llama_chat_format.get_chat_completion_handler(self.chat_format))
        return handler(llama=self, messages=messages, functions=functions, function_call=function_call, tools=tools,
                       tool_choice=tool_choice, temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
                       typical_p=typical_p, logprobs=logprobs, top_logprobs=top_logprobs, stream=stream, stop=stop,
                       seed=seed, response_format=response_format, max_tokens=max_tokens,
                       presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
                       repeat_penalty=repeat_penalty, tfs_z=tfs_z, mirostat_mode=mirostat_mode,
                       mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta, model=model,
                       logits_processor=logits_processor, grammar=grammar, logit_bias=logit_bias)

    def create_chat_completion_openai_v1(self, *args: Any, **kwargs: Any):
        """create_chat_completion's result as the openai package's types (ChatCompletion, or a generator of
        ChatCompletionChunk when stream=True), as 0.3.36; needs `pip install openai`."""
        try:
            from openai.types.chat import ChatCompletion, ChatCompletionChunk
        except ImportError as e:
            raise ImportError("To use create_chat_completion_openai_v1, you must install the openai package. "
                              "You can install it with `pip install openai`.") from e
        stream = kwargs.get("stream", False)
        if not isinstance(stream, bool):
            raise TypeError("stream must be a bool")
        if stream:
            return (ChatCompletionChunk(**c) for c in self.create_chat_completion(*args, **kwargs))
        return ChatCompletion(**self.create_chat_completion(*args, **kwargs))

    # ------------------------------------------------------------------ embeddings
    def embed(self, input: Union[str, List[str]], normalize: bool = False, truncate: bool = True,
              return_count: bool = False):
        if not self.context_params.embeddings:
            raise RuntimeError("Llama model must be created with embedding=True to call this method")
        n_embd, n_batch, n_seq_max = self.n_embd(), self.n_batch, self.context_params.n_seq_max
        pooling = self.pooling_type()
        inputs = [input] if isinstance(input, str) else input
        data: list = []
        with self._lock:
            self._batch.reset()

            def decode_batch(sizes: List[int]) -> None:
                self._ctx.kv_cache_clear()
                self._ctx.decode(self._batch)
                self._batch.reset()
                if pooling == llama_cpp.LLAMA_POOLING_TYPE_NONE:
                    rows = np.ctypeslib.as_array(llama_cpp.llama_get_embeddings(self._ctx.ctx),
                                                 shape=(sum(sizes), n_embd))
                    start = 0
                    for size in sizes:       # each input's own rows (0.3.36 mis-indexes the later inputs)
                        emb = rows[start:start + size].tolist()
                        data.append([internals.normalize_embedding(e) for e in emb] if normalize else emb)
                        start += size
                else:
                    for i in range(len(sizes)):
                        ptr = llama_cpp.llama_get_embeddings_seq(self._ctx.ctx, i)
                        emb = ptr[:n_embd]
                        data.append(internals.normalize_embedding(emb) if normalize else emb)

            total, sizes, t_batch = 0, [], 0
            for text in inputs:
                toks = self.tokenize(text.encode("utf-8"))
                if truncate:
                    toks = toks[:n_batch]
                if len(toks) > n_batch:
                    raise ValueError(f"Requested tokens ({len(toks)}) exceed batch size of {n_batch}")
                total += len(toks)
                if t_batch + len(toks) > n_batch or len(sizes) >= n_seq_max:
                    decode_batch(sizes)
                    sizes, t_batch = [], 0
                self._batch.add_sequence(toks, len(sizes), True)
                sizes.append(len(toks))
                t_batch += len(toks)
            decode_batch(sizes)
            self._ctx.kv_cache_clear()
            self.reset()
        out = data[0] if isinstance(input, str) else data
        return (out, total) if return_count else out

    def create_embedding(self, input: Union[str, List[str]], model: Optional[str] = None) -> Dict[str, Any]:
        inputs = input if isinstance(input, list) else [input]
        embeds, total = self.embed(inputs, return_count=True)
        return {"object": "list",
                "data": [{"object": "embedding", "embedding": e, "index": i} for i, e in enumerate(embeds)],
                "model": model if model is not None else self.model_path,
                "usage": {"prompt_tokens": total, "total_tokens": total}}

    # ------------------------------------------------------------------ state
    def save_state(self) -> LlamaState:
        """The context's whole state as bytes (llama_state_get_data: ubatch's format, docs/compat.md) with the
        tokens, scores and seed; load_state (here or in another Llama over the same model and n_ctx, or after
        pickling) continues bit for bit as if it had never been saved."""
        with self._lock:
            data = _state.get_state(self._context_obj())
            return LlamaState(input_ids=self.input_ids.copy(), scores=self._scores.copy(), n_tokens=self.n_tokens,
                              llama_state=data, llama_state_size=len(data), seed=self._seed)

    def load_state(self, state: LlamaState) -> None:
        with self._lock:
            size = int(state.llama_state_size)
            buf = (ctypes.c_uint8 * size).from_buffer_copy(state.llama_state)
            if llama_cpp.llama_state_set_data(self._ctx.ctx, buf, size) != size:
                raise RuntimeError("Failed to set llama state data")
            self.scores[: state.n_tokens, :] = state.scores.copy()
            rest = self.scores[state.n_tokens:, :]
            rest[rest > 0] = 0.0
            self.input_ids = state.input_ids.copy()
            self.n_tokens = state.n_tokens
            self._requires_eval = True
            self._seed = state.seed
            if self._parallel is not None and self._parallel.prefix is not None:
                self._parallel.prefix.forget()   # the batched paths' cached prefixes were replaced too
            if self._holders is not None:
                self._holders.forget()           # so were the cache's holders
            elif not self._batched and self.cache is not None:
                from ubatch.llama_cpp._cache_holders import holder_ids
                kv = self._context_obj().kv      # a state saved beside holders carries their cells: not ours
                for h in holder_ids(kv):
                    kv.seq_rm(h)

    def _context_obj(self):
        from ubatch.llama_cpp._handles import REGISTRY
        return REGISTRY.get(self._ctx.ctx, "context")

    @property
    def eval_logits(self):
        from collections import deque
        return deque(self.scores[: self.n_tokens, :].tolist(), maxlen=self._n_ctx if self._logits_all else 1)

    # ------------------------------------------------------------------ pickling (the constructor's arguments)
    def __getstate__(self) -> Dict[str, Any]:
        mp, cp = self.model_params, self.context_params
        return dict(model_path=self.model_path, n_gpu_layers=mp.n_gpu_layers, split_mode=mp.split_mode,
                    main_gpu=mp.main_gpu, tensor_split=None, vocab_only=bool(mp.vocab_only),
                    use_mmap=mp.load_mode in (llama_cpp.LLAMA_LOAD_MODE_MMAP, llama_cpp.LLAMA_LOAD_MODE_MMAP_MLOCK),
                    use_mlock=self._use_mlock, kv_overrides=None, seed=self._seed, n_ctx=cp.n_ctx,
                    n_batch=self.n_batch, n_ubatch=cp.n_ubatch, n_threads=cp.n_threads,
                    n_threads_batch=cp.n_threads_batch, rope_scaling_type=cp.rope_scaling_type,
                    pooling_type=cp.pooling_type, attention_type=cp.attention_type,
                    rope_freq_base=cp.rope_freq_base, rope_freq_scale=cp.rope_freq_scale,
                    yarn_ext_factor=cp.yarn_ext_factor, yarn_attn_factor=cp.yarn_attn_factor,
                    yarn_beta_fast=cp.yarn_beta_fast, yarn_beta_slow=cp.yarn_beta_slow,
                    yarn_orig_ctx=cp.yarn_orig_ctx, logits_all=self._logits_all, embedding=bool(cp.embeddings),
                    offload_kqv=bool(cp.offload_kqv),
                    flash_attn=cp.flash_attn_type == llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
                    op_offload=bool(cp.op_offload), swa_full=bool(cp.swa_full), no_perf=bool(cp.no_perf),
                    last_n_tokens_size=self.last_n_tokens_size, lora_base=self.lora_base,
                    lora_scale=self.lora_scale, lora_path=self.lora_path, numa=self.numa,
                    chat_format=self.chat_format, chat_handler=self.chat_handler, draft_model=self.draft_model,
                    type_k=cp.type_k, type_v=cp.type_v, spm_infill=self.spm_infill, verbose=self.verbose,
                    n_seq_max=self.n_seq_max if self._batched else None,
                    prefix_cache=getattr(self, "prefix_cache", True))

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(**state)

    @classmethod
    def from_pretrained(cls, repo_id: str, filename: Optional[str] = None, **kwargs) -> "Llama":
        if os.path.isdir(repo_id) and filename:
            import glob
            hits = sorted(glob.glob(os.path.join(repo_id, filename)))
            if hits:
                return cls(model_path=hits[0], **kwargs)
        raise NotImplementedError("Llama.from_pretrained: downloading from the Hugging Face hub is not supported; "
                                  "pass a local directory and a file name (glob) instead")


__all__ = ["Llama", "LlamaState", "LogitsProcessor", "LogitsProcessorList", "StoppingCriteria",
           "StoppingCriteriaList", "MinTokensLogitsProcessor",
           "LlamaGrammar", "LlamaTokenizer", "BaseLlamaTokenizer", "LLAMA_DEFAULT_SEED",
           # what 0.3.36's `from .llama import *` (no __all__ there) also puts into `llama_cpp`
           "LlamaDraftModel", "set_verbose", "suppress_stdout_stderr", "Deque", "Generator", "Iterator", "Path",
           "Sequence", "deque"]
