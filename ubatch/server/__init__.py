"""ubatch.server: an OpenAI-compatible HTTP server with continuous batching (`ubatch serve`).

Files, one job each:
  config.py      ServerConfig: limits and knobs
  errors.py      APIError -> OpenAI error object {"error": {message, type, param, code}}
  schemas.py     request bodies (pydantic, strict types); unsupported fields
  validation.py  body size limit, JSON parsing, schema errors naming the field (400 / 413 / 422)
  prompts.py     prompt / input / stop / messages shapes -> token ids (chat template)
  sampling.py    OpenAI sampling fields + server limits -> SamplingParams
  worker.py      the engine thread owning the LLMEngine; bounded admission (429), cancel, failure isolation
  generation.py  event-loop side of a request: accept, collect or stream, cancel on disconnect
  responses.py   OpenAI response / chunk bodies, logprobs
  sse.py         server-sent events framing
  auth.py        Bearer API key, constant-time compare
  metrics.py     Prometheus text metrics
  routes.py      the endpoints
  app.py         FastAPI app: gate middleware (auth, drain, metrics), error handlers, lifespan
  state.py       model + engine + worker assembled from a ServerConfig
  http_server.py uvicorn with drain-on-SIGTERM and the bound address printed
"""
from ubatch.server.config import ServerConfig

__all__ = ["ServerConfig", "APIError"]


def __getattr__(name: str):
    """APIError on first use: it needs starlette (the [server] extra), and `ubatch.server.config` must stay
    importable without it (the CLI builds `ubatch serve`'s parser from ServerConfig's defaults)."""
    if name == "APIError":
        from ubatch.server.errors import APIError
        return APIError
    raise AttributeError(f"module 'ubatch.server' has no attribute {name!r}")
