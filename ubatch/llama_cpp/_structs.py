"""ctypes types of the low-level API: the scalar aliases, opaque handle types, callback types and the structs
with llama-cpp-python 0.3.36's exact `_fields_` (field order and C types), so code that builds, passes,
reads or `ctypes.sizeof`s them behaves as with llama-cpp-python. Defaults live in `_core` (*_default_params)."""
from __future__ import annotations

import ctypes

# scalar aliases
llama_token = ctypes.c_int32
llama_token_p = ctypes.POINTER(llama_token)
llama_pos = ctypes.c_int32
llama_seq_id = ctypes.c_int32

# opaque handles: ints (addresses) or None, as ctypes returns c_void_p
llama_vocab_p = llama_vocab_p_ctypes = ctypes.c_void_p
llama_model_p = llama_model_p_ctypes = ctypes.c_void_p
llama_context_p = llama_context_p_ctypes = ctypes.c_void_p
llama_memory_t = llama_memory_t_ctypes = ctypes.c_void_p
llama_kv_cache_p = llama_kv_cache_p_ctypes = ctypes.c_void_p
llama_adapter_lora_p = llama_adapter_lora_p_ctypes = ctypes.c_void_p
llama_batch_ext_p = ctypes.c_void_p
llama_sampler_context_t = ctypes.c_void_p

# callbacks
llama_progress_callback = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_float, ctypes.c_void_p)
ggml_backend_sched_eval_callback = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.c_bool, ctypes.c_void_p)
ggml_abort_callback = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p)
ggml_log_callback = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


class llama_token_data(ctypes.Structure):
    _fields_ = [("id", llama_token), ("logit", ctypes.c_float), ("p", ctypes.c_float)]


llama_token_data_p = ctypes.POINTER(llama_token_data)


class llama_token_data_array(ctypes.Structure):
    _fields_ = [("data", llama_token_data_p), ("size", ctypes.c_size_t), ("selected", ctypes.c_int64),
                ("sorted", ctypes.c_bool)]


llama_token_data_array_p = ctypes.POINTER(llama_token_data_array)


class llama_batch(ctypes.Structure):
    _fields_ = [("n_tokens", ctypes.c_int32), ("token", ctypes.POINTER(llama_token)),
                ("embd", ctypes.POINTER(ctypes.c_float)), ("pos", ctypes.POINTER(llama_pos)),
                ("n_seq_id", ctypes.POINTER(ctypes.c_int32)),
                ("seq_id", ctypes.POINTER(ctypes.POINTER(llama_seq_id))), ("logits", ctypes.POINTER(ctypes.c_int8))]


llama_batch_p = ctypes.POINTER(llama_batch)


class llama_model_kv_override_value(ctypes.Union):
    _fields_ = [("val_i64", ctypes.c_int64), ("val_f64", ctypes.c_double), ("val_bool", ctypes.c_bool),
                ("val_str", ctypes.c_char * 128)]


class llama_model_kv_override(ctypes.Structure):
    _fields_ = [("tag", ctypes.c_int), ("key", ctypes.c_char * 128), ("value", llama_model_kv_override_value)]


class llama_model_tensor_buft_override(ctypes.Structure):
    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


class llama_model_params(ctypes.Structure):
    _fields_ = [("devices", ctypes.c_void_p), ("tensor_buft_overrides", ctypes.c_void_p),
                ("n_gpu_layers", ctypes.c_int32), ("split_mode", ctypes.c_int), ("load_mode", ctypes.c_int),
                ("lazy_mode", ctypes.c_int), ("main_gpu", ctypes.c_int32),
                ("tensor_split", ctypes.POINTER(ctypes.c_float)), ("progress_callback", llama_progress_callback),
                ("progress_callback_user_data", ctypes.c_void_p),
                ("kv_overrides", ctypes.POINTER(llama_model_kv_override)), ("vocab_only", ctypes.c_bool),
                ("check_tensors", ctypes.c_bool), ("use_extra_bufts", ctypes.c_bool), ("no_host", ctypes.c_bool),
                ("no_alloc", ctypes.c_bool), ("load_mtp", ctypes.c_bool)]


class llama_sampler_seq_config(ctypes.Structure):
    _fields_ = [("seq_id", llama_seq_id), ("sampler", ctypes.c_void_p)]


