"""The OpenAI request bodies as pydantic models (strict types: a string is not a number, a bool is not an int).

Fields whose OpenAI type is a union of shapes (`prompt`, `input`, `stop`, message `content`) are checked by
`ubatch.server.prompts` so that the message says which shape was expected. Unknown fields are ignored (as
OpenAI-compatible local servers do); known fields the engine cannot honour (penalties, logit_bias,
suffix, echo, best_of != n) are refused by `check_unsupported` with the field named."""
from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

_STRICT = ConfigDict(strict=True, extra="ignore", allow_inf_nan=False)   # JSON's NaN / Infinity: 400


class StreamOptions(BaseModel):
    model_config = _STRICT
    include_usage: bool = False


class _Sampling(BaseModel):
    """What completions and chat share."""
    model_config = _STRICT
    model: str
    max_tokens: Optional[int] = Field(None, ge=1)
    temperature: Optional[float] = Field(None, ge=0.0, le=2.0)
    top_p: Optional[float] = Field(None, gt=0.0, le=1.0)
    n: int = Field(1, ge=1)
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    stop: Any = None
    seed: Optional[int] = None
    presence_penalty: Optional[float] = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: Optional[float] = Field(None, ge=-2.0, le=2.0)
    logit_bias: Optional[Dict[str, float]] = None
    user: Optional[str] = None
    # llama.cpp server extensions
    top_k: Optional[int] = Field(None, ge=0)
    min_p: Optional[float] = Field(None, ge=0.0, le=1.0)
    repeat_penalty: Optional[float] = Field(None, gt=0.0)
    # ubatch extension: the generated token ids in each choice
    return_token_ids: bool = False
    # ubatch extension: with `ubatch serve --draft`, false decodes this request without draft rows (same output)
    speculative: bool = True


class CompletionRequest(_Sampling):
    prompt: Any = None
    logprobs: Optional[int] = Field(None, ge=0, le=20)
    echo: bool = False
    suffix: Optional[str] = None
    best_of: Optional[int] = Field(None, ge=1)


class ChatMessage(BaseModel):
    model_config = _STRICT
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Any = None
    name: Optional[str] = None
    tool_calls: Optional[List[Any]] = None     # an assistant turn's calls (given back to the chat format)
    tool_call_id: Optional[str] = None         # a tool result's call id


class ChatRequest(_Sampling):
    messages: List[ChatMessage] = Field(..., min_length=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: Optional[int] = Field(None, ge=0, le=20)
    response_format: Optional[Dict[str, Any]] = None
    tools: Optional[Any] = None                 # checked by ubatch.server.tools (400 naming the field)
    tool_choice: Any = None
    parallel_tool_calls: Optional[bool] = None   # false: only the first call the model makes is returned


class EmbeddingRequest(BaseModel):
    model_config = _STRICT
    model: str
    input: Any = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Optional[int] = Field(None, ge=1)
    user: Optional[str] = None


def unsupported(req: _Sampling) -> Optional[tuple]:
    """(field, message) of the first known field asking for something the engine does not do, else None."""
    if req.presence_penalty:
        return "presence_penalty", "presence_penalty is not supported (use repeat_penalty)"
    if req.frequency_penalty:
        return "frequency_penalty", "frequency_penalty is not supported (use repeat_penalty)"
    if req.logit_bias:
        return "logit_bias", "logit_bias is not supported"
    if isinstance(req, CompletionRequest):
        if req.echo:
            return "echo", "echo is not supported"
        if req.suffix:
            return "suffix", "suffix is not supported"
        if req.best_of is not None and req.best_of != req.n:
            return "best_of", "best_of different from n is not supported"
    return None
