"""The engine layer: the decode loop (Context) with the model runner (model_runner: the forward of one ubatch) and
the K/V data it owns (kv_store), and text generation with continuous batching (LLMEngine: its scheduler.py,
sequence.py, sampling.py, detok.py, embeddings.py; LLM on top)."""
from ubatch.engine.context import Context
from ubatch.engine.llm_engine import (CompletionOutput, LLMEngine, PromptTooLongError, RequestOutput,
                                      SamplingParams)
from ubatch.engine.llm import LLM, Completion

__all__ = ["Completion", "CompletionOutput", "Context", "LLM", "LLMEngine", "PromptTooLongError", "RequestOutput",
           "SamplingParams"]
