"""What tests/dropin/test_{haystack,outlines,instructor,guidance}.py share: the recorded outputs of the same calls over
the real llama-cpp-python 0.3.36 (tests/data/llama_cpp_python/integrations.json, record_integrations.py), the
recorded greedy tokens / top-2 margins of the free-text prompts (frameworks.json), the check that a framework
really runs over ubatch.llama_cpp, and the skip (or, in CI, the failure) when a framework is not installed."""
import contextlib
import importlib.util
import json
import os
import re
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


@contextlib.contextmanager
def installed(with_llm: bool = True):
    """install_as_llama_cpp() for the duration, with a drop-in Llama of the test model (closed at the end)."""
    L.install_as_llama_cpp()
    llm = load_llm() if with_llm else None
    try:
        yield llm
    finally:
        if llm is not None:
            llm.close()
        L.uninstall_as_llama_cpp()


def check_structured(got: dict, ref: dict, choice: str, extra_keys_allowed: bool) -> None:
    """A choice among cases.CHOICES, a match of cases.YEAR_RE, a JSON object with a string name and an integer age
    (other keys only if the framework's schema allows them): valid, and what llama-cpp-python gave."""
    assert got[choice] in cases.CHOICES
    assert re.fullmatch(cases.YEAR_RE, got["regex"])
    obj = json.loads(got["json"])
    assert isinstance(obj["name"], str) and isinstance(obj["age"], int)
    assert extra_keys_allowed or set(obj) == {"name", "age"}
    assert [got[k] for k in (choice, "regex", "json")] == [ref[k] for k in (choice, "regex", "json")]
