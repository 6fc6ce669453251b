"""The prompt set of `ubatch bench fidelity` and llama.cpp's recorded logits on it (ubatch/bench/data/fidelity/).

    cases(model)            the recorded prompts: name -> {"tokens", "kind", "rows", "kv"}
    llama_rows(model, case, kv) -> (rows int32[R], top_ids int32[R, 64], top_vals float32[R, 64])
    record(model, out_dir)  re-records with llama-cpp-python (run from a source checkout: the public
                            vectors' prompts are read from tests/data/realmodel)

Prompts per model: the public real-model vectors' single-sequence prompts (single32's 32-token prompt, the 4
greedy prompts, Gemma's 900-token long900 prompt), the chat prompt ("Say yes." in the model's chat
format; for Qwen exactly the 11 tokens of the issue), and two long prompts (~1,300 tokens: prose and C code
from this repository). llama.cpp: `llama_cpp.Llama(path, n_ctx=2048, n_threads=2, logits_all=True,
type_k=type_v=F32 or F16)` (no flash attention, n_batch = n_ubatch = 512), `eval(tokens)`, the 64 largest
logits of each recorded row (descending, ties by id). Short prompts: every row, f32 and f16 K/V; long
prompts: every 4th row (pos % 4 == 3) and the last one, f32 K/V."""
from __future__ import annotations

import json
import os
from typing import Dict, Tuple

import numpy as np

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "fidelity")
MODELS = {"qwen2.5-0.5b": "qwen2.5-coder-0.5b-q4_k_m", "gemma3-270m": "gemma3-270m-q4_k_m"}
ISSUE28_QWEN = [151644, 872, 198, 45764, 9834, 13, 151645, 198, 151644, 77091, 198]
CHAT = {"qwen2.5-0.5b": "<|im_start|>user\nSay yes.<|im_end|>\n<|im_start|>assistant\n",
        "gemma3-270m": "<start_of_turn>user\nSay yes.<end_of_turn>\n<start_of_turn>model\n"}
LONG_SOURCES = {"long_prose": "docs/models.md", "long_code": "csrc/compute/attention_vis.c"}
LONG_TOKENS = 1300
TOP = 64


def _meta_path(model: str) -> str:
    return os.path.join(DATA, MODELS[model] + ".json")


def cases(model: str) -> Dict[str, dict]:
    with open(_meta_path(model)) as f:
        return json.load(f)["cases"]


def meta(model: str) -> dict:
    with open(_meta_path(model)) as f:
        return json.load(f)


_NPZ: Dict[str, object] = {}


def llama_rows(model: str, case: str, kv: str) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    if model not in _NPZ:
        _NPZ[model] = np.load(os.path.join(DATA, MODELS[model] + ".npz"))
    z = _NPZ[model]
    k = f"{case}__{kv}"
    return z[k + "_rows"], z[k + "_ids"], z[k + "_vals"]


def top_k(row: np.ndarray, k: int = TOP) -> Tuple[np.ndarray, np.ndarray]:
    """The k largest entries of a float32 row, descending, ties by the lower id."""
    order = np.lexsort((np.arange(row.size), -row.astype(np.float64)))[:k]
    return order.astype(np.int32), row[order].astype(np.float32)


