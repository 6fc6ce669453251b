"""The high-level `Llama` of ubatch.llama_cpp on the tiny model with a byte-level test vocabulary (token t is
the byte t; EOS = a token the model emits), checking llama-cpp-python 0.3.36's completion semantics and dicts,
and the batched paths (a list of prompts, n > 1, threads on n_seq_max > 1) against sequential calls."""
import threading

import numpy as np
import pytest

import ubatch.llama_cpp as L
from ubatch.llama_cpp import _model
from ubatch.models import TINY_LLAMA_PATH

from byte_vocab import EOS, ByteVocab


@pytest.fixture
def byte_vocab(monkeypatch):
    monkeypatch.setattr(_model, "_load_tokenizer", lambda path, raw: ByteVocab())


def make(**kw):
    kw.setdefault("n_ctx", 256)
    kw.setdefault("verbose", False)
    return L.Llama(TINY_LLAMA_PATH, **kw)


def greedy_tokens(llm, prompt, n):
    llm.reset()
    g = llm.generate(prompt, temp=0.0)
    out = [next(g) for _ in range(n)]
    g.close()
    return out


def test_completion_dict_fields(byte_vocab):
    llm = make(seed=3)
    r = llm("abc", max_tokens=6, temperature=0.0)
    assert set(r) == {"id", "object", "created", "model", "choices", "usage"}
    assert r["id"].startswith("cmpl-") and r["object"] == "text_completion" and isinstance(r["created"], int)
    assert r["model"] == TINY_LLAMA_PATH
    (c,) = r["choices"]
    assert set(c) == {"text", "index", "logprobs", "finish_reason"} and c["index"] == 0 and c["logprobs"] is None
    assert r["usage"] == {"prompt_tokens": 3, "completion_tokens": c["finish_reason"] == "length" and 6 or
                          r["usage"]["completion_tokens"], "total_tokens": 3 + r["usage"]["completion_tokens"]}


def test_greedy_text_is_the_generated_tokens_and_eos_stops(byte_vocab):
    llm = make()
    toks = greedy_tokens(llm, list(b"xyz"), 40)
    r = llm.create_completion("xyz", max_tokens=40, temperature=0.0)
    if EOS in toks:
        k = toks.index(EOS)
        assert r["choices"][0]["finish_reason"] == "stop" and r["usage"]["completion_tokens"] == k
        toks = toks[:k]
    else:
        assert r["choices"][0]["finish_reason"] == "length"
    assert r["choices"][0]["text"] == bytes(toks).decode("utf-8", errors="ignore")


def _ascii_prompt_and_stop(llm):
    """A prompt whose greedy continuation (no EOS within 12 tokens) contains an ASCII byte to stop on."""
    for first in range(97, 123):
        p = bytes([first, 98, 99])
        toks = greedy_tokens(llm, list(p), 12)
        if EOS in toks:
            continue
        for k in range(2, 10):
            if 32 <= toks[k] < 127 and toks[k] not in toks[:k]:
                return p.decode(), toks, k
    pytest.fail("no usable prompt for the stop-string test")


def test_stop_string_cuts_text_and_stream_matches(byte_vocab):
    llm = make()
    prompt, toks, k = _ascii_prompt_and_stop(llm)
    stop = chr(toks[k])
    r = llm(prompt, max_tokens=12, temperature=0.0, stop=[stop])
    assert r["choices"][0]["finish_reason"] == "stop"
    assert r["choices"][0]["text"] == bytes(toks[:k]).decode("utf-8", errors="ignore")
    chunks = list(llm(prompt, max_tokens=12, temperature=0.0, stop=stop, stream=True))
    assert all(ch["object"] == "text_completion" and "usage" not in ch for ch in chunks)
    assert chunks[-1]["choices"][0]["text"] == "" and chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all(ch["choices"][0]["finish_reason"] is None for ch in chunks[:-1])
    assert "".join(ch["choices"][0]["text"] for ch in chunks) == r["choices"][0]["text"]
    full = llm(prompt, max_tokens=12, temperature=0.0, echo=True)
    assert full["choices"][0]["text"].startswith(prompt)


