"""The sampling classes of llama_cpp._internals (re-exported there): LlamaSampler (a sampler chain owned by
Python, with every add_* of 0.3.36), CustomSampler (a llama_sampler struct of the caller's whose apply is a
Python function, added to a chain as in 0.3.36), and the dataclasses LlamaSamplingParams / LlamaSamplingContext
(0.3.36's fields and defaults; their sample() raises as 0.3.36's does)."""
from __future__ import annotations

import ctypes
import warnings
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from ubatch.llama_cpp import llama_cpp as L


@dataclass
class _HandleOwner:
    """What every owner of a low-level handle shares (as 0.3.36's classes each spell out): close() runs the
    owner's ExitStack (its free callbacks), and collection closes it, never raising from __del__."""

    def close(self) -> None:
        self._exit_stack.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class LlamaSamplingParams:
    n_prev: int = 64
    n_probs: int = 0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    tfs_z: float = 1.00
    typical_p: float = 1.00
    temp: float = 0.80
    penalty_last_n: int = 64
    penalty_repeat: float = 1.0
    penalty_freq: float = 0.00
    penalty_present: float = 0.00
    mirostat: int = 0
    mirostat_tau: float = 5.00
    mirostat_eta: float = 0.10
    penalize_nl: bool = True
    grammar: str = ""
    cfg_negative_prompt: str = ""
    cfg_scale: float = 1.00
    logit_bias: Dict[int, float] = field(default_factory=dict)


@dataclass
class LlamaSamplingContext:
    params: LlamaSamplingParams = field(default_factory=LlamaSamplingParams)
    mirostat_mu: ctypes.c_float = field(default_factory=ctypes.c_float)
    grammar: Optional[object] = None
    prev: List[int] = field(default_factory=list)
    cur: list = field(default_factory=list)

    def reset(self) -> None:
        self.prev = []
        self.cur = []
        if self.grammar is not None:
            self.grammar.reset()

    def cp(self) -> "LlamaSamplingContext":
        return LlamaSamplingContext(params=self.params, mirostat_mu=self.mirostat_mu, grammar=self.grammar,
                                    prev=self.prev.copy(), cur=self.cur.copy())

    def last(self) -> Optional[int]:
        return self.prev[-1] if self.prev else None

    def prev_str(self, ctx_main, n: int) -> str:
        return ctx_main.model.detokenize(self.prev[-n:]).decode("utf-8")

    def sample(self, ctx_main, idx: int = 0, logits_array=None):
        raise NotImplementedError("LlamaSamplingContext.sample is deprecated, use LlamaSampler instead")

    def accept(self, ctx_main, id: int, apply_grammar: bool) -> None:
        self.prev.append(id)


class CustomSampler:
    """A llama_sampler struct (`.sampler`) whose interface table calls apply_func(cur_p) and has no name,
    accept, reset, clone or free (NULL entries); the chain it is added to does not own it."""

    def __init__(self, apply_func: Callable) -> None:
        self.apply_func = apply_func

        def apply_wrapper(sampler, cur_p):
            self.apply_func(cur_p)

        iface = L.llama_sampler_i()
        iface.apply = L.llama_sampler_i_apply(apply_wrapper)
        iface.name = L.llama_sampler_i_name(0)
        iface.accept = L.llama_sampler_i_accept(0)
        iface.reset = L.llama_sampler_i_reset(0)
        iface.clone = L.llama_sampler_i_clone(0)
        iface.free = L.llama_sampler_i_free(0)
        self._apply_wrapper_ref = apply_wrapper
        self._iface = iface
        self.sampler = L.llama_sampler()
        self.sampler.iface = ctypes.pointer(iface)
        self.sampler.ctx = None

    def get_sampler(self):
        return ctypes.pointer(self.sampler)


