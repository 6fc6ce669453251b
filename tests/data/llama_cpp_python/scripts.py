"""Client scripts written against llama-cpp-python's API, run unchanged against `L` = the real `llama_cpp`
(record.py, to record reference outputs) or `ubatch.llama_cpp` (tests/test_llama_cpp*.py, to compare)."""
from __future__ import annotations

import ctypes

import numpy as np

TOKENIZE_TEXTS = ["Hello, world!", "  leading spaces and\ttabs\nnewline", "naïve café – 東京 🚀",
                  "<|im_start|>user\nhi<|im_end|>", "<start_of_turn>user\nhi<end_of_turn>", "1234567890 3.14159",
                  "def f(x):\n    return x**2  # square", ""]

# sampler chains: (initialiser, args) in order; "accept" = tokens accepted before the draws (penalty history)
CHAINS = {
    "greedy": [("greedy", ())],
    "dist_seed_42": [("dist", (42,))],
    "dist_seed_default_chain": [("top_k", (40,)), ("typical", (1.0, 1)), ("top_p", (0.95, 1)), ("min_p", (0.05, 1)),
                                ("temp", (0.8,)), ("dist", (1337,))],
    "topk5_temp1.5_dist": [("top_k", (5,)), ("temp", (1.5,)), ("dist", (7,))],
    "topk200_topp0.9_dist": [("top_k", (200,)), ("top_p", (0.9, 1)), ("dist", (99,))],
    "topp0.5_unsorted_dist": [("top_p", (0.5, 3)), ("dist", (5,))],
    "minp0.1_unsorted_dist": [("min_p", (0.1, 1)), ("temp", (0.7,)), ("dist", (11,))],
    "minp0.9_minkeep20_dist": [("min_p", (0.9, 20)), ("dist", (12,))],
    "temp0_greedy_via_dist": [("temp", (0.0,)), ("dist", (3,))],
    "penalties_topk_dist": [("penalties", (None, 64, 1.3, 0.2, 0.4)), ("top_k", (20,)), ("dist", (2024,))],
    "penalties_greedy": [("penalties", (None, 8, 1.8, 0.5, 0.5)), ("greedy", ())],
    "penalties_window3_greedy": [("penalties", (None, 3, 1.5, 0.0, 2.0)), ("greedy", ())],
    "typical0.7_dist": [("typical", (0.7, 1)), ("dist", (8,))],
    "temp_ext_dist": [("top_k", (50,)), ("temp_ext", (0.8, 0.5, 1.0)), ("dist", (13,))],
    "top_n_sigma_dist": [("top_n_sigma", (1.5,)), ("dist", (21,))],
    "xtc_dist": [("top_k", (30,)), ("xtc", (0.9, 0.05, 1, 17)), ("dist", (18,))],
    "mirostat_v1": [("temp", (0.9,)), ("mirostat", (None, 31, 5.0, 0.1, 100))],
    "mirostat_v2": [("temp", (0.9,)), ("mirostat_v2", (32, 5.0, 0.1))],
    "logit_bias_greedy": [("logit_bias", ([(11, 50.0), (0, -100.0), (42, 30.0)],)), ("greedy", ())],
}
ACCEPT_BEFORE = {"penalties_topk_dist": None, "penalties_greedy": None, "penalties_window3_greedy": None}   # None: the top 10 ids of the logits


def _init(L, name, args, n_vocab):
    args = tuple(n_vocab if a is None else a for a in args)
    if name == "logit_bias":
        items = args[0]
        arr = (L.llama_logit_bias * len(items))(*[L.llama_logit_bias(t, b) for t, b in items])
        return L.llama_sampler_init_logit_bias(n_vocab, len(items), arr)
    return getattr(L, f"llama_sampler_init_{name}")(*args)


