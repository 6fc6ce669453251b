"""llama_cpp._internals: the thin owners of the low-level handles that real code reaches through `Llama`
(`llm._model.model`, `llm._ctx.ctx`, `llm._batch.batch`, `llm._model.vocab`) or builds itself (guidance, easy
wrappers): LlamaModel, LlamaContext, LlamaBatch, LlamaTokenDataArray, with every method of 0.3.36's classes
(the deprecated `LlamaContext.sample_*` raise NotImplementedError as 0.3.36's do). The sampling classes are in
_internals_sampling.py. Like 0.3.36 the module re-exports llama_types, LlamaGrammar and suppress_stdout_stderr."""
from __future__ import annotations

import ctypes
import os
from contextlib import ExitStack  # noqa: F401  (llama_cpp._internals.ExitStack, as in 0.3.36)
from dataclasses import dataclass, field  # noqa: F401
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union  # noqa: F401

import numpy as np

from ubatch.llama_cpp import llama_cpp as L
from ubatch.llama_cpp.llama_types import *  # noqa: F401,F403  (as 0.3.36's `from .llama_types import *`)
from ubatch.llama_cpp.llama_grammar import LlamaGrammar  # noqa: F401
from ubatch.llama_cpp._utils import suppress_stdout_stderr
from ubatch.llama_cpp._internals_sampling import _HandleOwner


