"""The memory layer (llama_memory_i): KV caches, their placement of ubatches into cells, and the KQ mask."""
from ubatch.memory.placement import ComputeResult, Placement
from ubatch.memory.kv_cache import KVCache

__all__ = ["ComputeResult", "KVCache", "Placement"]
