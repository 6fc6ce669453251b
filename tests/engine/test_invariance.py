"""Batch invariance, bitwise: a sequence's logits (prompt and greedy steps) do not depend on what else is in
the batch, on n_ubatch, on kv_unified, on n_threads, or on decoding its prompt in one call or in chunks.
The tiny model runs the full matrix; the real models (test_invariance_real.py) a cheap cross-section."""
import itertools

import numpy as np
import pytest

from invariance_driver import others_for, run_target
from ubatch.models import tiny_llama

TARGET = [1, 17, 33, 50, 8, 99, 120, 3, 64, 77, 5, 200, 18, 42, 11, 90, 150, 7, 23]
M = tiny_llama()
REF = run_target(M, TARGET, n_greedy=3)


@pytest.mark.parametrize("batched, n_ubatch, kv_unified, n_threads, chunked",
                         list(itertools.product([False, True], [1, 7, 512], [False, True], [1, 2], [False, True])))
def test_tiny_bitwise(batched, n_ubatch, kv_unified, n_threads, chunked):
    others = others_for(M.n_vocab, [3, 5, 8, 13, 2, 21, 4, 9, 6, 15, 1, 11, 7, 10, 12]) if batched else ()
    got = run_target(M, TARGET, others=others, n_ubatch=n_ubatch, kv_unified=kv_unified, n_threads=n_threads,
                     chunks=(5, 12) if chunked else (), n_greedy=3)
    for a, b in zip(REF, got):
        assert np.array_equal(a, b)


def test_tiny_f16_kv_bitwise():
    a = run_target(M, TARGET, type_kv="f16")
    b = run_target(M, TARGET, others=others_for(M.n_vocab, [4, 9, 2]), n_ubatch=7, kv_unified=True,
                   n_threads=1, chunks=(8,), type_kv="f16")
    for x, y in zip(a, b):
        assert np.array_equal(x, y)