def run_chain(L, chain_name, logits, n_draws=24):
    """Builds the chain, then n_draws times: candidates from the logits (unsorted, as llama_sampler_sample
    builds them), apply, read selected / size / sorted, accept the token. Returns the per-draw records."""
    n_vocab = logits.shape[0]
    chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    for name, args in CHAINS[chain_name]:
        L.llama_sampler_chain_add(chain, _init(L, name, args, n_vocab))
    if chain_name in ACCEPT_BEFORE:
        for t in np.argsort(-logits, kind="stable")[:10].tolist():
            L.llama_sampler_accept(chain, int(t))
    out = []
    for _ in range(n_draws):
        data = (L.llama_token_data * n_vocab)()
        view = np.frombuffer(data, dtype=np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")]))
        view["id"] = np.arange(n_vocab)
        view["logit"] = logits
        view["p"] = 0
        cur = L.llama_token_data_array(data, n_vocab, -1, False)
        L.llama_sampler_apply(chain, ctypes.byref(cur))
        tok = int(cur.data[cur.selected].id)
        out.append({"token": tok, "size": int(cur.size), "selected": int(cur.selected), "sorted": bool(cur.sorted)})
        L.llama_sampler_accept(chain, tok)
    L.llama_sampler_free(chain)
    return out


def _ctx(L, path, **cp_fields):
    mp = L.llama_model_default_params()
    model = L.llama_model_load_from_file(path.encode(), mp)
    cp = L.llama_context_default_params()
    for k, v in cp_fields.items():
        setattr(cp, k, v)
    ctx = L.llama_init_from_model(model, cp)
    return model, ctx


def script_lowlevel_greedy(L, path):
    """The batched-generation idiom: three prompts in one batch filled in place, a shared-prefix fork with
    llama_memory_seq_cp, i_batch bookkeeping with llama_get_logits_ith, greedy sampling, seq_rm of a finished
    sequence. Returns the tokens generated per sequence."""
    model, ctx = _ctx(L, path, n_ctx=512, n_batch=64, n_seq_max=4)
    mem = L.llama_get_memory(ctx)
    prompts = [[1, 15, 27, 3, 9], [1, 200, 5], [1, 15, 27, 3, 9]]
    batch = L.llama_batch_init(64, 0, 4)
    n = 0
    i_batch = []
    for s, p in enumerate(prompts[:2]):
        for j, t in enumerate(p):
            batch.token[n] = t
            batch.pos[n] = j
            batch.n_seq_id[n] = 1
            batch.seq_id[n][0] = s
            batch.logits[n] = j == len(p) - 1
            n += 1
        i_batch.append(n - 1)
    batch.n_tokens = n
    rc = [L.llama_decode(ctx, batch)]
    L.llama_memory_seq_cp(mem, 0, 2, -1, -1)          # seq 2 forks seq 0's prompt
    i_batch.append(i_batch[0])
    smpl = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    L.llama_sampler_chain_add(smpl, L.llama_sampler_init_greedy())
    outs = [[] for _ in prompts]
    n_past = [len(p) for p in prompts]
    for step in range(8):
        new = []
        for s in range(3):
            if step == 5 and s == 1:
                continue
            new.append((s, L.llama_sampler_sample(smpl, ctx, i_batch[s])))
        if step == 5:
            L.llama_memory_seq_rm(mem, 1, -1, -1)     # free a finished sequence
        batch.n_tokens = 0
        for k, (s, tok) in enumerate(new):
            outs[s].append(tok)
            batch.token[k] = tok
            batch.pos[k] = n_past[s]
            batch.n_seq_id[k] = 1
            batch.seq_id[k][0] = s
            batch.logits[k] = True
            i_batch[s] = k
            n_past[s] += 1
        batch.n_tokens = len(new)
        if step == 5:
            del outs[1][5:]
        rc.append(L.llama_decode(ctx, batch))
    pos_max = [L.llama_memory_seq_pos_max(mem, s) for s in range(4)]
    logits0 = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, 0), shape=(L.llama_vocab_n_tokens(
        L.llama_model_get_vocab(model)),))
    res = {"tokens": outs, "rc": rc, "pos_max": pos_max, "last_logits_head": logits0[:8].round(3).tolist()}
    L.llama_sampler_free(smpl)
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)
    return res


