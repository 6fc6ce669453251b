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


def test_gemma_window_cache_layouts_bitwise():
    """A 600-token prompt (past the 512 window) and 2 greedy steps: the full-size sliding cache
    (swa_full, one call) and the reduced one (swa_full=False: 512 + n_ubatch cells, reused as the window
    slides; the prompt in 3 calls, n_ubatch 256) give the same bits."""
    import ubatch
    from ubatch import Batch
    m = model("gemma3-270m")
    prompt = others_for(m.n_vocab, [600], seed=9)[0]

    def run(swa_full, chunks, n_ubatch):
        ctx = ubatch.Context(m, n_ctx=1024, n_batch=1024, n_ubatch=n_ubatch, n_threads=2, swa_full=swa_full)
        cuts = [0] + chunks + [len(prompt)]
        for a, b in zip(cuts, cuts[1:]):
            ctx.decode(Batch.from_arrays(tokens=prompt[a:b], pos=list(range(a, b)), seq_ids=[0] * (b - a),
                                         output=[0] * (b - a - 1) + [1]))
        out = [ctx.get_logits_ith(-1).copy()]
        for g in range(2):
            ctx.decode(Batch.from_arrays(tokens=[int(out[-1].argmax())], pos=[len(prompt) + g], seq_ids=[0],
                                         output=[1]))
            out.append(ctx.get_logits_ith(-1).copy())
        return ctx, out

    c1, a = run(True, [], 512)
    c2, b = run(False, [200, 400], 256)
    assert c2.n_ctx_swa < c1.n_ctx_swa
    for x, y in zip(a, b):
        assert np.array_equal(x, y)


def test_runner_window_mask_matches_two_cache_memory(monkeypatch):
    """The runner's own window test (place.swa None: SWA layers on the full cache's placement with
    0 <= p_q - p_k < n_swa) gives the bits of the two-cache memory; a smaller window changes the result.
    The model's window is narrowed to 24 so that a 64-token prompt crosses it."""
    import ubatch
    import ubatch.engine.context as context_mod
    from ubatch import Batch
    m = Model.from_gguf(fetch.path("gemma3-270m"))
    m.hparams.n_swa = 24
    prompt = others_for(m.n_vocab, [64], seed=3)[0]

    def run():
        ctx = ubatch.Context(m, n_ctx=256, n_batch=64, n_ubatch=16, n_threads=2, swa_full=False)
        ctx.decode(Batch.from_arrays(tokens=prompt, pos=list(range(64)), seq_ids=[0] * 64, output=[1] * 64))
        return ctx, ctx.get_logits().copy()

    c_two, two = run()
    assert c_two._runner_swa and len(c_two._runner.stores) == 2
    real_accepts = context_mod._accepts
    monkeypatch.setattr(context_mod, "_accepts", lambda fn, name: False if name == "kv_size_swa"
                        else real_accepts(fn, name))
    c_one, one = run()
    assert not c_one._runner_swa and len(c_one._runner.stores) == 1
    assert np.array_equal(two, one)
    m.hparams.n_swa = 512
    _, wide = run()
    assert np.array_equal(wide[:24], one[:24]) and not np.array_equal(wide[24:], one[24:])
