"""llama_cpp.server.app: create_app(settings | server_settings + model_settings) -> `ubatch serve`'s FastAPI app,
and the mapping of llama-cpp-python's settings onto ubatch's ServerConfig (to_server_config). A setting ubatch
cannot honour raises NotImplementedError naming it; the GPU / device ones are accepted and ignored."""
from __future__ import annotations

import os
from typing import List, Optional

from ubatch.llama_cpp.server.settings import ConfigFileSettings, ModelSettings, ServerSettings, Settings
from ubatch.server.config import ServerConfig

# accepted and ignored: devices ubatch does not use, knobs without an effect on CPU, logging
IGNORED = ("n_gpu_layers", "split_mode", "main_gpu", "mul_mat_q", "offload_kqv", "flash_attn", "use_mmap",
           "use_mlock", "numa", "logits_all", "embedding", "verbose", "interrupt_requests", "disable_ping_events",
           "n_threads", "last_n_tokens_size", "seed", "cache", "cache_type", "cache_size")
# refused when set (their feature is not in ubatch serve)
REFUSED = {"tensor_split": "multi-GPU tensor split", "kv_overrides": "GGUF metadata overrides",
           "rpc_servers": "RPC offload", "lora_base": "LoRA adapters", "lora_path": "LoRA adapters",
           "clip_model_path": "multimodal models", "hf_tokenizer_config_path": "Hugging Face tokenizers",
           "hf_pretrained_model_name_or_path": "Hugging Face tokenizers",
           "hf_model_repo_id": "downloading from the Hugging Face hub", "chat_template_kwargs": "chat template kwargs",
           "ssl_keyfile": "TLS (put a reverse proxy in front)", "ssl_certfile": "TLS (put a reverse proxy in front)"}
PARALLEL = 4      # sequences ubatch serve decodes together; each gets the n_ctx llama_cpp.server would give


def to_server_config(server: ServerSettings, model: ModelSettings, parallel: int = PARALLEL) -> ServerConfig:
    """ServerConfig for one model: n_ctx is per request in llama_cpp.server, so the shared KV cache is
    n_ctx * parallel; model_alias (else the model path) is the served id; draft_model (llama_cpp.server's prompt
    lookup) is ubatch's exact prompt-lookup speculative decoding with draft_model_num_pred_tokens."""
    for name, what in REFUSED.items():
        src = model if hasattr(model, name) and name in model.FIELDS else server
        if getattr(src, name, None):
            raise NotImplementedError(f"llama_cpp.server setting {name}: {what} is not supported by ubatch serve")
    if model.vocab_only:
        raise NotImplementedError("llama_cpp.server setting vocab_only: ubatch serve needs the weights")
    from ubatch.llama_cpp._constants import KV_TYPE_NAMES
    kv = {}
    for name in ("type_k", "type_v"):        # GGML_TYPE_* ids, None: llama.cpp's default f16
        t = getattr(model, name)
        if t is not None and int(t) not in KV_TYPE_NAMES:
            raise ValueError(f"llama_cpp.server setting {name}={t}: not a K/V cache type (GGML_TYPE_* ids "
                             f"{', '.join(f'{i} {n}' for i, n in sorted(KV_TYPE_NAMES.items()))})")
        kv[name] = "f16" if t is None else KV_TYPE_NAMES[int(t)]
    if (model.rope_freq_base, model.rope_freq_scale, model.rope_scaling_type, model.yarn_ext_factor) != \
            (0.0, 0.0, -1, -1.0) or model.yarn_attn_factor != 1.0:
        raise NotImplementedError("llama_cpp.server RoPE / YaRN settings: ubatch serve uses the model's RoPE "
                                  "(Llama(rope_freq_base=...) in ubatch.llama_cpp applies them)")
    if server.root_path:
        raise NotImplementedError("llama_cpp.server setting root_path: mount ubatch serve behind a proxy instead")
    if model.cache_type not in ("ram", "disk"):
        raise ValueError(f"cache_type must be 'ram' or 'disk', got {model.cache_type!r}")
    n_ctx = model.n_ctx if model.n_ctx > 0 else 4096
    return ServerConfig(model=model.model, model_id=model.model_alias or model.model, host=server.host,
                        port=server.port, parallel=parallel, n_ctx=n_ctx * parallel,
                        n_batch=max(model.n_batch, 1), n_ubatch=max(min(model.n_ubatch, model.n_batch), 1),
                        n_threads=model.n_threads_batch if model.n_threads_batch > 0 else None,
                        api_key=server.api_key, chat_format=model.chat_format,
                        draft="prompt-lookup" if model.draft_model else None,
                        draft_max=max(model.draft_model_num_pred_tokens, 1), **kv)


def resolve(settings: Optional[Settings] = None, server_settings: Optional[ServerSettings] = None,
            model_settings: Optional[List[ModelSettings]] = None):
    """(server settings, the one model's settings) as llama_cpp.server.app.create_app picks them: $CONFIG_FILE
    first, then the arguments, else Settings() from the environment."""
    config_file = os.environ.get("CONFIG_FILE")
    if config_file is not None:
        cf = ConfigFileSettings.load(config_file)
        server_settings, model_settings = cf, cf.models
    if server_settings is None and model_settings is None:
        settings = settings or Settings()
        server_settings = ServerSettings(**{k: getattr(settings, k) for k in ServerSettings.FIELDS})
        model_settings = [ModelSettings(**{k: getattr(settings, k) for k in ModelSettings.FIELDS})]
    models = list(model_settings or [])
    if len(models) != 1:
        raise NotImplementedError(f"ubatch serve serves one model per process; the settings list {len(models)} "
                                  f"(run one ubatch.llama_cpp.server per model)")
    return server_settings or ServerSettings(), models[0]


def create_app(settings: Optional[Settings] = None, server_settings: Optional[ServerSettings] = None,
               model_settings: Optional[List[ModelSettings]] = None):
    """`uvicorn --factory ubatch.llama_cpp.server.app:create_app` as with llama_cpp.server: ubatch serve's app."""
    from ubatch.server.app import create_app as ubatch_app
    from ubatch.server.state import build_state
    server, model = resolve(settings, server_settings, model_settings)
    return ubatch_app(build_state(to_server_config(server, model)))
