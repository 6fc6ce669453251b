"""A context's state as bytes (ubatch.llama_cpp._state, the C cell serialiser csrc/memory/kv_state_io.c):
llama_state_get_size / get_data / set_data, llama_state_save_file / load_file and the session-file aliases,
Llama.save_state with real bytes, pickling a Llama and a LlamaState, LlamaDiskCache. Every round trip is bitwise:
the logits after a restore are those the context had, and decoding on gives exactly what it gives without the
save. Broken buffers are refused (0 / False, a logged reason) and leave the context as it was."""
import ctypes
import pickle
import struct
import warnings

import numpy as np
import pytest

import ubatch.llama_cpp as L
from ubatch.llama_cpp import _model, _state
from ubatch.models import TINY_LLAMA_PATH

from byte_vocab import ByteVocab


class Ctx:
    """A low-level context on the tiny model, decoding one sequence."""

    def __init__(self, n_ctx: int = 256, n_seq_max: int = 1, kv_unified: bool = True, path: str = TINY_LLAMA_PATH):
        self.model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
        cp = L.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_seq_max, cp.kv_unified = n_ctx, 64, n_seq_max, kv_unified
        self.ctx = L.llama_init_from_model(self.model, cp)
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))

    def decode(self, toks, p0, seq=0):
        b = L.llama_batch_init(len(toks), 0, 1)
        assert self.ctx is not None
        for i, t in enumerate(toks):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = t, p0 + i, 1, i == len(toks) - 1
            b.seq_id[i][0] = seq
        b.n_tokens = len(toks)
        assert L.llama_decode(self.ctx, b) == 0
        L.llama_batch_free(b)
        return self.last()

    def last(self):
        return np.ctypeslib.as_array(L.llama_get_logits_ith(self.ctx, -1), shape=(self.n_vocab,)).copy()

    def state(self):
        n = L.llama_state_get_size(self.ctx)
        buf = (ctypes.c_uint8 * n)()
        assert L.llama_state_get_data(self.ctx, buf, n) == n
        return bytes(buf)

    def close(self):
        L.llama_free(self.ctx)
        L.llama_model_free(self.model)


@pytest.fixture
def c():
    x = Ctx()
    yield x
    x.close()


def test_round_trip_is_bitwise(c):
    before = c.decode([1, 2, 3, 4, 5, 6, 7], 0)
    blob = c.state()
    assert blob[:4] == b"UBST" and len(blob) == L.llama_state_get_size(c.ctx)
    cont = [c.decode([9], 7), c.decode([11, 12], 8)]
    buf = (ctypes.c_uint8 * len(blob)).from_buffer_copy(blob)
    assert L.llama_state_set_data(c.ctx, buf, len(blob)) == len(blob)
    assert np.array_equal(c.last(), before)                 # the saved logits are back
    assert np.array_equal(c.decode([9], 7), cont[0]) and np.array_equal(c.decode([11, 12], 8), cont[1])
    assert L.llama_memory_seq_pos_max(L.llama_get_memory(c.ctx), 0) == 9
    # into a second context of the same model and geometry, from bytes, a bytearray or a pointer
    d = Ctx()
    try:
        for src in (blob, bytearray(blob), ctypes.cast(buf, ctypes.POINTER(ctypes.c_uint8)), ctypes.byref(buf)):
            assert L.llama_state_set_data(d.ctx, src, len(blob)) == len(blob)
            assert np.array_equal(d.last(), before) and np.array_equal(d.decode([9], 7), cont[0])
    finally:
        d.close()


