"""Functions of 0.3.36 that ubatch does not implement: each raises NotImplementedError naming the feature
(never a silent no-op), plus a few small ones that need nothing from ubatch."""
from __future__ import annotations

import ctypes

from ubatch.llama_cpp._cfunc import cfunc
from ubatch.llama_cpp._structs import ggml_log_callback

llama_log_callback = ggml_log_callback

_FEATURES = {
    "LoRA / control-vector adapters": (
        "llama_adapter_lora_init", "llama_adapter_lora_init_from_file_ptr", "llama_adapter_lora_free",
        "llama_adapter_meta_count", "llama_adapter_meta_key_by_index", "llama_adapter_meta_val_str",
        "llama_adapter_meta_val_str_by_index", "llama_adapter_get_alora_invocation_tokens",
        "llama_adapter_get_alora_n_invocation_tokens", "llama_set_adapter_lora", "llama_set_adapters_lora",
        "llama_set_adapter_cvec", "llama_apply_adapter_cvec"),
    "llama.cpp's built-in (non-Jinja) chat templates": ("llama_chat_apply_template", "llama_chat_builtin_templates"),
    "saving a loaded model": ("llama_model_save_to_file",),
    "the llama_batch_ext API (use llama_batch or ubatch.Batch)": (
        "llama_batch_ext_init", "llama_batch_ext_free", "llama_batch_ext_clear", "llama_batch_ext_add",
        "llama_batch_ext_add_token", "llama_batch_ext_add_embd", "llama_batch_ext_add_seq", "llama_batch_ext_set_pos",
        "llama_batch_ext_set_output_logits", "llama_batch_ext_set_output_embd", "llama_batch_ext_set_embd_token",
        "llama_batch_ext_set_embd_state", "llama_process"),
    "training (llama_opt_*)": ("llama_opt_init", "llama_opt_epoch", "llama_opt_param_filter_all"),
    "models from memory / file pointers / user tensors": ("llama_model_load_from_file_ptr",
                                                          "llama_model_init_from_user"),
    "backend samplers": ("llama_set_sampler",),
    "suppress-token lists (Whisper-style vocabularies)": ("llama_vocab_get_suppress_tokens",),
    "copying sampler state": ("llama_sampler_copy",),
}


def _make(name: str, feature: str):
    def fn(*args, **kwargs):
        raise NotImplementedError(f"{name}: {feature} is not implemented in ubatch.llama_cpp")
    fn.__name__ = fn.__qualname__ = name
    fn.ubatch_unsupported = feature          # read by tests/dropin/test_llama_cpp_names.py
    return fn


for _feature, _names in _FEATURES.items():
    for _n in _names:
        globals()[_n] = _make(_n, _feature)


@cfunc([ctypes.c_void_p], ctypes.c_bool)
def llama_get_causal_attn(ctx):
    from ubatch.llama_cpp._handles import REGISTRY
    c = REGISTRY.find(ctx, "context")
    return bool(c.ctx.causal_attn) if c is not None else False


@cfunc([ctypes.c_void_p], ctypes.c_uint32)
def llama_n_rs_seq(ctx):
    return 0


@cfunc([], ctypes.c_char_p)
def llama_version():
    return b"ubatch (llama-cpp-python 0.3.36 API)"


__all__ = [n for n in list(globals()) if n.startswith("llama_")]
