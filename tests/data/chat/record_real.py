"""Records the prompt token ids llama-cpp-python 0.3.36's Llama.create_chat_completion builds on the two real
test models (vocab_only=True: the vocabulary and metadata, no weights), for tests/chat/test_chat_realmodel.py:

    python tests/data/chat/record_real.py     # writes tests/data/chat/real_prompts.json

Llama.create_completion is replaced by a recorder of its `prompt` argument (token ids, or the text of the
handlers that pass text), so nothing is generated. Model paths: ubatch.model.fetch (the lead's cache)."""
import copy
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from real_cases import CASES  # noqa: E402,F401 - the cases, importable without llama-cpp-python

import llama_cpp  # noqa: E402
from ubatch.model import fetch  # noqa: E402



class Stop(Exception):
    pass


def record(path):
    out = {}
    for name, (init, call) in CASES.items():
        llm = llama_cpp.Llama(path, vocab_only=True, verbose=False, **init)
        seen = {}

        def fake(prompt, **kw):
            seen["prompt"] = prompt if isinstance(prompt, str) else [int(t) for t in prompt]
            seen["stop"] = kw.get("stop")
            raise Stop

        llm.create_completion = fake
        try:
            llm.create_chat_completion(**copy.deepcopy(call))
        except Stop:
            pass
        except Exception as e:                   # noqa: BLE001 - the failure is the recording
            seen = {"error": type(e).__name__}
        seen["chat_format"] = llm.chat_format
        out[name] = seen
    return out


if __name__ == "__main__":
    data = {"llama_cpp_version": llama_cpp.__version__,
            "models": {m: record(str(fetch.path(m))) for m in ("gemma3-270m", "qwen2.5-0.5b")}}
    with open(os.path.join(HERE, "real_prompts.json"), "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, ensure_ascii=False, sort_keys=True)
        f.write("\n")
