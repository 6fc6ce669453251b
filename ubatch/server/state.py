"""What the app serves: the model, its LLMEngine, the engine thread and the metrics, built
from a ServerConfig (`build_state`) or from an engine built elsewhere (tests, embedding)."""
from __future__ import annotations

import time
from typing import Any, Optional

from ubatch.server.config import ServerConfig
from ubatch.server.errors import APIError
from ubatch.server.metrics import Metrics
from ubatch.server.worker import EngineWorker


def load_model(name_or_path: str):
    """`ubatch.models.load`: a catalogue name or the path of a GGUF file."""
    import ubatch.models as models
    return models.load(name_or_path)


def _tokenizer(engine, model) -> Optional[Any]:
    tok = getattr(engine, "tokenizer", None)
    if tok is not None:
        return tok
    try:
        return model.tokenizer
    except Exception:   # the embedded tiny model has no vocabulary
        return None


class ServerState:
    def __init__(self, cfg: ServerConfig, engine, model=None) -> None:
        from ubatch.engine import llm_engine
        self.cfg = cfg
        self.engine = engine
        self.model = model if model is not None else engine.model
        self.tokenizer = _tokenizer(engine, self.model)
        self.n_vocab = int(self.model.n_vocab)
        self.n_embd = int(self.model.n_embd)
        self.SamplingParams = llm_engine.SamplingParams
        too_long = getattr(llm_engine, "PromptTooLongError", None)
        if too_long is None:
            import ubatch.engine as _eng
            too_long = getattr(_eng, "PromptTooLongError", None)
        self.metrics = Metrics()
        self.n_ctx_seq = int(engine.ctx.n_ctx_seq)
        self.worker = EngineWorker(engine, self.metrics, capacity=cfg.parallel + cfg.max_queue,
                                   retry_after=cfg.retry_after_seconds, embedder=self.embed,
                                   prompt_too_long=(too_long,) if too_long else ())
        self.created = int(time.time())
        self.model_id = cfg.served_id
        self.chat_format = self._chat_format(cfg)

    def _chat_format(self, cfg: ServerConfig):
        """The one chat-format resolution (ubatch.chat.resolve): --chat-template FILE, --chat-format NAME, else
        the GGUF's template (or the registry format it is), else the architecture's, else "llama-2"."""
        if self.tokenizer is None:
            return None
        template = None
        if cfg.chat_template_file:
            with open(cfg.chat_template_file, encoding="utf-8") as f:
                template = f.read()
        from ubatch.chat.resolve import resolve_for
        return resolve_for(self.tokenizer, getattr(self.model, "arch", None), chat_format=cfg.chat_format,
                           template=template)

    def embed(self, inputs):
        """Engine thread only: mean-pooled, L2-normalised embeddings (the engine's own embedding context)."""
        return self.engine.embed(inputs, pooling="mean", normalize=True)

    def check_model(self, name: str) -> None:
        if name != self.model_id:
            raise APIError(400, f"model: unknown model {name!r}; this server serves {self.model_id!r}",
                           param="model", code="model_not_found")

    def piece(self, token_id: int) -> str:
        if self.tokenizer is None:
            return f"<{token_id}>"
        return self.tokenizer.token_to_piece(int(token_id), special=True).decode("utf-8", "replace")


def build_state(cfg: ServerConfig) -> ServerState:
    from ubatch.engine.llm_engine import LLMEngine
    model = load_model(cfg.model)
    engine = LLMEngine(model, n_ctx=cfg.n_ctx, n_batch=cfg.n_batch, n_ubatch=cfg.n_ubatch, n_seq_max=cfg.parallel,
                       kv_unified=cfg.kv_unified, type_k=cfg.type_k, type_v=cfg.type_v, n_threads=cfg.n_threads,
                       enable_prefix_caching=cfg.prefix_cache,
                       prefix_cache_max_cells=cfg.prefix_cache_cells, draft=cfg.draft, draft_max=cfg.draft_max)
    return ServerState(cfg, engine, model)
