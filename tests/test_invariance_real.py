"""Batch invariance, bitwise, on the real models (Qwen2.5-Coder 0.5B, Gemma 3 270M): one prompt alone
(n_ubatch 512, per-seq KV, 2 threads, one call) vs batched with 15 others of other lengths (n_ubatch 7,
unified KV, 1 thread, the prompt in 3 calls) vs alone in 1-token ubatches (per-seq KV, 1 thread). The full
matrix of the tiny model is test_invariance.py; these pick the configurations that differ most."""
import numpy as np
import pytest

from invariance_driver import others_for, run_target
from ubatch.model import fetch
from ubatch.model.model import Model

pytestmark = pytest.mark.realmodel
OTHER_LENGTHS = [3, 5, 2, 7, 4, 6, 1, 8, 3, 2, 5, 9, 4, 6, 2]
_models = {}


def model(name):
    if name not in _models:
        _models[name] = Model.from_gguf(fetch.path(name))
    return _models[name]


@pytest.mark.parametrize("name", ["qwen2.5-0.5b", "gemma3-270m"])
def test_real_model_bitwise(name):
    m = model(name)
    target = others_for(m.n_vocab, [21], seed=5)[0]
    alone = run_target(m, target, n_ubatch=512, kv_unified=False, n_threads=2, n_greedy=2)
    batched = run_target(m, target, others=others_for(m.n_vocab, OTHER_LENGTHS), n_ubatch=7, kv_unified=True,
                         n_threads=1, chunks=(6, 13), n_greedy=2)
    for a, b in zip(alone, batched):
        assert np.array_equal(a, b)
    single = run_target(m, target[:9], n_ubatch=1, kv_unified=False, n_threads=1, n_greedy=1)
    short = run_target(m, target[:9], n_ubatch=512, kv_unified=True, n_threads=2, n_greedy=1,
                       others=others_for(m.n_vocab, OTHER_LENGTHS[:3]))
    for a, b in zip(single, short):
        assert np.array_equal(a, b)