def _prompts(model: str, llm, repo: str) -> Dict[str, dict]:
    tag = MODELS[model]
    vec = os.path.join(repo, "tests", "data", "realmodel", tag)
    out: Dict[str, dict] = {}
    with open(os.path.join(vec, "decode", "single32.json")) as f:
        out["vec_single32"] = dict(tokens=json.load(f)["scenario"]["steps"][0]["tokens"], kind="short",
                                   source="public vectors: decode/single32.json, its 32-token prompt")
    with open(os.path.join(vec, "greedy.jsonl")) as f:
        for i, line in enumerate(x for x in f if x.strip()):
            out[f"vec_greedy{i}"] = dict(tokens=json.loads(line)["prompt_tokens"], kind="short",
                                         source=f"public vectors: greedy.jsonl prompt {i}")
    if model == "gemma3-270m":
        with open(os.path.join(vec, "decode", "long900.json")) as f:
            out["vec_long900"] = dict(tokens=json.load(f)["scenario"]["steps"][0]["tokens"], kind="long",
                                      source="public vectors: decode/long900.json, its 900-token prompt")
    toks = ISSUE28_QWEN if model == "qwen2.5-0.5b" else \
        llm.tokenize(CHAT[model].encode(), add_bos=True, special=True)
    out["issue28_chat"] = dict(tokens=list(toks), kind="short", source=f"the chat prompt {CHAT[model]!r}")
    for name, rel in LONG_SOURCES.items():
        with open(os.path.join(repo, rel), encoding="utf-8") as f:
            text = f.read()
        t = llm.tokenize(text.encode(), add_bos=True, special=False)[:LONG_TOKENS]
        out[name] = dict(tokens=list(t), kind="long", source=f"the first {LONG_TOKENS} tokens of {rel} "
                                                             f"(add_bos, no special parsing)")
    return out


def record(model: str, repo: str, out_dir: str = DATA) -> None:
    """Run llama-cpp-python on every prompt and write <tag>.npz / <tag>.json into out_dir."""
    import platform
    import time
    import llama_cpp
    from ubatch.model import fetch
    path = str(fetch.path(model))
    arrays: Dict[str, np.ndarray] = {}
    meta_cases: Dict[str, dict] = {}
    tok = llama_cpp.Llama(path, n_ctx=512, vocab_only=True, verbose=False)
    prompts = _prompts(model, tok, repo)
    del tok
    for kv, ggml_type in (("f32", 0), ("f16", 1)):
        llm = llama_cpp.Llama(path, n_ctx=2048, n_threads=2, logits_all=True, type_k=ggml_type,
                              type_v=ggml_type, verbose=False)
        for name, c in prompts.items():
            if kv == "f16" and c["kind"] != "short":
                continue
            n = len(c["tokens"])
            rows = np.arange(n) if c["kind"] == "short" else \
                np.unique(np.r_[np.arange(3, n, 4), n - 1])
            llm.reset()
            llm.eval(c["tokens"])
            scores = np.asarray(llm.scores[:n], dtype=np.float32)
            ids, vals = zip(*(top_k(scores[r]) for r in rows))
            arrays[f"{name}__{kv}_rows"] = rows.astype(np.int32)
            arrays[f"{name}__{kv}_ids"] = np.stack(ids)
            arrays[f"{name}__{kv}_vals"] = np.stack(vals)
            mc = meta_cases.setdefault(name, dict(c, kv=[]))
            mc["kv"].append(kv)
        del llm
    os.makedirs(out_dir, exist_ok=True)
    np.savez_compressed(os.path.join(out_dir, MODELS[model] + ".npz"), **arrays)
    flags = sorted({w for line in open("/proc/cpuinfo") if line.startswith("flags") for w in line.split()
                    if w in ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512bw", "avx512vl")}) \
        if os.path.exists("/proc/cpuinfo") else []
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor()) if os.path.exists("/proc/cpuinfo") else platform.processor()
    doc = dict(model=model, file=os.path.basename(path), llama_cpp_python=llama_cpp.__version__,
               how=("llama_cpp.Llama(path, n_ctx=2048, n_threads=2, logits_all=True, type_k=type_v=<kv>, "
                    "verbose=False); reset(); eval(tokens); top-64 of scores[row] (float32, descending, ties "
                    "by id); flash attention off (Llama's default), n_batch = n_ubatch = 512"),
               recorded=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), cpu=cpu, cpu_flags=flags,
               recorder="ubatch.bench.fidelity_data.record", cases=meta_cases)
    with open(os.path.join(out_dir, MODELS[model] + ".json"), "w") as f:
        json.dump(doc, f, indent=1)


if __name__ == "__main__":   # python -m ubatch.bench.fidelity_data [model ...] (from a source checkout)
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for m in sys.argv[1:] or list(MODELS):
        record(m, root)
        print("recorded", m, flush=True)