def test_too_small_buffer_and_bad_states_change_nothing(c):
    c.decode([1, 2, 3, 4], 0)
    n = L.llama_state_get_size(c.ctx)
    assert L.llama_state_get_data(c.ctx, (ctypes.c_uint8 * (n - 1))(), n - 1) == 0
    good = c.state()
    c.decode([5, 6], 4)
    now = c.state()
    expect = c.decode([7], 6)
    assert L.llama_state_set_data(c.ctx, now, len(now)) == len(now)
    sec = _state._parse(now)
    kv0 = bytes(sec["kv0"])
    off_kv0 = now.index(kv0)
    n_cells = struct.unpack_from("<i", kv0, 12)[0]      # n_stream * size with one stream
    seq_off = off_kv0 + 28 + n_cells * 16 + 8 * 4 * 200   # the sequence set of cell 200 (empty)
    bad_cell = bytearray(now)
    bad_cell[seq_off] = 1
    other = Ctx(n_ctx=512)
    try:
        wrong_geometry = other.decode([1], 0) is not None and other.state()
    finally:
        other.close()
    for bad in (b"", good[:100], b"XXXX" + good[4:], good + b"\0", good[:-1], bytes(bad_cell), wrong_geometry):
        n_bad = len(bad)
        assert L.llama_state_set_data(c.ctx, (ctypes.c_uint8 * max(n_bad, 1)).from_buffer_copy(bad or b"\0"),
                                      n_bad) == 0
        assert c.state() == now                          # untouched: cells, K/V data, logits
    assert np.array_equal(c.decode([7], 6), expect)


def test_session_files(c, tmp_path):
    toks = [1, 2, 3, 4, 5]
    c.decode(toks, 0)
    expect = c.decode([6], 5)
    L.llama_memory_seq_rm(L.llama_get_memory(c.ctx), 0, 5, -1)
    path = str(tmp_path / "s.bin").encode()
    arr = (L.llama_token * len(toks))(*toks)
    assert L.llama_state_save_file(c.ctx, path, arr, len(toks)) is True
    L.llama_memory_clear(L.llama_get_memory(c.ctx), True)
    out = (L.llama_token * 8)()
    n_out = ctypes.c_size_t(0)
    assert L.llama_state_load_file(c.ctx, path, out, 3, ctypes.byref(n_out)) is False      # capacity too small
    assert L.llama_memory_seq_pos_max(L.llama_get_memory(c.ctx), 0) == -1
    assert L.llama_state_load_file(c.ctx, path, out, 8, ctypes.byref(n_out)) is True
    assert n_out.value == 5 and list(out)[:5] == toks
    assert np.array_equal(c.decode([6], 5), expect)
    n_ptr = ctypes.pointer(ctypes.c_size_t(0))
    assert L.llama_state_load_file(c.ctx, str(tmp_path / "missing").encode(), out, 8, n_ptr) is False
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert L.llama_save_session_file(c.ctx, path, arr, len(toks)) is True
        assert L.llama_load_session_file(c.ctx, path, out, 8, n_ptr) is True and n_ptr[0] == 5
        assert L.llama_get_state_size(c.ctx) == L.llama_state_get_size(c.ctx)
    assert {str(x.message).split()[0] for x in w} == {"llama_save_session_file", "llama_load_session_file",
                                                      "llama_get_state_size"}
    (tmp_path / "junk").write_bytes(b"UBSN\x01\0\0\0\xff\xff\0\0")
    assert L.llama_state_load_file(c.ctx, str(tmp_path / "junk").encode(), out, 8, n_ptr) is False


@pytest.fixture
def byte_vocab(monkeypatch):
    monkeypatch.setattr(_model, "_load_tokenizer", lambda path, raw: ByteVocab())


def _greedy(llm, n):
    g = llm.generate([], temp=0.0, reset=False) if llm.n_tokens else None
    out = [next(g) for _ in range(n)]
    g.close()
    return out


def test_llama_save_state_pickle_and_continue(byte_vocab):
    llm = L.Llama(TINY_LLAMA_PATH, n_ctx=256, verbose=False)
    llm.eval(list(b"hello world"))
    st = llm.save_state()
    assert isinstance(st.llama_state, bytes) and st.llama_state_size == len(st.llama_state) > 1000
    ref = llm.create_completion(list(b"hello world"), max_tokens=6, temperature=0.0)["choices"][0]["text"]
    # the state and the Llama itself through pickle, restored in a new Llama
    st2 = pickle.loads(pickle.dumps(st))
    llm2 = pickle.loads(pickle.dumps(llm))
    assert llm2.model_path == llm.model_path and llm2.n_ctx() == llm.n_ctx() and llm2._seed == llm._seed
    llm2.load_state(st2)
    assert llm2.n_tokens == len(b"hello world")
    assert llm2.create_completion(list(b"hello world"), max_tokens=6, temperature=0.0)["choices"][0]["text"] == ref
    # logits_all: eval_logits holds every evaluated row
    la = L.Llama(TINY_LLAMA_PATH, n_ctx=256, verbose=False, logits_all=True)
    la.eval([1, 2, 3])
    assert len(la.eval_logits) == 3 and len(la.eval_logits[0]) == la.n_vocab()
    assert llm.eval_logits.maxlen == 1


