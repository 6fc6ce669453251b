"""Records llama.cpp's greedy continuations of prompts from ubatch/engine/data/prompts.jsonl (the prompt ids in
PROMPT_IDS) on the two real models, through llama-cpp-python 0.3.36's Llama (eval, then the logits of
each step's row, llama_get_logits_ith(ctx, -1)), with llama-cpp-python's default context (f16 K/V) and 2 threads. Writes
llama_cpp_greedy_<model>.jsonl next to this file. Run from the repository root:

    python tests/data/engine/record_llama_cpp.py
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
PROMPT_IDS = [6, 14, 20, 25, 44, 46, 49, 59]
N_GEN = 24


def main() -> None:
    import llama_cpp
    from llama_cpp import Llama
    from ubatch.engine.prompts import load_prompts
    from ubatch.model import fetch

    prompts = {p["id"]: p["prompt"] for p in load_prompts()}
    for name in ("gemma3-270m", "qwen2.5-0.5b"):
        path = str(fetch.path(name))
        llm = Llama(model_path=path, n_ctx=512, n_batch=512, n_threads=2, n_threads_batch=2, verbose=False,
                    logits_all=False)
        rows = []
        for pid in PROMPT_IDS:
            text = prompts[pid]
            toks = llm.tokenize(text.encode(), add_bos=True, special=True)
            llm.reset()
            llm.eval(toks)
            gen, margins = [], []
            for _ in range(N_GEN):
                ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)      # the last decoded row
                logits = np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).astype(np.float32)
                order = np.argsort(-logits, kind="stable")[:2]
                gen.append(int(order[0]))
                margins.append(float(logits[order[0]] - logits[order[1]]))
                llm.eval([int(order[0])])
            rows.append({"prompt_id": pid, "prompt": text, "prompt_tokens": toks, "tokens": gen, "margins": margins,
                         "text": llm.detokenize(gen).decode("utf-8", errors="replace")})
        out = os.path.join(HERE, f"llama_cpp_greedy_{name}.jsonl")
        with open(out, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        print(f"wrote {out} (llama-cpp-python {llama_cpp.__version__})")
        del llm


if __name__ == "__main__":
    main()
