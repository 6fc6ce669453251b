"""LangChain's LlamaCpp / ChatLlamaCpp / LlamaCppEmbeddings and LlamaIndex's LlamaCPP run unchanged on ubatch after
`ubatch.llama_cpp.install_as_llama_cpp()` (they `import llama_cpp` themselves), compared with what the same calls
returned over the real llama-cpp-python 0.3.36 (tests/data/llama_cpp_python/frameworks.json, record_frameworks.py):
 * ubatch's greedy tokens equal llama.cpp's over the leading steps whose recorded top-2 margin is >= MARGIN;
 * a framework call whose prompt's margins are all comfortable returns exactly what it returned over
   llama-cpp-python (texts, stream chunks, chat content); the others return exactly ubatch's own greedy text;
 * token counts, embedding sizes and values, the context window agree.
The frameworks come from the test extra (llama-index-llms-llama-cpp with --no-deps, see .ci/run: its only
missing dependency is llama-cpp-python, which this replaces)."""
import importlib.util
import json
import os
import sys

import numpy as np
import pytest

import ubatch.llama_cpp as L

import suite_paths  # noqa: E402
DATA = os.path.join(suite_paths.DATA, "llama_cpp_python")
sys.path.insert(0, DATA)
from frameworks_cases import CASES, COMPLETION, MAX_TOKENS, N_CTX, ROPES, run_frameworks  # noqa: E402
from record_frameworks import greedy_with_margins  # noqa: E402

REF = json.load(open(os.path.join(DATA, "frameworks.json")))
MARGIN = 0.25
pytestmark = pytest.mark.realmodel

_missing = [m for m in ("langchain_community", "llama_index.core", "llama_index.llms.llama_cpp")
            if importlib.util.find_spec(m.split(".")[0]) is None or
            (m == "llama_index.llms.llama_cpp" and not os.path.isdir(os.path.join(
                os.path.dirname(importlib.util.find_spec("llama_index").submodule_search_locations[0]),
                "llama_index", "llms", "llama_cpp")))]
if _missing:
    why = (f"the framework packages {_missing} are not installed (pip install '.[test]' and "
           f"pip install --no-deps llama-index-llms-llama-cpp==0.7.0, as .ci/run does)")
    if os.environ.get("CI"):
        raise RuntimeError(why)
    pytest.skip(why, allow_module_level=True)

# framework call -> the recorded greedy prompt it decodes (REF[model]["greedy"] key: RoPE of the caller, prompt);
# LangChain's classes pass rope_freq_base=10000 / rope_freq_scale=1 to Llama (applied, as llama-cpp-python does)
PROMPT_OF = {"langchain.invoke": "langchain:completion", "langchain.invoke_stop": "langchain:completion",
             "langchain.stream": "langchain:counting", "llamaindex.complete": "default:completion",
             "llamaindex.stream_complete": "default:counting", "llamaindex.chat": "default:llamaindex_chat",
             "langchain.chat": "langchain:chat", "langchain.chat_stream": "langchain:chat"}


@pytest.fixture(scope="module", params=list(CASES))
def run(request):
    from ubatch.model import fetch
    name = request.param
    path = str(fetch.path(name))
    L.install_as_llama_cpp()
    try:
        import llama_cpp
        assert llama_cpp is L
        got = run_frameworks(path, chat=bool(CASES[name]["chats"]))
    finally:
        L.uninstall_as_llama_cpp()
    greedy, llms = {}, {}
    for rope, kw in ROPES.items():
        llms[rope] = L.Llama(path, n_ctx=N_CTX, logits_all=True, verbose=False, **kw)
        for key, g in REF[name]["greedy"].items():
            if key.startswith(rope + ":"):
                greedy[key] = greedy_with_margins(llms[rope], g["prompt_tokens"], lib=L)[0]
    yield name, got, greedy, llms["default"]
    for m in llms.values():
        m.close()


def _text(llm, tokens):
    vocab = L.llama_model_get_vocab(llm.model)
    return llm.detokenize([t for t in tokens if not L.llama_vocab_is_eog(vocab, t)]).decode("utf-8", "replace")


def _cos(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_greedy_tokens_equal_llama_cpp_where_margins_are_comfortable(run):
    name, _, greedy, _ = run
    compared = 0
    for key, g in REF[name]["greedy"].items():
        mine = greedy[key]
        ok = next((i for i, m in enumerate(g["margins"]) if m < MARGIN), len(g["margins"]))
        assert mine[:ok] == g["tokens"][:ok], (key, ok)
        compared += ok
    assert compared >= 15, f"only {compared} greedy tokens had a margin >= {MARGIN}"


def test_framework_texts(run):
    name, got, greedy, llm = run
    ref = REF[name]["frameworks"]
    exact = 0
    for key, gi in PROMPT_OF.items():
        if key not in ref:
            continue
        # llm (the fixture's, default RoPE) detokenises; the RoPE does not change the vocabulary
        value = got[key]
        text = "".join(value) if isinstance(value, list) else value
        if min(REF[name]["greedy"][gi]["margins"]) >= MARGIN:
            assert value == ref[key], key                  # what llama-cpp-python gave, chunk for chunk
            exact += 1
        else:                                              # a near-tie inside: ubatch's own greedy text
            own = _text(llm, greedy[gi])
            if key.endswith("_stop"):
                own = own.split(".")[0]
            assert text == own, key
    assert exact >= (4 if CASES[name]["chats"] else 2)


def test_framework_counts_embeddings_metadata(run):
    name, got, _, llm = run
    ref = REF[name]["frameworks"]
    assert got["langchain.num_tokens"] == ref["langchain.num_tokens"] == len(llm.tokenize(COMPLETION.encode()))
    assert got["llamaindex.metadata.context_window"] == ref["llamaindex.metadata.context_window"] == N_CTX
    q, rq = got["langchain.embed_query"], ref["langchain.embed_query"]
    assert q[0] == rq[0] == llm.n_embd()
    assert _cos(q[1], rq[1]) > 0.995, _cos(q[1], rq[1])
    d, rd = got["langchain.embed_documents"], ref["langchain.embed_documents"]
    assert d[:2] == rd[:2]
    assert _cos(d[2], rd[2]) > 0.995, _cos(d[2], rd[2])
    assert MAX_TOKENS == 12
