"""`Llama.set_cache(LlamaRAMCache / LlamaDiskCache)` served from holders of shared KV cells
(ubatch/llama_cpp/_cache_holders.py) on the tiny model with a byte vocabulary: completions (greedy, seeded
sampling, logprobs with echo) identical to a Llama without a cache and to the same cache restored by load_state
(Llama(prefix_cache=False)); the cache's observable side (keys, their order, cache_size) the same either way;
holders follow the entries the cache evicts, give way when the KV cache is full, and are not fooled by an entry
replaced behind their back or a cleared KV cache."""
import numpy as np
import pytest

import ubatch.llama_cpp as L
from ubatch.llama_cpp import _model
from ubatch.models import TINY_LLAMA_PATH

from test_llama_cpp_llama import ByteVocab


@pytest.fixture(autouse=True)
def byte_vocab(monkeypatch):
    monkeypatch.setattr(_model, "_load_tokenizer", lambda path, raw: ByteVocab())


def make(**kw):
    kw.setdefault("n_ctx", 512)
    kw.setdefault("verbose", False)
    return L.Llama(TINY_LLAMA_PATH, **kw)


SYSTEM = "Notes: the cat sat on the mat; keep answers short. " * 2
QUESTIONS = ["Q: who sat?", "Q: on what?", "Q: who sat?", "Q: why so?"]


def _run(llm, kinds, other=b"zz unrelated zz"):
    """A workload: shared-prefix questions with the context moved elsewhere in between (so the cache is what
    brings the prefix back), then a multi-turn chat that re-sends the conversation."""
    out = []
    for i, q in enumerate(QUESTIONS):
        llm.reset()
        llm.eval(list(other))
        for kind in kinds:
            kw = dict(max_tokens=6, temperature=0.0) if kind == "greedy" else \
                dict(max_tokens=6, temperature=0.8, seed=11 + i) if kind == "seeded" else \
                dict(max_tokens=4, temperature=0.0, logprobs=3, echo=True)
            r = llm(SYSTEM + q, **kw)["choices"][0]
            out.append((r["text"], r["logprobs"]))
    conv = SYSTEM
    for turn in ("U: hi", "U: more", "U: again"):
        conv += turn
        r = llm(conv, max_tokens=5, temperature=0.0)["choices"][0]
        out.append((r["text"], None))
        conv += r["text"] + " "
        llm.reset()
        llm.eval(list(other))
    return out


@pytest.mark.parametrize("logits_all", [False, True])
def test_ram_cache_outputs_identical_and_cells_reused(logits_all):
    kinds = ["greedy", "seeded"] + (["logprobs"] if logits_all else [])
    want = _run(make(logits_all=logits_all), kinds)
    held, restored = make(logits_all=logits_all), make(logits_all=logits_all, prefix_cache=False)
    held.set_cache(L.LlamaRAMCache(capacity_bytes=1 << 34))
    restored.set_cache(L.LlamaRAMCache(capacity_bytes=1 << 34))
    assert _run(held, kinds) == want
    assert _run(restored, kinds) == want
    h = held._holders
    assert h is not None and h.hits >= len(QUESTIONS) and h.tokens_saved > h.hits * len(SYSTEM) // 2
    assert restored._holders is None
    # the cache looks the same from outside: the same keys in the same LRU order, the same sizes
    assert list(held.cache.cache_state) == list(restored.cache.cache_state)
    assert held.cache.cache_size == restored.cache.cache_size
    for k in h.owner:                                 # every holder entry is a cache entry
        assert k in held.cache.cache_state
    for hid, toks in h.tokens.items():                # each holder holds exactly its tokens at 0..
        assert h.base.seq_pos_min(hid) == 0 and h.base.seq_pos_max(hid) == len(toks) - 1


def test_cache_capacity_eviction_prunes_holders_and_kv_full_evicts_them():
    want = _run(make(n_ctx=160), ["greedy"])
    llm = make(n_ctx=160)                              # ~3 prompts' cells: holders must give way
    one = len(make(n_ctx=160).save_state().llama_state)
    llm.set_cache(L.LlamaRAMCache(capacity_bytes=int(2.5 * one)))
    ref = make(n_ctx=160, prefix_cache=False)
    ref.set_cache(L.LlamaRAMCache(capacity_bytes=int(2.5 * one)))
    assert _run(llm, ["greedy"]) == want == _run(ref, ["greedy"])
    h = llm._holders
    assert len(llm.cache.cache_state) <= 2 and list(llm.cache.cache_state) == list(ref.cache.cache_state)
    assert set(h.owner) <= set(llm.cache.cache_state) and h.evictions > 0


