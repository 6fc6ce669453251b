"""Records llama.cpp's logits on the tiny architecture models of tests/model/arch_gguf.py with llama-cpp-python 0.3.36
(python tests/model/record_arch_dense.py [variant ...]); the tests never import this file.

For each variant: the GGUF is written by arch_gguf.write, loaded with llama.cpp's default model parameters and
decoded in CONFIGS (llama.cpp's default context parameters except n_ctx / n_batch / n_ubatch / n_threads, f32
K/V, flash attention off) through the low-level API: one prompt of PROMPT_LEN tokens (seeded) with logits on
every row, then N_GREEDY single-token steps on configuration 0's greedy tokens (each configuration decodes the
same tokens, so the rows correspond); for SHIFT_RUNS also a K-shift scenario (the prompt, llama_memory_seq_add
of every cell by SHIFT, one token). Written: tests/data/arch_dense/<variant>.npz (float32 logits [rows, n_vocab]
per configuration, the tokens) and a line in tests/data/arch_dense/index.json (the GGUF's sha256, the configurations,
the llama-cpp-python version, the date)."""
from __future__ import annotations

import ctypes
import datetime
import json
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(HERE), "support")]
import arch_gguf  # noqa: E402

import llama_cpp as L  # noqa: E402

OUT = os.path.join(os.path.dirname(HERE), "data", "arch_dense")
PROMPT_LEN, N_GREEDY = 20, 4
# n_ctx 256 is llama.cpp's smallest (it pads to 256); phi3-long: the same model in a 512-cell context, beyond
# its rope.scaling.original_context_length (256), where llama.cpp switches to the long rope factors.
CONFIGS = [dict(n_batch=512, n_ubatch=512, n_threads=2, flash_attn=False),
           dict(n_batch=512, n_ubatch=1, n_threads=1, flash_attn=False),
           dict(n_batch=512, n_ubatch=7, n_threads=2, flash_attn=True)]
RUNS = {name: (name, 256) for name in arch_gguf.VARIANTS}
RUNS["phi3-long"] = ("phi3", 512)
RUNS["llama-longrope-long"] = ("llama-longrope", 512)
# context overrides of the YaRN model (llama_context_params): another freq_scale (YaRN's attention factor
# follows it), and rope_scaling_type LINEAR (YaRN off)
CTX = {"llama-yarn-ctx-scale": dict(rope_freq_scale=0.5), "llama-yarn-ctx-linear": dict(rope_scaling_type=1)}
RUNS.update({r: ("llama-yarn", 256) for r in CTX})
# K-shift scenario (seq_add): the prompt without logits, every cell moved by SHIFT, then SHIFT_TOKEN at
# position PROMPT_LEN + SHIFT: llama.cpp re-rotates cached K with the same rope parameters as the forward.
SHIFT_RUNS = ("llama-yarn", "llama-rope-freqs", "phi3", "smollm3")
SHIFT, SHIFT_TOKEN = 9, 77


def prompt_tokens(run: str) -> list:
    rng = np.random.default_rng(abs(hash_str(run)) % (2**32))
    return rng.integers(10, 250, size=PROMPT_LEN).tolist()


def hash_str(s: str) -> int:
    import hashlib
    return int(hashlib.sha256(s.encode()).hexdigest()[:8], 16)


