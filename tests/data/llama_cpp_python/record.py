"""Records llama-cpp-python 0.3.36's outputs for tests/test_llama_cpp*.py (run by hand where it is installed:
`python tests/data/llama_cpp_python/record.py`; CI does not have llama-cpp-python and reads the JSON/NPY).
The same scripts run against ubatch.llama_cpp in the tests."""
from __future__ import annotations

import ctypes
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, ROOT)
TINY = os.path.join(ROOT, "ubatch", "models", "tiny-llama-f32.gguf")

import llama_cpp  # noqa: E402  (the real one)

_quiet = llama_cpp.llama_log_callback(lambda level, text, user: None)
llama_cpp.llama_log_set(_quiet, None)
L = llama_cpp

sys.path.insert(0, HERE)
from scripts import (CHAINS, TOKENIZE_TEXTS, run_chain, script_errors, script_lowlevel_greedy,  # noqa: E402
                                     script_llama_generate, script_layouts, script_dry)


def record_sampler_chains(out: dict, logits: np.ndarray) -> None:
    out["chains"] = {}
    for name in CHAINS:
        out["chains"][name] = run_chain(L, name, logits, n_draws=24)


def real_model(path: str, name: str, out: dict) -> None:
    llm = L.Llama(path, n_ctx=512, verbose=False, logits_all=False)
    rec = {"n_vocab": llm.n_vocab(), "bos": llm.token_bos(), "eos": llm.token_eos(), "n_ctx": llm.n_ctx(),
           "metadata": llm.metadata, "tokenize": [], "pieces": {}, "greedy": [], "chat": None}
    for text in TOKENIZE_TEXTS:
        for add_bos in (True, False):
            for special in (False, True):
                ids = llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=special)
                rec["tokenize"].append({"text": text, "add_bos": add_bos, "special": special, "ids": ids,
                                        "detok": llm.detokenize(ids).decode("utf-8", "replace")})
    for t in range(0, llm.n_vocab(), max(llm.n_vocab() // 300, 1)):
        buf = ctypes.create_string_buffer(64)
        n = L.llama_token_to_piece(llm._model.vocab, t, buf, 64, 0, False)
        ns = L.llama_token_to_piece(llm._model.vocab, t, buf, 64, 0, True)
        rec["pieces"][str(t)] = [buf.raw[:n].hex() if n >= 0 else n, ns]
    # greedy completions with the top-2 logit margin of every generated step (ubatch's kernels are not
    # llama.cpp's bit for bit: the tests compare only where the margin is comfortable)
    for prompt in ["The capital of France is", "def fibonacci(n):", "1, 2, 3, 4, 5,", "Once upon a time"]:
        llm2 = L.Llama(path, n_ctx=256, verbose=False, logits_all=True)
        r = llm2.create_completion(prompt, max_tokens=16, temperature=0.0)
        n_prompt = r["usage"]["prompt_tokens"]
        toks = [int(t) for t in llm2.input_ids[:llm2.n_tokens]]
        sc = llm2.scores[n_prompt - 1: llm2.n_tokens - 1]
        top2 = np.sort(sc, axis=1)[:, -2:]
        rec["greedy"].append({"prompt": prompt, "text": r["choices"][0]["text"],
                              "finish_reason": r["choices"][0]["finish_reason"], "usage": r["usage"],
                              "prompt_tokens": toks[:n_prompt], "completion_tokens": toks[n_prompt:],
                              "margins": (top2[:, 1] - top2[:, 0]).round(4).tolist()})
        llm2.close()
    try:
        r = llm.create_chat_completion([{"role": "user", "content": "Say hello."}], max_tokens=12, temperature=0.0)
        rec["chat"] = {"content": r["choices"][0]["message"]["content"],
                       "finish_reason": r["choices"][0]["finish_reason"], "usage": r["usage"]}
    except Exception as e:  # a template jinja cannot render
        rec["chat"] = {"error": str(e)}
    out[name] = rec
    llm.close()


def main() -> None:
    from ubatch.model import fetch
    out: dict = {"llama_cpp_python": llama_cpp.__version__}
    # logits of a real model for the sampler tests: one row from qwen2.5 after a short prompt
    qwen = str(fetch.path("qwen2.5-0.5b"))
    llm = L.Llama(qwen, n_ctx=256, verbose=False, logits_all=True)
    llm.eval(llm.tokenize(b"My name is", add_bos=True))
    logits = np.array(llm.scores[llm.n_tokens - 1], np.float32)
    llm.close()
    np.save(os.path.join(HERE, "sampler_logits_qwen.npy"), logits)
    record_sampler_chains(out, logits)
    out["dry"] = script_dry(L, qwen, logits)
    out["layouts"] = script_layouts(L)
    out["tiny"] = {"lowlevel_greedy": script_lowlevel_greedy(L, TINY), "errors": script_errors(L, TINY),
                   "generate": script_llama_generate(L, TINY)}
    real_model(qwen, "qwen2.5-0.5b", out)
    real_model(str(fetch.path("gemma3-270m")), "gemma3-270m", out)
    with open(os.path.join(HERE, "reference.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    print("written", os.path.join(HERE, "reference.json"))


if __name__ == "__main__":
    main()
