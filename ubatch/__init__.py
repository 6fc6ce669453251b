"""ubatch: llama.cpp's batch planner — batch validation, split strategies, KV-cache placement and the
decode loop — with the hot paths in C (CFFI)."""
from ubatch.common.errors import BatchError, CallOrderError, KVCacheFullError, RewindError, SplitError, UbatchError
from ubatch.batch.container import Batch
from ubatch.batch.allocator import BatchAllocator
from ubatch.batch.ubatch_view import UBatch
from ubatch.memory.kv_cache import KVCache
from ubatch.memory.iswa import KVCacheISWA
from ubatch.engine.context import Context
from ubatch.engine.llm import LLM, Completion
from ubatch.memory.placement import ComputeResult, Placement
from ubatch.model.model import Model
from ubatch import models
from ubatch.tokenizer import Tokenizer

__all__ = ["Batch", "BatchAllocator", "BatchError", "CallOrderError", "Completion", "ComputeResult", "Context",
           "KVCache", "KVCacheFullError", "KVCacheISWA", "LLM", "Model", "models", "Placement", "RewindError",
           "SplitError", "Tokenizer", "UBatch", "UbatchError"]
