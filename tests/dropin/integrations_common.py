"""What tests/dropin/test_{haystack,outlines,instructor,guidance}.py share: the recorded outputs of the same calls over
the real llama-cpp-python 0.3.36 (tests/data/llama_cpp_python/integrations.json, record_integrations.py), the
recorded greedy tokens / top-2 margins of the free-text prompts (frameworks.json), the check that a framework
really runs over ubatch.llama_cpp, and the skip (or, in CI, the failure) when a framework is not installed."""
import importlib.util
import json
import os
import sys

import pytest

import ubatch.llama_cpp as L

import suite_paths  # noqa: E402
DATA = os.path.join(suite_paths.DATA, "llama_cpp_python")
sys.path.insert(0, DATA)
import integrations_cases as cases  # noqa: E402

REF = json.load(open(os.path.join(DATA, "integrations.json")))
GREEDY = json.load(open(os.path.join(DATA, "frameworks.json")))[cases.MODEL]["greedy"]
MARGIN = 0.25     # as test_llama_cpp_frameworks.py: a recorded top-2 logit margin below this may flip


def require(*modules: str) -> None:
    """Skip the calling test module (with the reason) when a framework is missing; in CI it is an error, since
    the test extra installs them (see pyproject.toml and .ci/run)."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        why = f"the framework packages {missing} are not installed (pip install '.[test]', see .ci/run)"
        if os.environ.get("CI"):
            raise RuntimeError(why)
        pytest.skip(why, allow_module_level=True)


def greedy_text(llm, key: str) -> str:
    """The text of the greedy tokens llama-cpp-python recorded for frameworks.json's prompt `key`, after checking
    that every step's margin was comfortable (so ubatch's greedy tokens are those: test_llama_cpp_frameworks.py
    checks it), detokenised by the drop-in, end-of-generation tokens left out."""
    g = GREEDY[key]
    assert min(g["margins"]) >= MARGIN, (key, g["margins"])
    vocab = L.llama_model_get_vocab(llm.model)
    return llm.detokenize([t for t in g["tokens"] if not L.llama_vocab_is_eog(vocab, t)]).decode("utf-8")


def chat_prompt_len() -> int:
    return len(GREEDY["default:chat"]["prompt_tokens"])


def load_llm():
    from ubatch.model import fetch
    return L.Llama(str(fetch.path(cases.MODEL)), n_ctx=cases.N_CTX, verbose=False)
