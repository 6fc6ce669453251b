"""OpenAI sampling fields -> the engine's SamplingParams, with the server's limits (400 naming the field).

OpenAI's defaults: temperature 1, top_p 1, no top-k / min-p; llama.cpp's extensions (top_k, min_p,
repeat_penalty) are honoured when given. temperature 0 is greedy."""
from __future__ import annotations

from typing import Optional

from ubatch.server.config import ServerConfig
from ubatch.server.errors import APIError
from ubatch.server.prompts import stop_list
from ubatch.server.schemas import _Sampling, unsupported


def sampling_params(req: _Sampling, cfg: ServerConfig, SamplingParams, *, max_tokens: Optional[int],
                    default_max_tokens: int, logprobs: Optional[int]):
    bad = unsupported(req)
    if bad is not None:
        raise APIError(400, bad[1], param=bad[0], code="unsupported_parameter")
    if max_tokens is None:
        max_tokens = min(default_max_tokens, cfg.max_tokens_limit)
    if max_tokens > cfg.max_tokens_limit:
        raise APIError(400, f"max_tokens = {max_tokens} exceeds this server's limit of {cfg.max_tokens_limit}",
                       param="max_tokens", code="max_tokens_exceeded")
    if req.n > cfg.max_n:
        raise APIError(400, f"n = {req.n} exceeds this server's limit of {cfg.max_n}", param="n")
    kw = dict(max_tokens=int(max_tokens),
              temperature=1.0 if req.temperature is None else float(req.temperature),
              top_k=0 if req.top_k is None else int(req.top_k),
              top_p=1.0 if req.top_p is None else float(req.top_p),
              min_p=0.0 if req.min_p is None else float(req.min_p),
              repeat_penalty=1.0 if req.repeat_penalty is None else float(req.repeat_penalty),
              seed=req.seed, stop=stop_list(req.stop), n=int(req.n), logprobs=logprobs,
              speculative=bool(getattr(req, "speculative", True)))
    rf = getattr(req, "response_format", None)
    if rf is not None:
        from ubatch.server.response_format import grammar_fields
        kw.update(grammar_fields(rf))
    try:
        return SamplingParams(**kw)
    except (TypeError, ValueError) as e:
        raise APIError(400, str(e), param=str(e).split(" ", 1)[0].strip(":=,") or None)