def test_disk_cache(byte_vocab, tmp_path):
    llm = L.Llama(TINY_LLAMA_PATH, n_ctx=256, verbose=False)
    prompt = list(b"the cat sat on")
    plain = llm.create_completion(prompt, max_tokens=5, temperature=0.0)["choices"][0]["text"]
    cache = L.LlamaDiskCache(cache_dir=str(tmp_path / "c"))
    llm.set_cache(cache)
    a = llm.create_completion(prompt, max_tokens=5, temperature=0.0)["choices"][0]["text"]
    assert len(cache._keys) == 1 and cache.cache_size > 1000 and prompt in cache
    llm.reset()
    b = llm.create_completion(prompt, max_tokens=5, temperature=0.0)["choices"][0]["text"]
    assert plain == a == b
    again = L.LlamaDiskCache(cache_dir=str(tmp_path / "c"))       # another process's view of the directory
    assert prompt + [1] in again and isinstance(again[prompt], L.LlamaState)
    small = L.LlamaDiskCache(cache_dir=str(tmp_path / "s"), capacity_bytes=1)
    small[(1, 2)] = llm.save_state()
    assert len(small._keys) == 0 and (1, 2) not in small
    with pytest.raises(KeyError):
        small[(1, 2)]


def test_mutated_cell_tables_never_crash(c):
    c.decode([1, 2, 3, 4, 5, 6], 0)
    blob = c.state()
    kv0 = bytes(_state._parse(blob)["kv0"])
    start = blob.index(kv0)
    rng = np.random.default_rng(7)
    for _ in range(60):
        bad = bytearray(blob)
        for _ in range(int(rng.integers(1, 4))):
            bad[start + int(rng.integers(0, len(kv0)))] ^= 1 << int(rng.integers(0, 8))
        r = L.llama_state_set_data(c.ctx, bytes(bad), len(bad))
        assert r in (0, len(bad))
        assert L.llama_state_set_data(c.ctx, blob, len(blob)) == len(blob)
    assert c.state() == blob


@pytest.mark.realmodel
def test_real_model_sliding_window_round_trip():
    """Gemma 3 (two KV caches: full + sliding window): save after the prompt, generate, restore, generate
    again: the same tokens and bitwise the same logits rows; and in a second Llama from the pickled state."""
    from ubatch.model import fetch
    path = str(fetch.path("gemma3-270m"))
    llm = L.Llama(path, n_ctx=256, logits_all=True, verbose=False)
    prompt = llm.tokenize(b"The capital of France is")
    llm.eval(prompt)
    st = pickle.loads(pickle.dumps(llm.save_state()))

    def run(m):
        toks = []
        for _ in range(6):
            t = int(np.argmax(m.scores[m.n_tokens - 1]))
            toks.append(t)
            m.eval([t])
        return toks, m.scores[: m.n_tokens].copy()

    a = run(llm)
    llm.load_state(st)
    b = run(llm)
    other = L.Llama(path, n_ctx=256, logits_all=True, verbose=False)
    other.load_state(st)
    c2 = run(other)
    assert a[0] == b[0] == c2[0]
    assert np.array_equal(a[1], b[1]) and np.array_equal(a[1], c2[1])


def _seq_blob(c, s):
    n = L.llama_state_seq_get_size(c.ctx, s)
    buf = (ctypes.c_uint8 * n)()
    assert n > 0 and L.llama_state_seq_get_data(c.ctx, buf, n, s) == n
    return bytes(buf)