class llama_context_params(ctypes.Structure):
    _fields_ = [("n_ctx", ctypes.c_uint32), ("n_batch", ctypes.c_uint32), ("n_ubatch", ctypes.c_uint32),
                ("n_seq_max", ctypes.c_uint32), ("n_rs_seq", ctypes.c_uint32), ("n_outputs_max", ctypes.c_uint32),
                ("n_outputs_max_per_seq", ctypes.c_uint32), ("n_threads", ctypes.c_int32),
                ("n_threads_batch", ctypes.c_int32), ("ctx_type", ctypes.c_int), ("rope_scaling_type", ctypes.c_int),
                ("pooling_type", ctypes.c_int), ("attention_type", ctypes.c_int), ("flash_attn_type", ctypes.c_int),
                ("rope_freq_base", ctypes.c_float), ("rope_freq_scale", ctypes.c_float),
                ("yarn_ext_factor", ctypes.c_float), ("yarn_attn_factor", ctypes.c_float),
                ("yarn_beta_fast", ctypes.c_float), ("yarn_beta_slow", ctypes.c_float),
                ("yarn_orig_ctx", ctypes.c_uint32), ("defrag_thold", ctypes.c_float),
                ("cb_eval", ggml_backend_sched_eval_callback), ("cb_eval_user_data", ctypes.c_void_p),
                ("type_k", ctypes.c_int), ("type_v", ctypes.c_int), ("abort_callback", ggml_abort_callback),
                ("abort_callback_data", ctypes.c_void_p), ("embeddings", ctypes.c_bool),
                ("offload_kqv", ctypes.c_bool), ("no_perf", ctypes.c_bool), ("op_offload", ctypes.c_bool),
                ("swa_full", ctypes.c_bool), ("kv_unified", ctypes.c_bool),
                ("samplers", ctypes.POINTER(llama_sampler_seq_config)), ("n_samplers", ctypes.c_size_t),
                ("ctx_other", ctypes.c_void_p)]


class llama_model_quantize_params(ctypes.Structure):
    _fields_ = [("nthread", ctypes.c_int32), ("ftype", ctypes.c_int), ("output_tensor_type", ctypes.c_int),
                ("token_embedding_type", ctypes.c_int), ("allow_requantize", ctypes.c_bool),
                ("quantize_output_tensor", ctypes.c_bool), ("only_copy", ctypes.c_bool), ("pure", ctypes.c_bool),
                ("keep_split", ctypes.c_bool), ("dry_run", ctypes.c_bool), ("imatrix", ctypes.c_void_p),
                ("kv_overrides", ctypes.c_void_p), ("tt_overrides", ctypes.c_void_p),
                ("prune_layers", ctypes.POINTER(ctypes.c_int32)), ("max_buf_size", ctypes.c_size_t)]


class llama_logit_bias(ctypes.Structure):
    _fields_ = [("token", llama_token), ("bias", ctypes.c_float)]


llama_logit_bias_p = ctypes.POINTER(llama_logit_bias)


class llama_sampler_chain_params(ctypes.Structure):
    _fields_ = [("no_perf", ctypes.c_bool)]


class llama_chat_message(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


class llama_perf_context_data(ctypes.Structure):
    _fields_ = [("t_start_ms", ctypes.c_double), ("t_load_ms", ctypes.c_double), ("t_p_eval_ms", ctypes.c_double),
                ("t_eval_ms", ctypes.c_double), ("n_p_eval", ctypes.c_int32), ("n_eval", ctypes.c_int32),
                ("n_reused", ctypes.c_int32)]


class llama_perf_sampler_data(ctypes.Structure):
    _fields_ = [("t_sample_ms", ctypes.c_double), ("n_sample", ctypes.c_int32)]


class llama_embd(ctypes.Structure):
    _fields_ = [("data", ctypes.POINTER(ctypes.c_float)), ("n_rows", ctypes.c_int32), ("n_embd", ctypes.c_int32)]


# custom samplers (llama_sampler_init(iface, ctx)): the interface table of Python callbacks
class llama_sampler_i(ctypes.Structure):
    pass


class llama_sampler(ctypes.Structure):
    _fields_ = [("iface", ctypes.POINTER(llama_sampler_i)), ("ctx", llama_sampler_context_t)]


llama_sampler_p = llama_sampler_p_ctypes = ctypes.c_void_p
_smpl = ctypes.POINTER(llama_sampler)
llama_sampler_i_name = ctypes.CFUNCTYPE(ctypes.c_char_p, _smpl)
llama_sampler_i_accept = ctypes.CFUNCTYPE(None, _smpl, llama_token)
llama_sampler_i_apply = ctypes.CFUNCTYPE(None, _smpl, llama_token_data_array_p)
llama_sampler_i_reset = ctypes.CFUNCTYPE(None, _smpl)
llama_sampler_i_clone = ctypes.CFUNCTYPE(_smpl, _smpl)
llama_sampler_i_free = ctypes.CFUNCTYPE(None, _smpl)
_backend = ctypes.CFUNCTYPE(ctypes.c_bool, _smpl, ctypes.c_void_p)
llama_sampler_i._fields_ = [("name", llama_sampler_i_name), ("accept", llama_sampler_i_accept),
                            ("apply", llama_sampler_i_apply), ("reset", llama_sampler_i_reset),
                            ("clone", llama_sampler_i_clone), ("free", llama_sampler_i_free),
                            ("backend_init", _backend), ("backend_accept", ctypes.c_void_p),
                            ("backend_apply", ctypes.c_void_p), ("backend_set_input", ctypes.c_void_p),
                            ("backend_reset", ctypes.c_void_p), ("copy_state", ctypes.c_void_p)]

__all__ = [n for n in list(globals()) if n.startswith(("llama_", "ggml_"))]
