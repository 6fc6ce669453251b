"""Thin owners of the low-level handles, with the names real code reaches through `Llama` (`llm._model.model`,
`llm._ctx.ctx`, `llm._batch.batch`, `llm._model.vocab`) and that llama-cpp-python's own `_internals` has."""
from __future__ import annotations

import ctypes
from typing import List, Sequence

import numpy as np

from ubatch.llama_cpp import llama_cpp as L


class LlamaModel:
    def __init__(self, *, path_model: str, params, verbose: bool = True) -> None:
        self.path_model = path_model
        self.params = params
        self.verbose = verbose
        self.model = L.llama_model_load_from_file(path_model.encode("utf-8"), params)
        if self.model is None:
            raise ValueError(f"Failed to load model from file: {path_model}")
        self.vocab = L.llama_model_get_vocab(self.model)

    def close(self) -> None:
        if self.model is not None:
            L.llama_model_free(self.model)
            self.model = None

    def n_vocab(self) -> int:
        return L.llama_vocab_n_tokens(self.vocab)

    def n_ctx_train(self) -> int:
        return L.llama_model_n_ctx_train(self.model)

    def n_embd(self) -> int:
        return L.llama_model_n_embd(self.model)

    def token_bos(self) -> int:
        return L.llama_vocab_bos(self.vocab)

    def token_eos(self) -> int:
        return L.llama_vocab_eos(self.vocab)

    def token_nl(self) -> int:
        return L.llama_vocab_nl(self.vocab)

    def token_cls(self) -> int:
        return L.llama_vocab_bos(self.vocab)      # llama_vocab_cls is llama.cpp's deprecated alias of bos

    def token_sep(self) -> int:
        return L.llama_vocab_sep(self.vocab)

    def add_bos_token(self) -> bool:
        return L.llama_vocab_get_add_bos(self.vocab)

    def add_eos_token(self) -> bool:
        return L.llama_vocab_get_add_eos(self.vocab)

    def token_get_text(self, token: int) -> str:
        return (L.llama_vocab_get_text(self.vocab, token) or b"").decode("utf-8", "replace")

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

    def metadata(self) -> dict:
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