@pytest.mark.parametrize("unified", [True, False])
def test_seq_state_moves_a_sequence_bitwise(unified):
    """A sequence saved from one context and put into another sequence (of this or another context, unified
    KV or one stream per sequence) continues exactly as the original: positions with a hole included."""
    c = Ctx(n_ctx=512, n_seq_max=4, kv_unified=unified)
    d = Ctx(n_ctx=512, n_seq_max=4, kv_unified=unified)
    try:
        c.decode([5, 6, 7], 0, seq=1)                        # another sequence around
        c.decode([1, 2, 3, 4, 5, 6, 7, 8], 0, seq=0)
        L.llama_memory_seq_rm(L.llama_get_memory(c.ctx), 0, 2, 4)   # a hole at positions 2, 3
        blob = _seq_blob(c, 0)
        expect = c.decode([9], 8, seq=0)
        for ctx, dest in ((c, 2), (d, 0), (d, 3)):
            assert L.llama_state_seq_set_data(ctx.ctx, blob, len(blob), dest) == len(blob)
            mem = L.llama_get_memory(ctx.ctx)
            assert (L.llama_memory_seq_pos_min(mem, dest), L.llama_memory_seq_pos_max(mem, dest)) == (0, 7)
            assert np.array_equal(ctx.decode([9], 8, seq=dest), expect)
        # the other sequence was not touched
        assert L.llama_memory_seq_pos_max(L.llama_get_memory(c.ctx), 1) == 2
        # refused: bad dest, truncated, wrong context; the destination unchanged
        before = c.state()
        for bad, dest in ((blob, 9), (blob[:-3], 2), (blob + b"x", 2), (b"UBSQ" + blob[4:20], 2)):
            assert L.llama_state_seq_set_data(c.ctx, bad, len(bad), dest) == 0
            assert c.state() == before
        assert L.llama_state_seq_get_size_ext(c.ctx, 0, L.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY) == 0
        assert L.llama_state_seq_get_size_ext(c.ctx, 0, L.LLAMA_STATE_SEQ_FLAGS_ON_DEVICE) == \
            L.llama_state_seq_get_size(c.ctx, 0) > len(blob)
    finally:
        c.close()
        d.close()


def test_seq_state_files(tmp_path):
    c = Ctx(n_ctx=512, n_seq_max=2)
    try:
        toks = [3, 1, 4, 1, 5]
        c.decode(toks, 0, seq=0)
        expect = c.decode([9], 5, seq=0)
        L.llama_memory_seq_rm(L.llama_get_memory(c.ctx), 0, 5, -1)
        path = str(tmp_path / "seq.bin").encode()
        n = L.llama_state_seq_save_file(c.ctx, path, 0, (L.llama_token * 5)(*toks), 5)
        assert n > 0 and (tmp_path / "seq.bin").stat().st_size == n
        out, n_out = (L.llama_token * 8)(), ctypes.c_size_t()
        assert L.llama_state_seq_load_file(c.ctx, path, 1, out, 2, ctypes.byref(n_out)) == 0     # capacity
        assert L.llama_state_seq_load_file(c.ctx, path, 1, out, 8, ctypes.byref(n_out)) == n
        assert n_out.value == 5 and list(out)[:5] == toks
        assert np.array_equal(c.decode([9], 5, seq=1), expect)
    finally:
        c.close()


@pytest.mark.realmodel
def test_seq_state_sliding_window_model():
    """Gemma 3 (full + sliding-window caches): a sequence moved into another context continues bitwise."""
    from ubatch.model import fetch
    path = str(fetch.path("gemma3-270m"))
    c = Ctx(n_ctx=512, n_seq_max=2, path=path)
    d = Ctx(n_ctx=512, n_seq_max=2, path=path)
    try:
        prompt = list(range(1000, 1040))
        c.decode(prompt, 0, seq=0)
        blob = _seq_blob(c, 0)
        expect = c.decode([2000, 2001], 40, seq=0)
        assert L.llama_state_seq_set_data(d.ctx, blob, len(blob), 1) == len(blob)
        assert np.array_equal(d.decode([2000, 2001], 40, seq=1), expect)
    finally:
        c.close()
        d.close()


def test_seed_zero_means_the_default_seed(byte_vocab):
    """0.3.36 maps Llama(seed=0) to LLAMA_DEFAULT_SEED (a random seed per run), as `seed or LLAMA_DEFAULT_SEED`."""
    assert L.Llama(TINY_LLAMA_PATH, n_ctx=64, seed=0, verbose=False)._seed == L.LLAMA_DEFAULT_SEED
    assert L.Llama(TINY_LLAMA_PATH, n_ctx=64, seed=7, verbose=False)._seed == 7
