"""ubatch: llama.cpp's batch planner — batch validation, split strategies, KV-cache placement and the
decode loop — with the hot paths in C (CFFI)."""
from ubatch.errors import BatchError, KVCacheFullError, SplitError, UbatchError
from ubatch.batch import Batch
from ubatch.allocator import BatchAllocator
from ubatch.ubatch_view import UBatch

__all__ = ["Batch", "BatchAllocator", "BatchError", "KVCacheFullError", "SplitError", "UBatch", "UbatchError"]
