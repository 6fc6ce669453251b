"""create_completion(suffix=...): fill-in-the-middle with the model's own FIM tokens (llama-cpp-python 0.3.36
puts token id 0 in their place). On Qwen2.5-Coder the prompt is FIM_PRE prefix FIM_SUF suffix FIM_MID and the
greedy middle is what llama.cpp computes for the same ids (recorded with llama-cpp-python 0.3.36's low-level eval
on this machine: tokens and top-2 margins of the first 8 steps, all comfortable)."""
import pytest

import ubatch.llama_cpp as L

pytestmark = pytest.mark.realmodel
PROMPT, SUFFIX = "def add(a, b):\n    ", "\n\nprint(add(1, 2))\n"
IDS = [151659, 750, 912, 2877, 11, 293, 982, 257, 151661, 271, 1350, 25906, 7, 16, 11, 220, 17, 1171, 151660]
LLAMA_CPP_MIDDLE = [689, 264, 488, 293, 271, 1350, 25906, 7]


def _path(name):
    from ubatch.model import fetch
    return str(fetch.path(name))


def test_fill_in_the_middle_qwen():
    from ubatch.llama_cpp._completion import fim_tokens
    llm = L.Llama(_path("qwen2.5-0.5b"), n_ctx=512, verbose=False)
    assert fim_tokens(llm, PROMPT, SUFFIX) == IDS
    r = llm.create_completion(PROMPT, suffix=SUFFIX, max_tokens=8, temperature=0.0)
    assert r["usage"]["prompt_tokens"] == len(IDS)
    assert r["choices"][0]["text"] == llm.detokenize(LLAMA_CPP_MIDDLE).decode()
    assert r["choices"][0]["text"].startswith("return a + b")
    infill = L.Llama(_path("qwen2.5-0.5b"), n_ctx=512, verbose=False, spm_infill=True, vocab_only=True)
    ids = fim_tokens(infill, PROMPT, SUFFIX)
    assert ids[0] == 151661 and ids[ids.index(151659) - 1] == 1171 and ids[-1] == 151660   # suffix part first
    assert fim_tokens(llm, [1, 2, 3], "") == [151659, 1, 2, 3, 151661, 151660]


def test_model_without_fim_tokens_raises():
    llm = L.Llama(_path("gemma3-270m"), n_ctx=256, verbose=False)
    with pytest.raises(ValueError, match="fill-in-the-middle"):
        llm.create_completion("def f(", suffix=")", max_tokens=4)
