"""Names real code still calls although llama-cpp-python 0.3.36 removed or deprecated them: the
llama_kv_cache_* / llama_kv_self_* families (mapped onto llama_memory_* of the context's memory), the model- or
vocab-level token getters, the old loaders. Each works and emits a DeprecationWarning naming its replacement."""
from __future__ import annotations

import functools
import warnings

from ubatch.llama_cpp import _core, _vocab


def _deprecated(old: str, new: str, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        warnings.warn(f"{old} is deprecated, use {new}", DeprecationWarning, stacklevel=2)
        return fn(*args, **kwargs)
    wrapper.__name__ = wrapper.__qualname__ = old
    return wrapper


def _on_memory(fn):
    return lambda ctx, *args: fn(_core.llama_get_memory(ctx), *args)


def _vocab_of(model_or_vocab):
    """Old getters took the model; 0.3.36's take the vocab: accept either."""
    from ubatch.llama_cpp._handles import REGISTRY
    m = REGISTRY.find(model_or_vocab, "model")
    return m.vocab.handle if m is not None else model_or_vocab


_TABLE = {}
for _fam in ("llama_kv_cache", "llama_kv_self"):
    _TABLE[f"{_fam}_clear"] = ("llama_memory_clear", lambda ctx: _core.llama_memory_clear(_core.llama_get_memory(ctx),
                                                                                           True))
    for _op in ("seq_rm", "seq_cp", "seq_keep", "seq_add", "seq_div", "seq_pos_min", "seq_pos_max", "can_shift"):
        _TABLE[f"{_fam}_{_op}"] = (f"llama_memory_{_op}", _on_memory(getattr(_core, f"llama_memory_{_op}")))
    _TABLE[f"{_fam}_seq_pos_max"] = ("llama_memory_seq_pos_max", _on_memory(_core.llama_memory_seq_pos_max))
    _TABLE[f"{_fam}_defrag"] = ("nothing (ubatch never needs defragmentation)", lambda ctx: None)
    _TABLE[f"{_fam}_update"] = ("nothing (updates apply at the next decode)", lambda ctx: None)
    _TABLE[f"{_fam}_n_tokens"] = ("llama_memory_seq_pos_max", lambda ctx: _kv_tokens(ctx))
    _TABLE[f"{_fam}_used_cells"] = ("llama_memory_seq_pos_max", lambda ctx: _kv_tokens(ctx))
_TABLE["llama_get_kv_cache_token_count"] = ("llama_memory_seq_pos_max", lambda ctx: _kv_tokens(ctx))


def _kv_tokens(ctx) -> int:
    from ubatch.llama_cpp._handles import REGISTRY
    c = REGISTRY.get(ctx, "context")
    return sum(c.kv.used(s) for s in range(c.kv.n_stream))


_TABLE.update({
    "llama_load_model_from_file": ("llama_model_load_from_file", _core.llama_model_load_from_file),
    "llama_free_model": ("llama_model_free", _core.llama_model_free),
    "llama_new_context_with_model": ("llama_init_from_model", _core.llama_init_from_model),
    "llama_n_ctx_train": ("llama_model_n_ctx_train", _core.llama_model_n_ctx_train),
    "llama_n_embd": ("llama_model_n_embd", _core.llama_model_n_embd),
    "llama_n_layer": ("llama_model_n_layer", _core.llama_model_n_layer),
    "llama_n_head": ("llama_model_n_head", _core.llama_model_n_head),
    "llama_n_vocab": ("llama_vocab_n_tokens", lambda v: _vocab.llama_vocab_n_tokens(_vocab_of(v))),
    "llama_token_get_text": ("llama_vocab_get_text", lambda v, t: _vocab.llama_vocab_get_text(_vocab_of(v), t)),
    "llama_token_get_score": ("llama_vocab_get_score", lambda v, t: _vocab.llama_vocab_get_score(_vocab_of(v), t)),
    "llama_token_get_attr": ("llama_vocab_get_attr", lambda v, t: _vocab.llama_vocab_get_attr(_vocab_of(v), t)),
    "llama_token_is_eog": ("llama_vocab_is_eog", lambda v, t: _vocab.llama_vocab_is_eog(_vocab_of(v), t)),
    "llama_token_is_control": ("llama_vocab_is_control",
                               lambda v, t: _vocab.llama_vocab_is_control(_vocab_of(v), t)),
    "llama_add_bos_token": ("llama_vocab_get_add_bos", lambda v: _vocab.llama_vocab_get_add_bos(_vocab_of(v))),
    "llama_add_eos_token": ("llama_vocab_get_add_eos", lambda v: _vocab.llama_vocab_get_add_eos(_vocab_of(v))),
    "llama_vocab_cls": ("llama_vocab_bos", lambda v: _vocab.llama_vocab_bos(_vocab_of(v))),
})
for _name in ("bos", "eos", "eot", "cls", "sep", "nl", "pad"):
    _TABLE[f"llama_token_{_name}"] = (f"llama_vocab_{_name}",
                                      lambda v, n=_name: getattr(_vocab, f"llama_vocab_{n}")(_vocab_of(v)))
for _name in ("pre", "suf", "mid", "pad", "rep", "sep"):
    _TABLE[f"llama_token_fim_{_name}"] = (f"llama_vocab_fim_{_name}",
                                          lambda v, n=_name: getattr(_vocab, f"llama_vocab_fim_{n}")(_vocab_of(v)))

for _old, (_new, _fn) in _TABLE.items():
    globals()[_old] = _deprecated(_old, _new, _fn)


def llama_token_to_piece_legacy(model, token, buf, length):
    """The 4-argument llama_token_to_piece(model, token, buf, length) of old releases."""
    return _vocab.llama_token_to_piece(_vocab_of(model), token, buf, length, 0, False)


__all__ = list(_TABLE)