def decode(ctx, n_vocab: int, tokens, pos0: int, all_logits: bool) -> np.ndarray:
    n = len(tokens)
    b = L.llama_batch_init(n, 0, 1)
    try:
        b.n_tokens = n
        for i, t in enumerate(tokens):
            b.token[i] = int(t)
            b.pos[i] = pos0 + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = 1 if (all_logits or i == n - 1) else 0
        rc = L.llama_decode(ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        rows = range(n) if all_logits else [n - 1]
        out = np.empty((len(rows), n_vocab), dtype=np.float32)
        for r, i in enumerate(rows):
            p = L.llama_get_logits_ith(ctx, i)
            out[r] = np.ctypeslib.as_array(ctypes.cast(p, ctypes.POINTER(ctypes.c_float)), shape=(n_vocab,))
        return out
    finally:
        L.llama_batch_free(b)


def run_config(path: str, n_ctx: int, cfg: dict, prompt, greedy, ctx_over=None) -> np.ndarray:
    mp = L.llama_model_default_params()
    model = L.llama_model_load_from_file(path.encode(), mp)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path}")
    try:
        n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
        cp = L.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch = n_ctx, cfg["n_batch"], cfg["n_ubatch"]
        cp.n_threads = cp.n_threads_batch = cfg["n_threads"]
        cp.n_seq_max = 1
        for k, v in (ctx_over or {}).items():
            setattr(cp, k, v)
        cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_ENABLED if cfg["flash_attn"] else L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        cp.type_k = cp.type_v = L.GGML_TYPE_F32
        ctx = L.llama_init_from_model(model, cp)
        if not ctx:
            raise RuntimeError("llama_init_from_model failed")
        try:
            if greedy == "shift":
                decode(ctx, n_vocab, prompt, 0, False)
                L.llama_memory_seq_add(L.llama_get_memory(ctx), 0, 0, len(prompt), SHIFT)
                return decode(ctx, n_vocab, [SHIFT_TOKEN], len(prompt) + SHIFT, False), []
            rows = [decode(ctx, n_vocab, prompt, 0, True)]
            toks = list(greedy) if greedy is not None else []
            for g in range(N_GREEDY):
                if greedy is None:
                    toks.append(int(np.argmax(rows[-1][-1])))
                rows.append(decode(ctx, n_vocab, [toks[g]], len(prompt) + g, False))
            return np.concatenate(rows), toks
        finally:
            L.llama_free(ctx)
    finally:
        L.llama_model_free(model)


def record(run: str, index: dict) -> None:
    variant, n_ctx = RUNS[run]
    prompt = prompt_tokens(run)
    with tempfile.TemporaryDirectory() as d:
        path = arch_gguf.write(os.path.join(d, variant + ".gguf"), variant)
        digest = arch_gguf.sha256(path)
        out, greedy = {}, None
        for ci, cfg in enumerate(CONFIGS):
            logits, toks = run_config(path, n_ctx, cfg, prompt, greedy, CTX.get(run))
            greedy = toks if greedy is None else greedy
            out[f"c{ci}_logits"] = logits
            if run in SHIFT_RUNS:
                out[f"c{ci}_shift"] = run_config(path, n_ctx, cfg, prompt, "shift")[0]
    np.savez_compressed(os.path.join(OUT, run + ".npz"), prompt=np.array(prompt, dtype=np.int32),
                        greedy=np.array(greedy, dtype=np.int32), **out)
    index[run] = dict(variant=variant, gguf_sha256=digest, n_ctx=n_ctx, configs=CONFIGS,
                      prompt_len=PROMPT_LEN, n_greedy=N_GREEDY, type_kv="f32",
                      shift=dict(delta=SHIFT, token=SHIFT_TOKEN) if run in SHIFT_RUNS else None,
                      ctx_override=CTX.get(run),
                      llama_cpp_python=L.__version__, recorded=datetime.date.today().isoformat())
    d = [float(np.abs(out["c0_logits"] - out[f"c{ci}_logits"]).max()) for ci in range(1, len(CONFIGS))]
    print(f"{run}: sha256 {digest[:12]}, greedy {greedy}, llama.cpp max |c0 - ci| {d}")


def main(argv) -> None:
    os.makedirs(OUT, exist_ok=True)
    ipath = os.path.join(OUT, "index.json")
    index = json.load(open(ipath)) if os.path.exists(ipath) else {}
    for run in (argv or list(RUNS)):
        record(run, index)
    with open(ipath, "w") as f:
        json.dump(dict(sorted(index.items())), f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
