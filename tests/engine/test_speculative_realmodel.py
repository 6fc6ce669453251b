"""Exact speculative decoding on both real models (Qwen2.5-Coder 0.5B, Gemma 3 270M with its sliding-window
cache): a code-editing prompt decoded with prompt lookup gives token for token what decoding without a draft
gives — greedy and seeded, alone and batched, through ubatch.LLM and through the drop-in's
Llama(draft_model=LlamaPromptLookupDecoding()) — and the drop-in's KV state after the request is the same.
Kept small: the real models cost CPU time."""
from __future__ import annotations

import pytest

import ubatch
import ubatch.llama_cpp as L
from ubatch.llama_cpp.llama_speculative import LlamaPromptLookupDecoding

from spec_helpers import kv_state

pytestmark = pytest.mark.realmodel

CODE = '''def area(w, h):
    return w * h


def perimeter(w, h):
    return 2 * (w + h)
'''
ASK = "Rename the parameter `w` to `width` in this code and change nothing else. Reply with the code only.\n\n"


def _prompt(llm):
    tok = llm.tokenizer
    if getattr(tok, "chat_template", None):
        return tok.apply_chat_template([{"role": "user", "content": ASK + CODE}], add_generation_prompt=True)
    return "# the same code again, with w renamed to width\n" + CODE + "\n# renamed:\n"


@pytest.fixture(scope="module", params=["qwen2.5-0.5b", "gemma3-270m"])
def model(request):
    return request.param, ubatch.models.load(request.param)


def test_engine_identical_greedy_seeded_batched(model):
    name, m = model
    plain = ubatch.LLM(m, n_ctx=4096, n_seq_max=2, kv_unified=True)
    spec = ubatch.LLM(m, n_ctx=4096, n_seq_max=2, kv_unified=True, draft="prompt-lookup")
    p = _prompt(plain)
    a = plain.generate([p], max_tokens=40, temperature=0.0)
    b = spec.generate([p], max_tokens=40, temperature=0.0)
    assert a[0].tokens == b[0].tokens and a[0].text == b[0].text
    assert spec.engine.stats()["draft_accepted"] > 0
    seeded = dict(max_tokens=16, temperature=0.8, seed=7, top_k=40, repeat_penalty=1.1)
    two = [p, p + "x"]
    a = plain.generate(two, **seeded)
    b = spec.generate(two, **seeded)
    assert [c.tokens for c in a] == [c.tokens for c in b]


def test_llama_draft_model_identical_and_kv_state(model):
    from ubatch.llama_cpp._handles import REGISTRY
    from ubatch.model import fetch
    name, _ = model
    path = str(fetch.path(name))
    kw = dict(n_ctx=1024, n_batch=256, n_ubatch=256, verbose=False, swa_full=False)
    plain = L.Llama(path, logits_all=True, **kw)
    spec = L.Llama(path, draft_model=LlamaPromptLookupDecoding(), **kw)
    if name == "qwen2.5-0.5b":
        msgs = [{"role": "user", "content": ASK + CODE}]
        a = plain.create_chat_completion(msgs, max_tokens=32, temperature=0.0)
        b = spec.create_chat_completion(msgs, max_tokens=32, temperature=0.0)
    else:
        p = "# the same code again, with w renamed to width\n" + CODE + "\n# renamed:\n"
        a = plain.create_completion(p, max_tokens=32, temperature=0.0, logprobs=2)
        b = spec.create_completion(p, max_tokens=32, temperature=0.0, logprobs=2)
    assert a["choices"] == b["choices"]
    assert spec._draft_state.accepted > 0

    def state(llm):
        return llm.n_tokens, llm._input_ids.tolist(), kv_state(REGISTRY.get(llm._ctx.ctx, "context").ctx)
    assert state(plain) == state(spec)


def test_engine_stream_and_stop_string_identical(model):
    name, m = model
    plain = ubatch.LLM(m, n_ctx=2048, n_seq_max=1)
    spec = ubatch.LLM(m, n_ctx=2048, n_seq_max=1, draft="prompt-lookup")
    p = _prompt(plain)
    full = plain.generate([p], max_tokens=32, temperature=0.0)[0].text
    # a stop string first met half-way through the text (the stream must stop there, cut before it)
    found = [(i, L) for L in (3, 6, 12, 24) for i in range(len(full) // 2, len(full) - L)
             if full.find(full[i:i + L]) == i]
    k, L = found[0] if found else (len(full), 0)
    stop = [full[k:k + L]] if found else None
    a = list(plain.stream(p, max_tokens=32, temperature=0.0, stop=stop))
    b = list(spec.stream(p, max_tokens=32, temperature=0.0, stop=stop))
    assert "".join(a) == "".join(b) == full[:k]
