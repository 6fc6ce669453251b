"""ubatch: llama.cpp's batch planner — batch validation, split strategies, KV-cache placement and the
decode loop — with the hot paths in C (CFFI)."""
from ubatch.errors import BatchError, KVCacheFullError, SplitError, UbatchError
from ubatch.batch import Batch
from ubatch.allocator import BatchAllocator
from ubatch.ubatch_view import UBatch
from ubatch.kv_cache import KVCache
from ubatch.context import Context
from ubatch.placement import ComputeResult, Placement
from ubatch.model import Model
from ubatch import models

__all__ = ["Batch", "BatchAllocator", "BatchError", "ComputeResult", "Context", "KVCacheFullError", "KVCache",
           "Model", "Placement", "models", "SplitError", "UBatch", "UbatchError"]
