"""Prefix reuse in the drop-in's batched paths (`Llama(..., n_seq_max=N)`, the engine's prefix cache) on the tiny
model with a byte vocabulary: completions are identical with and without it (greedy and seeded, n > 1, prompts
sharing a long prefix, a second turn that re-sends the first), the cached prefixes are reused (hits, tokens saved),
a full KV cache evicts them instead of failing (also for the single-sequence path), and a cleared KV cache does not
fool the index. Single-sequence Llama keeps llama-cpp-python's reuse of the previous call's prefix (its own tests)."""
import numpy as np
import pytest

import ubatch.llama_cpp as L
from ubatch.llama_cpp import _model
from ubatch.llama_cpp.llama_cache import token_prefix
from ubatch.models import TINY_LLAMA_PATH

from byte_vocab import ByteVocab


@pytest.fixture(autouse=True)
def byte_vocab(monkeypatch):
    monkeypatch.setattr(_model, "_load_tokenizer", lambda path, raw: ByteVocab())


def make(**kw):
    kw.setdefault("n_ctx", 1024)
    kw.setdefault("verbose", False)
    return L.Llama(TINY_LLAMA_PATH, **kw)


SYSTEM = "You are a terse assistant; the notes follow. " * 3


@pytest.mark.parametrize("sampling", [dict(temperature=0.0), dict(temperature=0.9, seed=5)], ids=["greedy", "seeded"])
def test_identical_with_and_without_and_reused(sampling):
    prompts = [SYSTEM + q for q in ("first?", "second one?", "3?", "the fourth question")]
    res = {}
    for on in (False, True):
        llm = make(n_seq_max=2, n_batch=64, prefix_cache=on)
        a = llm.create_completion(prompts, max_tokens=8, **sampling)
        b = llm.create_completion(prompts[:2], max_tokens=6, n=2, **sampling)       # all cached by now
        turn2 = [prompts[0] + a["choices"][0]["text"] + " and then?"]
        c = llm.create_completion(turn2, max_tokens=6, **sampling)
        res[on] = [[ch["text"] for ch in r["choices"]] for r in (a, b, c)], llm
    assert res[True][0] == res[False][0]
    pre = res[True][1]._parallel.prefix
    assert res[False][1]._parallel.prefix is None
    assert pre.hits >= 5 and pre.tokens_saved >= 5 * len(SYSTEM)


def test_full_cache_evicts_cached_prefixes_instead_of_failing():
    """256 cells: the cached entries of earlier calls must make room for later ones (batched and single)."""
    llm = make(n_ctx=256, n_seq_max=2, n_batch=64)
    ref = make(n_ctx=256, n_seq_max=2, n_batch=64, prefix_cache=False)
    for k in range(6):
        ps = [f"prompt number {k} " * 4 + "a", f"another prompt {k} " * 4 + "b"]
        assert ([c["text"] for c in llm.create_completion(ps, max_tokens=8, temperature=0.0)["choices"]]
                == [c["text"] for c in ref.create_completion(ps, max_tokens=8, temperature=0.0)["choices"]])
    pre = llm._parallel.prefix
    assert pre.cached_cells() > 0 and pre.evictions > 0
    ev = pre.evictions
    # the single-sequence path (stream=True) on the same context: 200 tokens fit only once the cache gives way
    long = "z" * 200
    got = "".join(c["choices"][0]["text"] for c in llm.create_completion(long, max_tokens=4, temperature=0.0,
                                                                          stream=True))
    want = "".join(c["choices"][0]["text"] for c in ref.create_completion(long, max_tokens=4, temperature=0.0,
                                                                          stream=True))
    assert got == want and pre.evictions > ev


def test_cleared_kv_cache_does_not_fool_the_index():
    llm = make(n_seq_max=2, n_batch=64)
    ref = make(n_seq_max=2, n_batch=64, prefix_cache=False)
    p = [SYSTEM + "once", SYSTEM + "twice"]
    llm.create_completion(p, max_tokens=4, temperature=0.0)
    L.llama_memory_clear(L.llama_get_memory(llm.ctx), True)        # behind the index's back
    assert ([c["text"] for c in llm.create_completion(p, max_tokens=4, temperature=0.0)["choices"]]
            == [c["text"] for c in ref.create_completion(p, max_tokens=4, temperature=0.0)["choices"]])


def test_token_prefix_is_vectorised_and_exact():
    a = list(range(100))
    assert token_prefix(a, a[:40] + [7]) == 40 and token_prefix(a, a) == 100 and token_prefix([], a) == 0
    assert token_prefix(np.arange(5), (0, 1, 2, 9)) == 3


def test_load_state_resets_the_cached_prefixes():
    """Llama.load_state replaces the whole KV cache: the batched paths' index starts over (no stale holder)."""
    llm = make(n_seq_max=2, n_batch=64)
    ref = make(n_seq_max=2, n_batch=64, prefix_cache=False)
    p = [SYSTEM + "A", SYSTEM + "B"]
    llm("warm", max_tokens=2, temperature=0.0)
    st = llm.save_state()
    llm.create_completion(p, max_tokens=4, temperature=0.0)
    pre = llm._parallel.prefix
    assert pre.stats()["prefix_cache_entries"]
    llm.load_state(st)
    assert pre.stats()["prefix_cache_entries"] == 0 and len(pre.holders) == 256 - 2
    assert ([c["text"] for c in llm.create_completion(p, max_tokens=4, temperature=0.0)["choices"]]
            == [c["text"] for c in ref.create_completion(p, max_tokens=4, temperature=0.0)["choices"]])