class LlamaModel(_HandleOwner):
    """Owns a llama_model handle (`.model`) and its vocab (`.vocab`); freed by close() or when collected."""

    def __init__(self, *, path_model: str, params, verbose: bool = True) -> None:
        self.path_model = path_model
        self.params = params
        self.verbose = verbose
        self._exit_stack = ExitStack()
        self.sampler = None                 # 0.3.36 has these on every owner (its cleanup code reads them)
        self.custom_samplers: list = []
        self.model = None
        if not os.path.exists(path_model):
            raise ValueError(f"Model path does not exist: {path_model}")
        with suppress_stdout_stderr(disable=verbose):
            model = L.llama_model_load_from_file(path_model.encode("utf-8"), params)
        if model is None:
            raise ValueError(f"Failed to load model from file: {path_model}")
        self.model = model
        self.vocab = L.llama_model_get_vocab(model)
        self._exit_stack.callback(self._free)

    def _free(self) -> None:
        if self.model is not None:
            L.llama_model_free(self.model)
            self.model = None

    def vocab_type(self) -> int:
        return L.llama_vocab_type(self.vocab)

    def n_vocab(self) -> int:
        return L.llama_vocab_n_tokens(self.vocab)

    def n_ctx_train(self) -> int:
        return L.llama_model_n_ctx_train(self.model)

    def n_embd(self) -> int:
        return L.llama_model_n_embd(self.model)

    def rope_freq_scale_train(self) -> float:
        return L.llama_model_rope_freq_scale_train(self.model)

    def desc(self) -> str:
        buf = ctypes.create_string_buffer(1024)
        L.llama_model_desc(self.model, buf, 1024)
        return buf.value.decode("utf-8")

    def size(self) -> int:
        return L.llama_model_size(self.model)

    def n_params(self) -> int:
        return L.llama_model_n_params(self.model)

    def get_tensor(self, name: str):
        raise NotImplementedError("get_tensor is not implemented in llama.cpp")     # 0.3.36's own text

    def token_get_text(self, token: int) -> str:
        return (L.llama_vocab_get_text(self.vocab, token) or b"").decode("utf-8", "replace")

    def token_get_score(self, token: int) -> float:
        return L.llama_vocab_get_score(self.vocab, token)

    def token_get_attr(self, token: int) -> int:
        return L.llama_vocab_get_attr(self.vocab, token)

    def token_bos(self) -> int:
        return L.llama_vocab_bos(self.vocab)

    def token_eos(self) -> int:
        return L.llama_vocab_eos(self.vocab)

    def token_cls(self) -> int:
        return L.llama_vocab_bos(self.vocab)      # llama_vocab_cls is llama.cpp's deprecated alias of bos

    def token_sep(self) -> int:
        return L.llama_vocab_sep(self.vocab)

    def token_nl(self) -> int:
        return L.llama_vocab_nl(self.vocab)

    def token_prefix(self) -> int:
        return L.llama_vocab_fim_pre(self.vocab)

    def token_middle(self) -> int:
        return L.llama_vocab_fim_mid(self.vocab)

    def token_suffix(self) -> int:
        return L.llama_vocab_fim_suf(self.vocab)

    def token_eot(self) -> int:
        return L.llama_vocab_eot(self.vocab)

    def add_bos_token(self) -> bool:
        return L.llama_vocab_get_add_bos(self.vocab)

    def add_eos_token(self) -> bool:
        return L.llama_vocab_get_add_eos(self.vocab)

    def tokenize(self, text: bytes, add_bos: bool, special: bool) -> List[int]:
        n_max = max(self.n_ctx_train(), len(text) + 8)
        buf = (L.llama_token * n_max)()
        n = L.llama_tokenize(self.vocab, text, len(text), buf, n_max, add_bos, special)
        if n < 0:
            n_max = -n
            buf = (L.llama_token * n_max)()
            n = L.llama_tokenize(self.vocab, text, len(text), buf, n_max, add_bos, special)
            if n < 0:
                raise RuntimeError(f'Failed to tokenize: text="{text!r}" n_tokens={n}')
        return list(buf[:n])

    def token_to_piece(self, token: int, special: bool = False) -> bytes:
        """The piece's bytes (0.3.36 returns the whole 32-byte buffer, NUL padding included)."""
        buf = ctypes.create_string_buffer(32)
        n = L.llama_token_to_piece(self.vocab, token, buf, 32, 0, special)
        return buf.raw[:max(n, 0)]

    def detokenize(self, tokens: Sequence[int], special: bool = False) -> bytes:
        buf = ctypes.create_string_buffer(32)
        out = []
        for t in tokens:          # llama-cpp-python's per-token pieces (32-byte limit), then the BOS-space strip
            n = L.llama_token_to_piece(self.vocab, int(t), buf, 32, 0, special)
            if n < 0:
                big = ctypes.create_string_buffer(-n)
                n = L.llama_token_to_piece(self.vocab, int(t), big, -n, 0, special)
                out.append(big.raw[:n])
            else:
                out.append(buf.raw[:n])
        data = b"".join(out)
        if len(tokens) > 0 and tokens[0] == self.token_bos() and data[:1] == b" ":
            return data[1:]
        return data

    def metadata(self) -> Dict[str, str]:
        out = {}
        buf = ctypes.create_string_buffer(1024)
        for i in range(L.llama_model_meta_count(self.model)):
            n = L.llama_model_meta_key_by_index(self.model, i, buf, 1024)
            if n > 1024:
                buf = ctypes.create_string_buffer(n + 1)
                L.llama_model_meta_key_by_index(self.model, i, buf, n + 1)
            key = buf.value.decode("utf-8")
            n = L.llama_model_meta_val_str_by_index(self.model, i, buf, len(buf))
            if n >= len(buf):
                buf = ctypes.create_string_buffer(n + 1)
                L.llama_model_meta_val_str_by_index(self.model, i, buf, n + 1)
            out[key] = buf.value.decode("utf-8")
        return out

    @staticmethod
    def default_params():
        return L.llama_model_default_params()


def _deprecated_sampling(name: str):
    def method(self, *args, **kwargs):
        raise NotImplementedError(f"{name} is deprecated, use LlamaSampler instead")     # as 0.3.36 raises
    method.__name__ = method.__qualname__ = name
    return method


