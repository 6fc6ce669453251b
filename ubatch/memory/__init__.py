"""The memory layer (llama_memory_i): the memory protocol, KV caches (one cache; the two-cache sliding-window
memory), their placement of ubatches into cells, and the KQ mask."""
from ubatch.memory.placement import ComputeResult, Placement
from ubatch.memory.protocol import MemoryPlan, MemoryUpdate
from ubatch.memory.kv_cache import KVCache
from ubatch.memory.iswa import KVCacheISWA

__all__ = ["ComputeResult", "KVCache", "KVCacheISWA", "MemoryPlan", "MemoryUpdate", "Placement"]