class LlamaContext:
    def __init__(self, *, model: LlamaModel, params, verbose: bool = True) -> None:
        self.model = model
        self.params = params
        self.verbose = verbose
        self.ctx = L.llama_init_from_model(model.model, params)
        if self.ctx is None:
            raise ValueError("Failed to create context with model")
        self.memory = L.llama_get_memory(self.ctx)

    def close(self) -> None:
        if self.ctx is not None:
            L.llama_free(self.ctx)
            self.ctx = None

    def n_ctx(self) -> int:
        return L.llama_n_ctx(self.ctx)

    def pooling_type(self) -> int:
        return L.llama_pooling_type(self.ctx)

    def kv_cache_clear(self) -> None:
        L.llama_memory_clear(self.memory, True)

    def kv_cache_seq_rm(self, seq_id: int, p0: int, p1: int) -> bool:
        return L.llama_memory_seq_rm(self.memory, seq_id, p0, p1)

    def kv_cache_seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None:
        L.llama_memory_seq_cp(self.memory, src, dst, p0, p1)

    def kv_cache_seq_keep(self, seq_id: int) -> None:
        L.llama_memory_seq_keep(self.memory, seq_id)

    def decode(self, batch: "LlamaBatch") -> None:
        rc = L.llama_decode(self.ctx, batch.batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def get_logits(self):
        return L.llama_get_logits(self.ctx)

    def get_logits_ith(self, i: int):
        return L.llama_get_logits_ith(self.ctx, i)

    def get_embeddings(self):
        return L.llama_get_embeddings(self.ctx)

    def reset_timings(self) -> None:
        L.llama_perf_context_reset(self.ctx)

    def print_timings(self) -> None:
        L.llama_perf_context_print(self.ctx)


class LlamaBatch:
    def __init__(self, *, n_tokens: int, embd: int, n_seq_max: int, verbose: bool = True) -> None:
        self._n_tokens = n_tokens
        self.embd = embd
        self.n_seq_max = n_seq_max
        self.verbose = verbose
        self.batch = L.llama_batch_init(n_tokens, embd, n_seq_max)

    def close(self) -> None:
        if self.batch is not None:
            L.llama_batch_free(self.batch)
            self.batch = None

    def n_tokens(self) -> int:
        return self.batch.n_tokens

    def reset(self) -> None:
        self.batch.n_tokens = 0

    def set_batch(self, batch: Sequence[int], n_past: int, logits_all: bool) -> None:
        """Fills rows 0..n-1 with tokens at positions n_past.. in seq 0 (one numpy write per field)."""
        n = len(batch)
        mem = _memory(self.batch)
        mem.token[:n] = batch
        mem.pos[:n] = np.arange(n_past, n_past + n, dtype=np.int32)
        mem.n_seq_id[:n] = 1
        mem.block[:n, 0] = 0
        mem.logits[:n] = 1 if logits_all else 0
        mem.logits[n - 1] = 1
        self.batch.n_tokens = n

    def add_sequence(self, batch: Sequence[int], seq_id: int, logits_all: bool) -> None:
        n = len(batch)
        n0 = self.batch.n_tokens
        mem = _memory(self.batch)
        mem.token[n0:n0 + n] = batch
        mem.pos[n0:n0 + n] = np.arange(n, dtype=np.int32)
        mem.n_seq_id[n0:n0 + n] = 1
        mem.block[n0:n0 + n, 0] = seq_id
        mem.logits[n0:n0 + n] = 1 if logits_all else 0
        mem.logits[n0 + n - 1] = 1
        self.batch.n_tokens = n0 + n


def _memory(batch):
    from ubatch.llama_cpp._batch import _BATCHES
    return _BATCHES[ctypes.cast(batch.token, ctypes.c_void_p).value]


def normalize_embedding(embedding):
    norm = float(np.linalg.norm(embedding))
    if norm == 0.0:
        return embedding
    return [v / norm for v in embedding]


class LlamaSampler:
    """A sampler chain owned by Python (what Llama builds in _init_sampler)."""

    def __init__(self) -> None:
        params = L.llama_sampler_chain_default_params()
        self.sampler = L.llama_sampler_chain_init(params)
        self._keep = []

    def _add(self, s) -> None:
        L.llama_sampler_chain_add(self.sampler, s)

    def add_greedy(self): self._add(L.llama_sampler_init_greedy())
    def add_dist(self, seed: int): self._add(L.llama_sampler_init_dist(seed))
    def add_top_k(self, k: int): self._add(L.llama_sampler_init_top_k(k))
    def add_top_p(self, p: float, min_keep: int): self._add(L.llama_sampler_init_top_p(p, min_keep))
    def add_min_p(self, p: float, min_keep: int): self._add(L.llama_sampler_init_min_p(p, min_keep))
    def add_typical(self, p: float, min_keep: int): self._add(L.llama_sampler_init_typical(p, min_keep))
    def add_temp(self, t: float): self._add(L.llama_sampler_init_temp(t))
    def add_mirostat(self, n_vocab, seed, tau, eta, m): self._add(L.llama_sampler_init_mirostat(n_vocab, seed, tau, eta, m))
    def add_mirostat_v2(self, seed, tau, eta): self._add(L.llama_sampler_init_mirostat_v2(seed, tau, eta))

    def add_penalties(self, n_vocab: int, penalty_last_n: int, penalty_repeat: float, penalty_freq: float,
                      penalty_present: float):
        self._add(L.llama_sampler_init_penalties(n_vocab, penalty_last_n, penalty_repeat, penalty_freq,
                                                 penalty_present))

    def add_grammar(self, model, grammar):
        if not isinstance(getattr(grammar, "_grammar", None), str):
            raise TypeError(f"grammar must be a LlamaGrammar, got {type(grammar).__name__}")
        s = L.llama_sampler_init_grammar(model.vocab, grammar._grammar.encode("utf-8"), grammar._root.encode("utf-8"))
        if not s:
            raise ValueError("add_grammar: llama.cpp's parser rejects this grammar")
        self._add(s)

    def add_grammar_lazy_patterns(self, model, grammar, trigger_patterns, trigger_tokens):
        pats = (ctypes.c_char_p * len(trigger_patterns))(*[p.encode("utf-8") for p in trigger_patterns])
        toks = (ctypes.c_int32 * len(trigger_tokens))(*trigger_tokens)
        s = L.llama_sampler_init_grammar_lazy_patterns(model.vocab, grammar._grammar.encode("utf-8"),
                                                       grammar._root.encode("utf-8"), pats, len(trigger_patterns),
                                                       toks, len(trigger_tokens))
        if not s:
            raise ValueError("add_grammar_lazy_patterns: llama.cpp's parser rejects this grammar")
        self._add(s)

    def add_custom(self, apply_func):
        """A custom sampler whose apply calls apply_func(POINTER(llama_token_data_array))."""
        from ubatch.llama_cpp._structs import llama_sampler_i, llama_sampler_i_apply, llama_sampler_i_name
        name = llama_sampler_i_name(lambda s: b"custom")
        apply = llama_sampler_i_apply(lambda s, cur_p: apply_func(cur_p))
        iface = llama_sampler_i()
        iface.name, iface.apply = name, apply
        self._keep += [name, apply, iface]
        self._add(L.llama_sampler_init(ctypes.pointer(iface), None))

    def sample(self, ctx: LlamaContext, idx: int) -> int:
        return L.llama_sampler_sample(self.sampler, ctx.ctx, idx)

    def accept(self, token: int) -> None:
        L.llama_sampler_accept(self.sampler, token)

    def reset(self) -> None:
        L.llama_sampler_reset(self.sampler)

    def close(self) -> None:
        if self.sampler is not None:
            L.llama_sampler_free(self.sampler)
            self.sampler = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
