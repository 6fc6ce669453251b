"""The recorders' shared llama.cpp run (record_arch.py, record_kv_quant.py; tests never import this file): the
scenario of arch_scenario.py decoded through llama-cpp-python's low-level API under one configuration, every
row's logits returned. The caller passes the `llama_cpp` module, so this file imports no llama_cpp itself."""
import ctypes

import numpy as np

import arch_scenario as S


def run_scenario(L, path: str, cfg: dict, type_k: int = 0, type_v: int = 0, flash_attn: int = 0) -> np.ndarray:
    """float32[rows, n_vocab]: the scenario's logits (rows in scenario order) with the model at `path` under
    `cfg` (n_ubatch, n_threads, kv_unified; n_ctx S.N_CTX, n_batch 512), K/V types type_k / type_v (GGML type
    ids, 0 = f32) and flash attention off (0) or on (1). SystemExit naming what llama.cpp refused."""
    model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
    if not model:
        raise SystemExit(f"llama.cpp could not load {path}")
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = S.N_CTX, 512, cfg["n_ubatch"], S.N_SEQ
    cp.n_threads = cp.n_threads_batch = cfg["n_threads"]
    cp.kv_unified = cfg["kv_unified"]
    cp.type_k, cp.type_v = type_k, type_v
    cp.flash_attn_type = flash_attn            # 0 LLAMA_FLASH_ATTN_TYPE_DISABLED, 1 enabled
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        raise SystemExit(f"llama.cpp refused the context (type_k {type_k}, type_v {type_v}, fa {flash_attn})")
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    out = []
    for step in S.steps():
        n = len(step)
        b = L.llama_batch_init(n, 0, 1)
        b.n_tokens = n
        for i, (tok, pos, seq) in enumerate(step):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = tok, pos, 1, True
            b.seq_id[i][0] = seq
        rc = L.llama_decode(ctx, b)
        if rc != 0:
            raise SystemExit(f"llama_decode returned {rc}")
        for i in range(n):
            p = L.llama_get_logits_ith(ctx, i)
            out.append(np.ctypeslib.as_array(ctypes.cast(p, ctypes.POINTER(ctypes.c_float)), (n_vocab,)).copy())
        L.llama_batch_free(b)
    L.llama_free(ctx)
    L.llama_model_free(model)
    return np.stack(out).astype(np.float32)
