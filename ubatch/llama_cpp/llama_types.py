"""The OpenAI-style TypedDicts of llama-cpp-python's llama_types (names only matter for annotations)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Union

try:
    from typing import TypedDict
except ImportError:  # pragma: no cover
    from typing_extensions import TypedDict


class CompletionLogprobs(TypedDict):
    text_offset: List[int]
    token_logprobs: List[Optional[float]]
    tokens: List[str]
    top_logprobs: List[Optional[Dict[str, float]]]


class CompletionChoice(TypedDict):
    text: str
    index: int
    logprobs: Optional[CompletionLogprobs]
    finish_reason: Optional[str]


class CompletionUsage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CreateCompletionResponse(TypedDict, total=False):
    id: str
    object: str
    created: int
    model: str
    choices: List[CompletionChoice]
    usage: CompletionUsage


CreateCompletionStreamResponse = CreateCompletionResponse
Completion = CreateCompletionResponse
CompletionChunk = CreateCompletionResponse


class Embedding(TypedDict):
    index: int
    object: str
    embedding: Union[List[float], List[List[float]]]


class EmbeddingUsage(TypedDict):
    prompt_tokens: int
    total_tokens: int


class CreateEmbeddingResponse(TypedDict):
    object: str
    model: str
    data: List[Embedding]
    usage: EmbeddingUsage


class ChatCompletionRequestMessage(TypedDict, total=False):
    role: str
    content: Optional[str]


class ChatCompletionResponseMessage(TypedDict, total=False):
    role: str
    content: Optional[str]


class ChatCompletionResponseChoice(TypedDict):
    index: int
    message: ChatCompletionResponseMessage
    logprobs: Optional[Any]
    finish_reason: Optional[str]


class CreateChatCompletionResponse(TypedDict):
    id: str
    object: str
    created: int
    model: str
    choices: List[ChatCompletionResponseChoice]
    usage: CompletionUsage


CreateChatCompletionStreamResponse = Dict[str, Any]
ChatCompletionRequestResponseFormat = Dict[str, Any]
ChatCompletionTool = Dict[str, Any]
ChatCompletionToolChoiceOption = Union[str, Dict[str, Any]]
ChatCompletionFunction = Dict[str, Any]
ChatCompletionRequestFunctionCall = Union[str, Dict[str, Any]]
JsonType = Union[None, int, str, bool, List[Any], Dict[str, Any]]