class LlamaContext(_HandleOwner):
    """Owns a llama_context handle (`.ctx`) and its memory (`.memory`); freed before its model."""

    def __init__(self, *, model: LlamaModel, params, verbose: bool = True) -> None:
        self.model = model
        self.params = params
        self.verbose = verbose
        self._exit_stack = ExitStack()
        self.sampler = None
        self.ctx = L.llama_init_from_model(model.model, params)
        if self.ctx is None:
            raise ValueError("Failed to create llama_context")
        self.memory = L.llama_get_memory(self.ctx)
        self._exit_stack.callback(self._free)
        model._exit_stack.callback(self.close)          # the context goes before its model

    def _free(self) -> None:
        if self.ctx is not None:
            L.llama_free(self.ctx)
            self.ctx = None

    def n_ctx(self) -> int:
        return L.llama_n_ctx(self.ctx)

    def pooling_type(self) -> int:
        return L.llama_pooling_type(self.ctx)

    def kv_cache_clear(self) -> None:
        if self.memory is not None:
            L.llama_memory_clear(self.memory, True)

    def kv_cache_seq_rm(self, seq_id: int, p0: int, p1: int) -> bool:
        return L.llama_memory_seq_rm(self.memory, seq_id if seq_id >= 0 else 0, p0, p1)

    def kv_cache_seq_cp(self, seq_id_src: int, seq_id_dst: int, p0: int, p1: int) -> None:
        L.llama_memory_seq_cp(self.memory, seq_id_src, seq_id_dst, p0, p1)

    def kv_cache_seq_keep(self, seq_id: int) -> None:
        L.llama_memory_seq_keep(self.memory, seq_id)

    def kv_cache_seq_shift(self, seq_id: int, p0: int, p1: int, shift: int) -> None:
        L.llama_memory_seq_add(self.memory, seq_id, p0, p1, shift)

    def get_state_size(self) -> int:
        return L.llama_state_get_size(self.ctx)

    def decode(self, batch: "LlamaBatch") -> None:
        rc = L.llama_decode(self.ctx, batch.batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def encode(self, batch: "LlamaBatch") -> None:
        rc = L.llama_encode(self.ctx, batch.batch)
        if rc != 0:
            raise RuntimeError(f"llama_encode returned {rc}")

    def set_n_threads(self, n_threads: int, n_threads_batch: int) -> None:
        L.llama_set_n_threads(self.ctx, n_threads, n_threads_batch)

    def get_logits(self):
        return L.llama_get_logits(self.ctx)

    def get_logits_ith(self, i: int):
        return L.llama_get_logits_ith(self.ctx, i)

    def get_embeddings(self):
        return L.llama_get_embeddings(self.ctx)

    def get_embeddings_ith(self, i: int):
        return L.llama_get_embeddings_ith(self.ctx, i)

    def get_embeddings_seq(self, seq_id: int):
        return L.llama_get_embeddings_seq(self.ctx, seq_id)

    set_rng_seed = _deprecated_sampling("set_rng_seed")
    sample_repetition_penalties = _deprecated_sampling("sample_repetition_penalties")
    sample_softmax = _deprecated_sampling("sample_softmax")
    sample_top_k = _deprecated_sampling("sample_top_k")
    sample_top_p = _deprecated_sampling("sample_top_p")
    sample_min_p = _deprecated_sampling("sample_min_p")
    sample_typical = _deprecated_sampling("sample_typical")
    sample_temp = _deprecated_sampling("sample_temp")
    sample_grammar = _deprecated_sampling("sample_grammar")
    sample_token_mirostat = _deprecated_sampling("sample_token_mirostat")
    sample_token_mirostat_v2 = _deprecated_sampling("sample_token_mirostat_v2")
    sample_token_greedy = _deprecated_sampling("sample_token_greedy")
    sample_token = _deprecated_sampling("sample_token")
    grammar_accept_token = _deprecated_sampling("grammar_accept_token")

    def reset_timings(self) -> None:
        L.llama_perf_context_reset(self.ctx)

    def print_timings(self) -> None:
        L.llama_perf_context_print(self.ctx)

    @staticmethod
    def default_params():
        return L.llama_context_default_params()


class LlamaBatch(_HandleOwner):
    """Owns a llama_batch (`.batch`) of n_tokens rows; set_batch / add_sequence fill it with one numpy write per
    field (0.3.36 loops per token in Python)."""

    def __init__(self, *, n_tokens: int, embd: int, n_seq_max: int, verbose: bool = True) -> None:
        self._n_tokens = n_tokens
        self.embd = embd
        self.n_seq_max = n_seq_max
        self.verbose = verbose
        self._exit_stack = ExitStack()
        self.sampler = None
        self.batch = L.llama_batch_init(n_tokens, embd, n_seq_max)
        self._exit_stack.callback(self._free)

    def _free(self) -> None:
        if self.batch is not None:
            L.llama_batch_free(self.batch)
            self.batch = None

    def n_tokens(self) -> int:
        return self.batch.n_tokens

    def reset(self) -> None:
        self.batch.n_tokens = 0

    def _check(self, n0: int, n: int) -> None:
        if n0 + n > self._n_tokens:
            raise ValueError(f"LlamaBatch: {n0 + n} tokens do not fit a batch of {self._n_tokens}")

    def set_batch(self, batch: Sequence[int], n_past: int, logits_all: bool) -> None:
        """Fills rows 0..n-1 with tokens at positions n_past.. in seq 0."""
        n = len(batch)
        self._check(0, n)
        mem = _memory(self.batch)
        mem.token[:n] = batch
        mem.pos[:n] = np.arange(n_past, n_past + n, dtype=np.int32)
        mem.n_seq_id[:n] = 1
        mem.block[:n, 0] = 0
        mem.logits[:n] = 1 if logits_all else 0
        if n:
            mem.logits[n - 1] = 1
        self.batch.n_tokens = n

    def add_sequence(self, batch: Sequence[int], seq_id: int, logits_all: bool) -> None:
        """Appends the tokens at positions 0.. in seq_id."""
        n = len(batch)
        n0 = self.batch.n_tokens
        self._check(n0, n)
        mem = _memory(self.batch)
        mem.token[n0:n0 + n] = batch
        mem.pos[n0:n0 + n] = np.arange(n, dtype=np.int32)
        mem.n_seq_id[n0:n0 + n] = 1
        mem.block[n0:n0 + n, 0] = seq_id
        mem.logits[n0:n0 + n] = 1 if logits_all else 0
        if n:
            mem.logits[n0 + n - 1] = 1
        self.batch.n_tokens = n0 + n


def _memory(batch):
    from ubatch.llama_cpp._batch import _BATCHES
    return _BATCHES[ctypes.cast(batch.token, ctypes.c_void_p).value]


# the numpy record of llama_token_data (id int32, logit float32, p float32: 12 bytes, the C struct's layout)
_TOKEN_DATA = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)], align=True)


