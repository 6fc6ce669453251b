"""The drop-in's chat prompts on the real test models against llama-cpp-python 0.3.36's (real_prompts.json,
recorded by tests/data/chat/record_real.py with vocab_only models): the token ids create_chat_completion
hands to create_completion — the GGUF template (with tools, a forced tool), registry formats, the
chatml-function-calling text — and the stop strings. gemma3-270m's GGUF has no template: llama-cpp-python falls
back to llama-2 there, ubatch to its gemma3 format (asked for llama-2 it gives llama-cpp-python's ids)."""
import copy
import json
import os
import sys

import pytest

pytestmark = pytest.mark.realmodel

import suite_paths  # noqa: E402
DATA = os.path.join(suite_paths.DATA, "chat")
sys.path.insert(0, DATA)
from real_cases import CASES  # noqa: E402

with open(os.path.join(DATA, "real_prompts.json"), encoding="utf-8") as _f:
    REC = json.load(_f)["models"]


class _Stop(Exception):
    pass


class AnyGrammar:
    """Stands for LlamaGrammar (the prompt is what is compared here, not the grammar)."""

    @classmethod
    def from_string(cls, *a, **k):
        return cls()

    @classmethod
    def from_json_schema(cls, *a, **k):
        return cls()


@pytest.mark.parametrize("model", sorted(REC))
def test_chat_prompt_ids_equal_llama_cpp_python(model, monkeypatch):
    import ubatch.llama_cpp as L
    from ubatch.llama_cpp import llama_grammar
    from ubatch.model import fetch
    monkeypatch.setattr(llama_grammar, "LlamaGrammar", AnyGrammar)
    llm = L.Llama(str(fetch.path(model)), vocab_only=True, verbose=False)
    default = llm.chat_format
    assert default == ("gemma3" if model == "gemma3-270m" else "chat_template.default")
    for name, (init, call) in CASES.items():
        want = REC[model][name]
        llm.chat_format = init.get("chat_format", "llama-2" if default == "gemma3" else default)
        assert llm.chat_format == want["chat_format"], name
        seen = {}

        def fake(prompt, **kw):
            seen["prompt"] = prompt if isinstance(prompt, str) else [int(t) for t in prompt]
            seen["stop"] = kw.get("stop")
            raise _Stop

        llm.create_completion = fake
        with pytest.raises(_Stop):
            llm.create_chat_completion(**copy.deepcopy(call))
        assert seen["prompt"] == want["prompt"], (model, name)
        assert seen["stop"] == want["stop"], (model, name)