def test_context_window_and_max_tokens(byte_vocab):
    llm = make(n_ctx=256)
    with pytest.raises(ValueError, match=r"Requested tokens \(300\) exceed context window of 256"):
        llm("a" * 300)
    r = llm("a" * 250, max_tokens=100, temperature=0.0)
    assert r["usage"]["completion_tokens"] <= 6
    with pytest.raises(ValueError, match="logits_all"):
        llm("ab", max_tokens=2, logprobs=3)


def test_logprobs_with_logits_all(byte_vocab):
    llm = make(logits_all=True)
    r = llm("hello", max_tokens=4, temperature=0.0, logprobs=2)
    lp = r["choices"][0]["logprobs"]
    n = r["usage"]["completion_tokens"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == n
    assert all(v <= 0 for v in lp["token_logprobs"])


def test_seeds_reproduce_and_chain(byte_vocab):
    a = make(seed=11)
    b = make(seed=11)
    ra = [a("seed", max_tokens=8)["choices"][0]["text"] for _ in range(3)]
    rb = [b("seed", max_tokens=8)["choices"][0]["text"] for _ in range(3)]
    assert ra == rb                                   # default runs: random.Random(seed) chain, reproducible
    s1 = a("seed", max_tokens=8, seed=5)["choices"][0]["text"]
    s2 = b("seed", max_tokens=8, seed=5)["choices"][0]["text"]
    assert s1 == s2


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_list_of_prompts_equals_sequential_calls(byte_vocab, temperature):
    prompts = ["one", "second prompt", "3", "fourth one", "five!"]
    seq = make(seed=21)
    expect = [seq(p, max_tokens=10, temperature=temperature)["choices"][0]["text"] for p in prompts]
    par = make(seed=21, n_seq_max=3, n_batch=16)
    r = par.create_completion(prompts, max_tokens=10, temperature=temperature)
    assert [c["text"] for c in r["choices"]] == expect
    assert [c["index"] for c in r["choices"]] == list(range(len(prompts)))
    assert r["usage"]["prompt_tokens"] == sum(len(p) for p in prompts)


def test_n_choices_fork_the_prompt(byte_vocab):
    single = make(seed=4)
    one = single("fork me", max_tokens=8, seed=100)["choices"][0]["text"]
    other = single("fork me", max_tokens=8, seed=101)["choices"][0]["text"]
    llm = make(seed=4, n_seq_max=4)
    r = llm("fork me", max_tokens=8, seed=100, n=3)
    texts = [c["text"] for c in r["choices"]]
    assert texts[0] == one and texts[1] == other     # choice k is seeded with seed + k
    assert r["usage"]["prompt_tokens"] == len("fork me")
    with pytest.raises(ValueError, match="n_seq_max"):
        llm("x", max_tokens=2, n=5)


def test_threads_are_batched_and_give_their_own_results(byte_vocab):
    prompts = [f"thread {i}" for i in range(6)]
    seq = make(seed=9)
    expect = {p: seq(p, max_tokens=8, temperature=0.0)["choices"][0]["text"] for p in prompts}
    llm = make(seed=9, n_seq_max=4)
    got = {}

    def work(p):
        got[p] = llm(p, max_tokens=8, temperature=0.0)["choices"][0]["text"]

    ts = [threading.Thread(target=work, args=(p,)) for p in prompts]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert got == expect
    llm.close()


def test_save_load_state_roundtrip(byte_vocab):
    llm = make()
    llm.eval(list(b"state"))
    st = llm.save_state()
    a = [llm.sample(temp=0.0)]
    llm.eval(a)
    a.append(llm.sample(temp=0.0))
    llm.load_state(st)
    assert llm.n_tokens == 5
    b = [llm.sample(temp=0.0)]
    llm.eval(b)
    b.append(llm.sample(temp=0.0))
    assert a == b


def test_embeddings(byte_vocab):
    llm = make(embedding=True)
    assert llm.n_seq_max == min(llm.n_batch, 256)
    one = llm.embed("abc")
    assert len(one) == 3 and len(one[0]) == llm.n_embd()     # pooling NONE: one vector per token
    both = llm.embed(["abc", "de"])
    # the same whatever else is in the batch (to rounding until the batch-invariant matmul replaces numpy's)
    np.testing.assert_allclose(np.array(both[0]), np.array(one), rtol=0, atol=1e-5)
    assert len(both[1]) == 2
    r = llm.create_embedding(["abc", "de"])
    assert r["object"] == "list" and [d["index"] for d in r["data"]] == [0, 1]
    assert r["usage"] == {"prompt_tokens": 5, "total_tokens": 5}
    with pytest.raises(RuntimeError, match="embedding=True"):
        make().embed("x")


def test_escape_hatches_and_accepted_arguments(byte_vocab):
    llm = make(n_gpu_layers=-1, n_parts=1, f16_kv=True, use_mlock=False, last_n_tokens_size=32)
    assert isinstance(llm.ctx, int) and llm._ctx.ctx == llm.ctx and isinstance(llm.model, int)
    assert llm.n_batch == 256 and llm.n_ctx() == 256 and llm.n_vocab() == 256
    assert llm.token_eos() == EOS and llm.token_bos() == -1
    assert llm.metadata["general.architecture"] == "llama"
    assert llm.tokenize(b"hi") == [104, 105] and llm.detokenize([104, 105]) == b"hi"
    mem = L.llama_get_memory(llm.ctx)
    llm.eval([1, 2, 3])
    assert L.llama_memory_seq_pos_max(mem, 0) == 2


def test_missing_features_raise_not_implemented(byte_vocab):
    with pytest.raises(NotImplementedError, match="LoRA"):
        make(lora_path="x.bin")
    llm = make()
    with pytest.raises(TypeError, match="grammar must be a LlamaGrammar"):
        llm("x", grammar=object())
    # grammars work now (tests/test_grammar_*.py): a JSON answer on the byte vocabulary
    r = llm.create_chat_completion([{"role": "user", "content": "hi"}], response_format={"type": "json_object"},
                                   max_tokens=4, temperature=0.0)
    assert r["choices"][0]["message"]["content"].startswith("{")


def test_ram_cache_and_helper_modules(byte_vocab):
    from ubatch.llama_cpp import llama_cache, llama_grammar, _utils, _logger, llama_tokenizer  # noqa: F401
    llm = make()
    want = llm("cache me", max_tokens=5, temperature=0.0)["choices"][0]["text"]
    llm.set_cache(L.LlamaRAMCache(capacity_bytes=1 << 30))
    assert llm("cache me", max_tokens=5, temperature=0.0)["choices"][0]["text"] == want
    assert len(llm.cache.cache_state) == 1 and tuple(b"cache me") in llm.cache
    llm.reset()
    llm.eval([1, 2])                                   # the context now holds something else
    assert llm("cache me", max_tokens=5, temperature=0.0)["choices"][0]["text"] == want   # restored from cache
    with _utils.suppress_stdout_stderr(disable=False):
        print("hidden")
    assert "object ::=" in llama_grammar.json_schema_to_gbnf("{}")


def test_chat_formats_of_the_registry(byte_vocab):
    """Llama(chat_format=NAME) renders with the registry's format (tokenized as llama-cpp-python does) and
    stops on the format's stop string; an unknown name is refused naming the valid ones."""
    from ubatch.chat.formats import FORMATTERS
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]
    for name in ("chatml", "llama-2", "gemma", "zephyr"):
        r = make(chat_format=name).create_chat_completion(msgs, max_tokens=3, temperature=0.0)
        assert r["usage"]["prompt_tokens"] == len(FORMATTERS[name](messages=msgs).prompt.encode()), name
        assert r["object"] == "chat.completion" and r["choices"][0]["message"]["role"] == "assistant"
    assert make().chat_format == "llama-2"                 # no template, no known architecture: the fallback
    with pytest.raises(L.llama_chat_format.LlamaChatCompletionHandlerNotFoundException, match="valid formats"):
        make(chat_format="nope").create_chat_completion(msgs)