def script_errors(L, path):
    """Return codes for the failures clients meet: a context too small for the tokens, a seq id beyond
    n_seq_max, positions that do not continue the sequence, an invalid token, a too-long batch for get_one."""
    res = {}
    model, ctx = _ctx(L, path, n_ctx=256, n_batch=64, n_seq_max=1)
    res["n_ctx"], res["n_batch"], res["n_ubatch"], res["n_seq_max"] = (
        L.llama_n_ctx(ctx), L.llama_n_batch(ctx), L.llama_n_ubatch(ctx), L.llama_n_seq_max(ctx))
    b = L.llama_batch_init(64, 0, 2)
    codes = []
    for r in range(5):                       # 5 x 64 tokens into 256 cells: the 5th finds no slot
        for i in range(64):
            b.token[i] = (i * 7 + r) % 256
            b.pos[i] = r * 64 + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = i == 63
        b.n_tokens = 64
        codes.append(L.llama_decode(ctx, b))
    res["fill_codes"] = codes
    res["pos_max_after_full"] = L.llama_memory_seq_pos_max(L.llama_get_memory(ctx), 0)
    L.llama_memory_clear(L.llama_get_memory(ctx), True)
    b.n_tokens = 1
    b.token[0], b.pos[0], b.seq_id[0][0], b.logits[0] = 5, 0, 1, 1      # seq 1 with n_seq_max = 1
    res["seq_beyond_n_seq_max"] = L.llama_decode(ctx, b)
    b.seq_id[0][0] = 0
    b.token[0] = 256                                                    # token id = n_vocab
    res["invalid_token"] = L.llama_decode(ctx, b)
    b.token[0] = 5
    res["ok_after_errors"] = L.llama_decode(ctx, b)
    b.pos[0] = 7                                                        # seq 0 holds pos 0: 7 does not continue it
    res["non_consecutive_pos"] = L.llama_decode(ctx, b)
    res["logits_ith_invalid_is_null"] = not bool(L.llama_get_logits_ith(ctx, 5))
    toks = (L.llama_token * 3)(4, 5, 6)
    res["get_one_after_reset"] = (L.llama_memory_seq_rm(L.llama_get_memory(ctx), -1, -1, -1),
                                  L.llama_decode(ctx, L.llama_batch_get_one(toks, 3)))
    L.llama_batch_free(b)
    L.llama_free(ctx)
    model2, ctx2 = _ctx(L, path, n_ctx=256, n_batch=64, n_seq_max=2)
    res["n_seq_max_2"] = (L.llama_n_ctx(ctx2), L.llama_n_ctx_seq(ctx2), L.llama_n_seq_max(ctx2))
    L.llama_free(ctx2)
    L.llama_model_free(model2)
    L.llama_model_free(model)
    return res


def script_llama_generate(L, path):
    """The Llama class on token prompts: greedy and seeded generate, create_completion's usage/finish,
    eval + sample, reset and n_ctx/n_batch derivation."""
    llm = L.Llama(path, n_ctx=200, n_batch=300, verbose=False, seed=1234, n_gpu_layers=-1, f16_kv=True)
    res = {"n_ctx": llm.n_ctx(), "n_batch": llm.n_batch, "n_vocab": llm.n_vocab()}
    g = llm.generate([1, 2, 3, 4], temp=0.0)
    res["greedy"] = [next(g) for _ in range(12)]
    g.close()
    llm.set_seed(42)
    g = llm.generate([5, 6, 7], temp=0.9, top_k=40, top_p=0.9, repeat_penalty=1.1)
    res["seeded"] = [next(g) for _ in range(12)]
    g.close()
    llm.reset()
    llm.eval([9, 8, 7, 6])
    res["eval_sample_greedy"] = llm.sample(temp=0.0)
    res["n_tokens_after_eval"] = llm.n_tokens
    llm.set_seed(77)
    res["sample_seeded"] = [llm.sample(temp=1.0, top_k=0, top_p=1.0, min_p=0.0) for _ in range(3)]
    llm2 = L.Llama(path, n_ctx=128, verbose=False, seed=99)
    outs = []
    for _ in range(2):                          # the default seed chain: random.Random(99) each call
        llm2.reset()
        g = llm2.generate([10, 11, 12], temp=0.8)
        outs.append([next(g) for _ in range(6)])
        g.close()
    res["seeded_repeat"] = outs
    llm.close()
    llm2.close()
    return res