class LlamaTokenDataArray:
    """n_vocab candidates in a numpy recarray (`candidates_data`) and the llama_token_data_array over it
    (`candidates`), for llama_sampler_apply; copy_logits refills it from a logits row (vectorised)."""

    def __init__(self, *, n_vocab: int) -> None:
        self.n_vocab = n_vocab
        self.candidates_data = np.recarray((n_vocab,), dtype=_TOKEN_DATA)
        self.candidates = L.llama_token_data_array(
            data=self.candidates_data.ctypes.data_as(L.llama_token_data_p), size=n_vocab, sorted=False)
        self.default_candidates_data_id = np.arange(n_vocab, dtype=np.intc)
        self.default_candidates_data_p = np.zeros(n_vocab, dtype=np.single)
        self.sampler = None

    def copy_logits(self, logits) -> None:
        self.candidates_data.id[:] = self.default_candidates_data_id
        self.candidates_data.logit[:] = logits
        self.candidates_data.p[:] = self.default_candidates_data_p
        self.candidates.sorted = False
        self.candidates.size = self.n_vocab


def normalize_embedding(embedding):
    norm = float(np.linalg.norm(embedding))
    if norm == 0.0:
        return embedding
    return [v / norm for v in embedding]


from ubatch.llama_cpp._internals_sampling import (  # noqa: E402,F401  (0.3.36 defines them here)
    CustomSampler, LlamaSampler, LlamaSamplingContext, LlamaSamplingParams)
