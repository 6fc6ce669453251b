"""logit_bias, logits_processor and stopping_criteria in the batched paths (a list of prompts, n > 1,
Llama(n_seq_max=N)): each choice gets exactly what a single call gives (its own token ids in the processors,
its own stop), on the tiny model with a byte vocabulary."""
import numpy as np
import pytest

import ubatch.llama_cpp as L
from ubatch.llama_cpp import _model
from ubatch.models import TINY_LLAMA_PATH

from byte_vocab import ByteVocab


@pytest.fixture
def byte_vocab(monkeypatch):
    monkeypatch.setattr(_model, "_load_tokenizer", lambda path, raw: ByteVocab())


def _texts(r):
    return [c["text"] for c in r["choices"]]


def test_hooks_in_the_batched_path_equal_single_calls(byte_vocab):
    single = L.Llama(TINY_LLAMA_PATH, n_ctx=256, verbose=False)
    par = L.Llama(TINY_LLAMA_PATH, n_ctx=512, n_seq_max=4, verbose=False)
    prompts = ["abc", "hello"]
    seen = []

    def no_vowels(input_ids, scores):
        seen.append(len(input_ids))
        out = scores.copy()
        out[[ord(v) for v in "aeiou"]] = -np.inf
        return out

    def stop_after_3(input_ids, logits):
        return len(input_ids) >= 3 + min(len(p) for p in prompts) and logits.shape == (256,)

    cases = [dict(logit_bias={ord("x"): 50.0}),
             dict(logits_processor=L.LogitsProcessorList([no_vowels])),
             dict(stopping_criteria=L.StoppingCriteriaList([lambda ids, lg: len(ids) >= 6])),
             dict(logit_bias={ord("q"): 5.0}, logits_processor=L.LogitsProcessorList([no_vowels]))]
    for kw in cases:
        expect = [single.create_completion(p, max_tokens=6, temperature=0.0, **kw)["choices"][0]["text"]
                  for p in prompts]
        got = _texts(par.create_completion(prompts, max_tokens=6, temperature=0.0, **kw))
        assert got == expect, kw
        # n > 1: every greedy choice is the single call's
        assert _texts(par.create_completion(prompts[0], max_tokens=6, temperature=0.0, n=2, **kw)) == \
            [expect[0]] * 2, kw
    biased = single.create_completion("abc", max_tokens=6, temperature=0.0, logit_bias={ord("x"): 50.0})
    assert biased["choices"][0]["text"] == "x" * 6                  # the bias really acted
    assert expect[0] == "q" * 6                                     # the last case: bias + no vowels
    assert seen and min(seen) >= 3                                  # the processors saw each choice's own ids
    r = par.create_completion(prompts, max_tokens=6, temperature=0.0,
                              stopping_criteria=L.StoppingCriteriaList([stop_after_3]))
    assert [c["finish_reason"] for c in r["choices"]] == ["stop", "stop"]
    with pytest.raises(ValueError, match="logits_all"):          # as the single path: logprobs needs logits_all
        par.create_completion(prompts, max_tokens=2, logprobs=1)


def test_stream_several_prompts_and_n(byte_vocab):
    """stream=True with several prompts or n > 1 (ubatch's batched path): chunks carry their choice's index, one
    id for the call, and each index's texts join to the non-streamed choice; every index ends with its finish."""
    par = L.Llama(TINY_LLAMA_PATH, n_ctx=512, n_seq_max=4, verbose=False)
    for prompts, n, kw in ((["abc", "hello"], 1, {}), ("abc", 3, {"temperature": 0.9, "seed": 5}),
                           (["abc", "xy"], 2, {"stop": ["q"], "temperature": 0.0})):
        kw.setdefault("temperature", 0.0)
        full = par.create_completion(prompts, max_tokens=6, n=n, **kw)
        chunks = list(par.create_completion(prompts, max_tokens=6, n=n, stream=True, **kw))
        assert len({c["id"] for c in chunks}) == 1
        k = len(full["choices"])
        texts = ["".join(c["choices"][0]["text"] for c in chunks if c["choices"][0]["index"] == i) for i in range(k)]
        assert texts == [c["text"] for c in full["choices"]], (prompts, n, kw)
        finishes = [c["choices"][0] for c in chunks if c["choices"][0]["finish_reason"] is not None]
        assert sorted(f["index"] for f in finishes) == list(range(k))
        assert [f["finish_reason"] for f in sorted(finishes, key=lambda f: f["index"])] == \
            [c["finish_reason"] for c in full["choices"]]


def test_logprobs_in_the_batched_path(byte_vocab):
    """logprobs=k with several prompts / n > 1 (logits_all=True, as the single path requires): each choice's
    entry equals the single call's (echo and stream raise there)."""
    single = L.Llama(TINY_LLAMA_PATH, n_ctx=256, verbose=False, logits_all=True)
    par = L.Llama(TINY_LLAMA_PATH, n_ctx=512, n_seq_max=4, verbose=False, logits_all=True)
    prompts = ["abc", "hello"]
    expect = [single.create_completion(p, max_tokens=5, temperature=0.0, logprobs=3)["choices"][0] for p in prompts]
    got = par.create_completion(prompts, max_tokens=5, temperature=0.0, logprobs=3)["choices"]
    for e, g in zip(expect, got):
        assert g["text"] == e["text"]
        assert g["logprobs"]["tokens"] == e["logprobs"]["tokens"]
        assert g["logprobs"]["text_offset"] == e["logprobs"]["text_offset"]
        assert g["logprobs"]["top_logprobs"] == e["logprobs"]["top_logprobs"]
        assert g["logprobs"]["token_logprobs"] == e["logprobs"]["token_logprobs"]
    two = par.create_completion("abc", max_tokens=5, temperature=0.0, logprobs=2, n=2)["choices"]
    assert two[0]["logprobs"] == two[1]["logprobs"] and two[0]["logprobs"]["tokens"] == expect[0]["logprobs"]["tokens"]
    for kw in ({"echo": True}, {"stream": True}):
        with pytest.raises(NotImplementedError, match="logprobs"):
            r = par.create_completion(prompts, max_tokens=2, logprobs=1, **kw)
            list(r) if kw.get("stream") else r