STRUCTS = ["llama_batch", "llama_model_params", "llama_context_params", "llama_sampler_chain_params",
           "llama_token_data", "llama_token_data_array", "llama_logit_bias", "llama_chat_message",
           "llama_perf_context_data", "llama_perf_sampler_data", "llama_model_kv_override", "llama_sampler_i",
           "llama_sampler", "llama_model_quantize_params"]


def script_layouts(L):
    """Struct layouts (field, offset, size) and the default params' values."""
    out = {"structs": {}, "defaults": {}, "constants": {}}
    for name in STRUCTS:
        st = getattr(L, name)
        out["structs"][name] = [[f[0], getattr(st, f[0]).offset, getattr(st, f[0]).size] for f in st._fields_] + \
            [["sizeof", ctypes.sizeof(st), 0]]
    for fn in ("llama_model_default_params", "llama_context_default_params", "llama_sampler_chain_default_params"):
        p = getattr(L, fn)()
        vals = {}
        for f in p._fields_:
            v = getattr(p, f[0])
            if isinstance(v, (int, float, bool)):
                vals[f[0]] = round(v, 6) if isinstance(v, float) else v
            else:
                vals[f[0]] = bool(v) if not isinstance(v, (bytes, type(None))) else v
        out["defaults"][fn] = vals
    for n in dir(L):
        if n.isupper() and isinstance(getattr(L, n), int) and not isinstance(getattr(L, n), bool):
            out["constants"][n] = getattr(L, n)
    out["max_parallel_sequences"] = L.llama_max_parallel_sequences()
    out["max_devices"] = L.llama_max_devices()
    out["supports_mmap"] = L.llama_supports_mmap()
    out["supports_gpu_offload"] = L.llama_supports_gpu_offload()
    return out


DRY_CASES = [([10, 20, 30, 40, 10, 20, 30, 40, 10, 20, 30], None, 64),
             ([10, 20, 30, 40, 10, 20, 30, 40, 10, 20, 30], None, 6),
             ([10, 20, 25, 40, 10, 20, 25, 40, 10, 20, 25], [b":"], 64),       # 25 = ":" in qwen2.5
             ([10, 20, 30, 25, 40, 10, 20, 30, 25, 40, 10, 20, 30], [b":", b"\n"], 64),
             ([5, 6, 7, 5, 6, 7, 5, 6, 7, 5, 6, 8, 5, 6], [b"\n"], 64),
             ([1, 2] * 13 + [1], None, 64),
             ([10, 20, 30, 40, 10, 20, 30, 40, 10, 20, 30], None, -1)]


def script_dry(L, path, logits):
    """The DRY sampler (0.3.36's 7-argument form) after accepted histories with repeats and breakers: the
    candidates whose logit it changed, with their new logits."""
    mp = L.llama_model_default_params()
    mp.vocab_only = True
    model = L.llama_model_load_from_file(path.encode(), mp)
    vocab = L.llama_model_get_vocab(model)
    n = logits.shape[0]
    out = []
    for hist, breakers, last_n in DRY_CASES:
        arr = (ctypes.c_char_p * len(breakers))(*breakers) if breakers else None
        smpl = L.llama_sampler_init_dry(vocab, 0.8, 1.75, 2, last_n, arr, len(breakers) if breakers else 0)
        for t in hist:
            L.llama_sampler_accept(smpl, t)
        data = (L.llama_token_data * n)()
        view = np.frombuffer(data, dtype=np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")]))
        view["id"], view["logit"], view["p"] = np.arange(n), logits, 0
        cur = L.llama_token_data_array(data, n, -1, False)
        L.llama_sampler_apply(smpl, ctypes.byref(cur))
        changed = np.flatnonzero(view["logit"] != logits)
        out.append([[int(i), float(view["logit"][i])] for i in changed])
        L.llama_sampler_free(smpl)
    L.llama_model_free(model)
    return out
