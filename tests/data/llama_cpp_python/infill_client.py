"""The infill sampler (llama_sampler_init_infill) on candidates both libraries get bit for bit (seeded logits over
chosen ids: words and their prefixes, the end-of-generation tokens), run over the real llama-cpp-python 0.3.36
(`python infill_client.py MODEL`) and over ubatch.llama_cpp installed as llama_cpp
(tests/dropin/test_llama_cpp_infill.py): each case prints the kept ids and their probabilities (float32 hex)."""
import ctypes
import sys

import numpy as np
import llama_cpp as L

MODEL = sys.argv[1]
mp = L.llama_model_default_params()
mp.vocab_only = True
model = L.llama_model_load_from_file(MODEL.encode(), mp)
vocab = L.llama_model_get_vocab(model)
n_vocab = L.llama_vocab_n_tokens(vocab)


def single(text):
    buf = (L.llama_token * 8)()
    n = L.llama_tokenize(vocab, text, len(text), buf, 8, False, False)
    return buf[0] if n == 1 else None


words = [b"print", b"pr", b"p", b"printf", b"println", b" print", b" pr", b" p", b"return", b"re", b"r", b"ret",
         b"def", b"de", b"d", b"self", b"se", b"s", b"(", b"()", b"):", b")", b"\n", b"\n\n", b" ", b"  ", b"x"]
ids = [t for t in (single(w) for w in words) if t is not None]
eog = [t for t in range(n_vocab) if L.llama_vocab_is_eog(vocab, t)][:4]
print("ids", len(ids), "eog", len(eog), "eot", L.llama_vocab_eot(vocab))


def run(name, cand_ids, logits, chain_first=None):
    n = len(cand_ids)
    arr = (L.llama_token_data * n)(*[L.llama_token_data(int(t), float(v), 0.0) for t, v in zip(cand_ids, logits)])
    cur = L.llama_token_data_array(data=arr, size=n, selected=-1, sorted=False)
    ch = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    if chain_first is not None:
        L.llama_sampler_chain_add(ch, chain_first)
    L.llama_sampler_chain_add(ch, L.llama_sampler_init_infill(vocab))
    L.llama_sampler_apply(ch, ctypes.byref(cur))
    out = [(arr[i].id, np.float32(arr[i].p).tobytes().hex(), arr[i].logit) for i in range(cur.size)]
    print(name, cur.size, cur.sorted, out)
    L.llama_sampler_free(ch)


rng = np.random.default_rng(7)
for k in range(8):
    lg = rng.normal(0, 0.3 + 0.4 * k, len(ids)).astype(np.float32)
    run(f"text{k}", ids, lg)
for k in range(3):
    c = ids + eog
    lg = rng.normal(0, 1.0, len(c)).astype(np.float32)
    lg[len(ids):] += 2.5 * k
    run(f"eog{k}", c, lg)
full = rng.normal(0, 3.0, n_vocab).astype(np.float32)
full[ids] += 6.0
run("topk40", list(range(n_vocab)), full, L.llama_sampler_init_top_k(40))
