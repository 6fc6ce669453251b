"""Records what LangChain's and LlamaIndex's llama.cpp integrations return over the REAL llama-cpp-python 0.3.36
(greedy, repeat penalty off), with the greedy tokens and every step's top-2 logit margin of the same prompts, into
frameworks.json. Needs llama-cpp-python, langchain-community and llama-index-llms-llama-cpp installed; run from the
repository root: `python tests/data/llama_cpp_python/record_frameworks.py`. tests/dropin/test_llama_cpp_frameworks.py
runs the same integration calls over ubatch.llama_cpp (install_as_llama_cpp) and compares."""
import json
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from frameworks_cases import (CASES, COMPLETION, COUNTING, HELLO, MAX_TOKENS, N_CTX, ROPES,  # noqa: E402
                              llamaindex_chat_prompt, run_frameworks)

warnings.simplefilter("ignore")


def llama_is_eog(lib, llm, t: int) -> bool:
    return bool(lib.llama_vocab_is_eog(lib.llama_model_get_vocab(llm.model), t))


def greedy_with_margins(llm, tokens, lib=None):
    """Greedy tokens of the raw logits with each step's top-2 margin (the context's own eval/scores); lib is the
    llama_cpp module the Llama comes from."""
    if lib is None:
        import llama_cpp as lib
    llm.reset()
    out, margins = [], []
    llm.eval(tokens)
    for _ in range(MAX_TOKENS):
        row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        top = np.argsort(row)[::-1][:2]
        margins.append(float(row[top[0]] - row[top[1]]))
        t = int(top[0])
        out.append(t)
        if llama_is_eog(lib, llm, t):
            break
        llm.eval([t])
    return out, margins


def greedy_prompts(llm, name):
    """(label, prompt tokens) of every greedy prompt the framework calls decode: the completions, LlamaIndex's
    chat prompt, the GGUF chat template's rendering of HELLO (models with a template)."""
    import llama_cpp.llama_chat_format as cf
    out = [("completion", llm.tokenize(COMPLETION.encode("utf-8"), special=True)),
           ("counting", llm.tokenize(COUNTING.encode("utf-8"), special=True)),
           ("llamaindex_chat", llm.tokenize(llamaindex_chat_prompt().encode("utf-8"), special=True))]
    if CASES[name]["chats"]:
        eos, bos = llm.token_eos(), llm.token_bos()
        fmt = cf.Jinja2ChatFormatter(template=llm.metadata["tokenizer.chat_template"], stop_token_ids=[eos],
                                     eos_token=llm._model.token_get_text(eos),
                                     bos_token=llm._model.token_get_text(bos) if bos != -1 else "")
        res = fmt(messages=HELLO)
        out.append(("chat", llm.tokenize(res.prompt.encode("utf-8"), add_bos=not res.added_special, special=True)))
    return out


def main() -> None:
    import llama_cpp
    import llama_cpp.llama_chat_format
    from ubatch.model import fetch
    result = {"llama_cpp_python": llama_cpp.__version__}
    for name in CASES:
        path = str(fetch.path(name))
        rec = {"frameworks": run_frameworks(path, chat=bool(CASES[name]["chats"]))}
        greedy = {}
        for rope, kw in ROPES.items():
            llm = llama_cpp.Llama(path, n_ctx=N_CTX, logits_all=True, verbose=False, **kw)
            for label, toks in greedy_prompts(llm, name):
                out, m = greedy_with_margins(llm, toks)
                greedy[f"{rope}:{label}"] = {"prompt_tokens": toks, "tokens": out, "margins": m}
            llm.close()
        rec["greedy"] = greedy
        result[name] = rec
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "frameworks.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