class LlamaSampler(_HandleOwner):
    """A sampler chain (`.sampler`, a POINTER(llama_sampler)) owned by Python; custom samplers are taken out of
    the chain before it is freed (the chain does not own them)."""

    def __init__(self) -> None:
        self.sampler = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        self.custom_samplers: List[Tuple[int, CustomSampler]] = []
        self._exit_stack = ExitStack()
        self._exit_stack.callback(self._free)

    def _free(self) -> None:
        if self.sampler is not None:
            for i, _ in reversed(self.custom_samplers):
                L.llama_sampler_chain_remove(self.sampler, i)
            self.custom_samplers = []
            L.llama_sampler_free(self.sampler)
            self.sampler = None

    def _add(self, s) -> None:
        if not s:
            raise ValueError("LlamaSampler: the sampler could not be made (see the log)")
        L.llama_sampler_chain_add(self.sampler, s)

    def add_greedy(self): self._add(L.llama_sampler_init_greedy())
    def add_dist(self, seed: int): self._add(L.llama_sampler_init_dist(seed))
    def add_top_k(self, k: int): self._add(L.llama_sampler_init_top_k(k))
    def add_top_p(self, p: float, min_keep: int = 1): self._add(L.llama_sampler_init_top_p(p, min_keep))
    def add_min_p(self, p: float, min_keep: int = 1): self._add(L.llama_sampler_init_min_p(p, min_keep))
    def add_typical(self, p: float, min_keep: int = 1): self._add(L.llama_sampler_init_typical(p, min_keep))
    def add_temp(self, temp: float): self._add(L.llama_sampler_init_temp(temp))

    def add_temp_ext(self, t: float, delta: float, exponent: float):
        self._add(L.llama_sampler_init_temp_ext(t, delta, exponent))

    def add_xtc(self, p: float, t: float, min_keep: int, seed: int):
        self._add(L.llama_sampler_init_xtc(p, t, min_keep, seed))

    def add_top_n_sigma(self, n: float): self._add(L.llama_sampler_init_top_n_sigma(n))

    def add_mirostat(self, n_vocab: int, seed: int, tau: float, eta: float, m: int):
        self._add(L.llama_sampler_init_mirostat(n_vocab, seed, tau, eta, m))

    def add_mirostat_v2(self, seed: int, tau: float, eta: float):
        self._add(L.llama_sampler_init_mirostat_v2(seed, tau, eta))

    def add_softmax(self):
        warnings.warn("add_softmax is deprecated; llama_sampler_init_dist now samples directly from logits",
                      DeprecationWarning, stacklevel=2)

    def add_penalties(self, n_vocab: int, penalty_last_n: int, penalty_repeat: float, penalty_freq: float,
                      penalty_present: float):
        self._add(L.llama_sampler_init_penalties(n_vocab, penalty_last_n, penalty_repeat, penalty_freq,
                                                 penalty_present))

    def add_dry(self, model, dry_multiplier: float, dry_base: float, dry_allowed_length: int,
                dry_penalty_last_n: int, seq_breakers: List[str]):
        breakers = (ctypes.c_char_p * len(seq_breakers))(*[b.encode("utf-8") for b in seq_breakers])
        self._add(L.llama_sampler_init_dry(model.vocab, dry_multiplier, dry_base, dry_allowed_length,
                                           dry_penalty_last_n, breakers, len(seq_breakers)))

    def add_logit_bias(self, n_vocab: int, logit_bias: Dict[int, float]):
        arr = (L.llama_logit_bias * len(logit_bias))()
        for i, (tok, bias) in enumerate(logit_bias.items()):
            arr[i].token, arr[i].bias = tok, bias
        self._add(L.llama_sampler_init_logit_bias(n_vocab, len(logit_bias), arr))

    def add_infill(self, model):
        self._add(L.llama_sampler_init_infill(model.vocab))

    def add_grammar(self, model, grammar):
        if not isinstance(getattr(grammar, "_grammar", None), str):
            raise TypeError(f"grammar must be a LlamaGrammar, got {type(grammar).__name__}")
        s = L.llama_sampler_init_grammar(model.vocab, grammar._grammar.encode("utf-8"), grammar._root.encode("utf-8"))
        if not s:
            raise ValueError("add_grammar: llama.cpp's parser rejects this grammar")
        self._add(s)

    def add_grammar_lazy_patterns(self, model, grammar, trigger_patterns: List[str], trigger_tokens: List[int]):
        pats = (ctypes.c_char_p * len(trigger_patterns))(*[p.encode("utf-8") for p in trigger_patterns])
        toks = (L.llama_token * len(trigger_tokens))(*trigger_tokens)
        s = L.llama_sampler_init_grammar_lazy_patterns(model.vocab, grammar._grammar.encode("utf-8"),
                                                       grammar._root.encode("utf-8"), pats, len(trigger_patterns),
                                                       toks, len(trigger_tokens))
        if not s:
            raise ValueError("add_grammar_lazy_patterns: llama.cpp's parser rejects this grammar")
        self._add(s)

    def add_custom(self, apply_func: Callable) -> None:
        """A CustomSampler calling apply_func(POINTER(llama_token_data_array)) at the end of the chain."""
        custom = CustomSampler(apply_func)
        L.llama_sampler_chain_add(self.sampler, custom.get_sampler())
        self.custom_samplers.append((L.llama_sampler_chain_n(self.sampler) - 1, custom))

    def get_seed(self) -> int:
        return L.llama_sampler_get_seed(self.sampler)

    def sample(self, ctx, idx: int = -1) -> int:
        return L.llama_sampler_sample(self.sampler, ctx.ctx, idx)

    def accept(self, token: int) -> None:
        L.llama_sampler_accept(self.sampler, token)

    def reset(self) -> None:
        L.llama_sampler_reset(self.sampler)

    def clone(self) -> "LlamaSampler":
        if self.custom_samplers:
            raise NotImplementedError("Cannot clone LlamaSampler that contains custom samplers")
        new = LlamaSampler.__new__(LlamaSampler)
        new.sampler = L.llama_sampler_clone(self.sampler)
        new.custom_samplers = []
        new._exit_stack = ExitStack()
        new._exit_stack.callback(new._free)
        return new