def test_replaced_entry_and_cleared_kv_are_not_served_from_holders():
    llm = make()
    llm.set_cache(L.LlamaRAMCache(capacity_bytes=1 << 34))
    base = make()
    a = llm(SYSTEM + "Q: one", max_tokens=4, temperature=0.0)["choices"][0]["text"]
    assert a == base(SYSTEM + "Q: one", max_tokens=4, temperature=0.0)["choices"][0]["text"]
    (key,) = list(llm.cache.cache_state)
    # another state under the same key (a user's own write): the holder's cells are no longer that entry's
    other = make()
    other.eval(list(b"something else entirely"))
    llm.cache[key] = other.save_state()
    llm.reset()
    llm.eval(list(b"xx"))
    hits = llm._holders.hits
    got = llm(SYSTEM + "Q: two", max_tokens=4, temperature=0.0)["choices"][0]["text"]
    ref = make(prefix_cache=False)
    ref.set_cache(L.LlamaRAMCache(capacity_bytes=1 << 34))
    ref(SYSTEM + "Q: one", max_tokens=4, temperature=0.0)
    ref.cache[key] = other.save_state()
    ref.reset()
    ref.eval(list(b"xx"))
    assert got == ref(SYSTEM + "Q: two", max_tokens=4, temperature=0.0)["choices"][0]["text"]
    assert llm._holders.hits == hits
    # the KV cache cleared behind the holders' back: found stale, nothing served from them
    llm(SYSTEM + "Q: three", max_tokens=4, temperature=0.0)
    llm._ctx.kv_cache_clear()
    llm.reset()
    hits = llm._holders.hits
    got = llm(SYSTEM + "Q: three", max_tokens=4, temperature=0.0)["choices"][0]["text"]
    assert got == base(SYSTEM + "Q: three", max_tokens=4, temperature=0.0)["choices"][0]["text"]
    assert llm._holders.hits == hits


def test_disk_cache_served_without_reading_and_state_load_drops_holders(tmp_path):
    want = _run(make(), ["greedy", "seeded"])
    llm, ref = make(), make(prefix_cache=False)
    llm.set_cache(L.LlamaDiskCache(cache_dir=str(tmp_path / "a")))
    ref.set_cache(L.LlamaDiskCache(cache_dir=str(tmp_path / "b")))
    assert _run(llm, ["greedy", "seeded"]) == want == _run(ref, ["greedy", "seeded"])
    assert llm._holders.hits >= len(QUESTIONS)
    assert list(llm.cache._keys) == list(ref.cache._keys)
    # a state saved beside holders carries their cells; loading it keeps seq 0 only, here and in another Llama
    st = llm.save_state()
    for dst in (llm, make()):
        dst.set_cache(L.LlamaRAMCache())
        dst.load_state(st)
        kv = dst._context_obj().kv
        assert all(kv.seq_pos_max(s) == -1 for s in range(1, kv.n_seq))
        assert kv.seq_pos_max(0) == st.n_tokens - 1


@pytest.mark.realmodel
@pytest.mark.parametrize("name", ["qwen2.5-0.5b", "gemma3-270m"])
def test_real_models_ram_cache_identical(name, monkeypatch):
    """Both real vocabularies and architectures (Gemma 3: full + sliding-window caches, window 512: the second
    user's prompts run past it), two users taking turns: the same completions (one user greedy, the other
    seeded) without a cache and with the cache's holders (a 2 GB cache: about three saved states, as the vocabulary's scores
    rows dominate them)."""
    monkeypatch.undo()                                  # the real tokenizers, not the byte vocabulary
    from ubatch.model import fetch
    path = str(fetch.path(name))
    notes = ["The mill by the river grinds wheat for the village. ", "Tides follow the moon's pull. "]
    users = [notes[0] * 12, notes[1] * (40 if name.startswith("gemma") else 12)]   # ~130 and ~560 / ~100 tokens
    qs = ["Q: what? A:", "Q: why? A:"]

    def run(llm):
        out = []
        for q in qs:
            for u in users:
                r = llm(u + q, max_tokens=4, temperature=0.9 if u is users[1] else 0.0, seed=5)["choices"][0]
                out.append(r["text"])
        return out

    kw = dict(n_ctx=1024, verbose=False, n_threads=2)
    want = run(L.Llama(path, **kw))
    held = L.Llama(path, **kw)
    held.set_cache(L.LlamaRAMCache(capacity_bytes=2 << 30))
    assert run(held) == want
    assert held._holders.hits >= 2
