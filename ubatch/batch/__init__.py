"""The batch layer (llama_batch_allocr): the input container, validation and the three split strategies.

container.py  Batch (rows of token/embedding, positions, seq-id sets, output flags)
allocator.py  BatchAllocator (C: init, split_simple / split_equal / split_seq)
ubatch_view.py UBatch (numpy views of one micro-batch owned by C)
reference.py  the readable pure-Python oracle of the allocator
workload.py   batch layouts used by the CLI and the benchmarks
debug.py      UBATCH_DEBUG dumps in llama.cpp's format
"""
from ubatch.batch.container import KIND_EMBD, KIND_TOKEN, Batch  # noqa: F401
from ubatch.batch.ubatch_view import UBatch
from ubatch.batch.allocator import BatchAllocator

__all__ = ["Batch", "BatchAllocator", "UBatch"]
