"""ServerConfig: every limit and knob of `ubatch serve`, with the defaults the CLI shows."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional


@dataclass
class ServerConfig:
    model: str = "tiny-llama"              # name or GGUF path given to --model
    model_id: Optional[str] = None         # the id /v1/models reports and requests must name (default: model)
    host: str = "127.0.0.1"                # loopback only unless asked otherwise
    port: int = 8080
    parallel: int = 8                      # sequences decoded together (engine n_seq_max)
    n_ctx: int = 4096                      # total context (split over the parallel sequences as llama.cpp does)
    n_batch: int = 512
    n_ubatch: int = 512
    n_threads: Optional[int] = None
    kv_unified: bool = True                # one stream shared by all sequences (llama.cpp server's default)
    type_k: str = "f16"                    # K cache element type (llama.cpp's --cache-type-k names)
    type_v: str = "f16"                    # V cache element type (a quantised V: flash attention, always on here)
    prefix_cache: bool = True              # automatic prefix caching across requests (--no-prefix-cache)
    prefix_cache_cells: Optional[int] = None   # at most this many KV cells held by the prefix cache
    api_key: Optional[str] = None          # Bearer token; None: no auth
    max_queue: int = 64                    # requests waiting beyond the `parallel` running ones before 429
    max_body_bytes: int = 1 << 20          # request body limit (413 beyond)
    max_tokens_limit: int = 4096           # largest max_tokens a request may ask for
    max_n: int = 8                         # largest n (choices per prompt)
    max_prompts: int = 16                  # largest number of prompts in one /v1/completions request
    max_embedding_inputs: int = 64         # largest number of inputs in one /v1/embeddings request
    grace_seconds: float = 10.0            # SIGTERM: how long in-flight requests may finish
    retry_after_seconds: int = 1           # Retry-After of a 429
    chat_template_file: Optional[str] = None   # Jinja chat template replacing the model's (or the fallback)
    draft: Optional[str] = None            # speculative decoding: "prompt-lookup" or a draft GGUF / model name
    draft_max: int = 16                    # the longest draft
    chat_format: Optional[str] = None          # a named chat format (ubatch.chat.formats) instead of the model's
    chat_parse_special: bool = False       # parse special-token text inside message contents (llama.cpp's way)
    allowed_hosts: Optional[List[str]] = None  # Host names accepted; None: loopback names when bound to loopback
    cors_origins: List[str] = field(default_factory=list)   # Origins allowed cross-site ("*": any)
    header_timeout: float = 10.0           # seconds a connection may take to send a request's headers
    body_timeout: float = 30.0             # seconds a request may take to send its body (408 beyond)

    @property
    def served_id(self) -> str:
        if self.model_id:
            return self.model_id
        import os
        return os.path.splitext(os.path.basename(self.model))[0] if os.sep in self.model else self.model
