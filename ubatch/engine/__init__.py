"""The engine layer: the decode loop (Context), token-level continuous batching (request / scheduler / batcher,
re-exported by serve.py) and text generation (LLMEngine, LLM, sampling)."""
from ubatch.engine.context import Context
from ubatch.engine.llm_engine import (CompletionOutput, LLMEngine, PromptTooLongError, RequestOutput,
                                      SamplingParams)
from ubatch.engine.llm import LLM, Completion

__all__ = ["Completion", "CompletionOutput", "Context", "LLM", "LLMEngine", "PromptTooLongError", "RequestOutput",
           "SamplingParams"]
