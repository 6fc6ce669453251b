"""A client of llama_cpp._internals (LlamaModel / LlamaContext / LlamaBatch / LlamaTokenDataArray / LlamaSampler /
CustomSampler / LlamaSamplingParams / LlamaSamplingContext, as 0.3.36 defines them), run unchanged over the real
llama-cpp-python 0.3.36 (`python internals_client.py MODEL`) and over ubatch.llama_cpp installed as llama_cpp
(tests/dropin/test_llama_cpp_internals.py, which holds what the real library printed on Gemma 3 270M)."""
import ctypes, sys, warnings
import numpy as np
import llama_cpp
from llama_cpp import _internals as I
MODEL = sys.argv[1]
m = I.LlamaModel(path_model=MODEL, params=I.LlamaModel.default_params(), verbose=False)
print("model", m.vocab_type(), m.n_vocab(), m.n_ctx_train(), m.n_embd(), m.rope_freq_scale_train(), m.desc(), m.size(), m.n_params())
print("special", m.token_bos(), m.token_eos(), m.token_cls(), m.token_sep(), m.token_nl(), m.token_prefix(),
      m.token_middle(), m.token_suffix(), m.token_eot(), m.add_bos_token(), m.add_eos_token())
print("vocab", repr(m.token_get_text(5)), m.token_get_score(5), m.token_get_attr(5), m.token_get_attr(1))
toks = m.tokenize(b"hello world", True, False)
print("tok", toks, m.detokenize(toks), m.token_to_piece(toks[-1]).rstrip(b"\0"))
try:
    m.get_tensor("output.weight")
except NotImplementedError as e:
    print("get_tensor", e)
print("meta", len(m.metadata()))
cp = I.LlamaContext.default_params(); cp.n_ctx = 128; cp.n_batch = 32; cp.n_seq_max = 2
c = I.LlamaContext(model=m, params=cp, verbose=False)
print("ctx", c.n_ctx(), c.pooling_type(), c.get_state_size() > 0)
c.set_n_threads(2, 2)
b = I.LlamaBatch(n_tokens=32, embd=0, n_seq_max=2)
prompt = m.tokenize(b"The capital of France is", True, False)
b.set_batch(prompt, n_past=0, logits_all=False)
print("batch", b.n_tokens())
c.decode(b)
nv = m.n_vocab()
logits = np.ctypeslib.as_array(c.get_logits_ith(-1), shape=(nv,)).copy()
arr = I.LlamaTokenDataArray(n_vocab=nv)
arr.copy_logits(logits)
print("arr", arr.candidates.size, arr.candidates.sorted, int(arr.candidates_data.id[7]), arr.candidates_data.dtype.itemsize)
chain = I.LlamaSampler(); chain.add_top_k(10); chain.add_top_p(0.9); chain.add_temp(0.8); chain.add_dist(1234)
llama_cpp.llama_sampler_apply(chain.sampler, ctypes.byref(arr.candidates))
sel = arr.candidates.selected
print("apply", arr.candidates.size, sel, int(arr.candidates_data.id[sel]), chain.get_seed())
seen = []
def custom(p):
    seen.append(int(p.contents.size))
    d = p.contents.data
    d[3].logit = 1e9                                  # force token id 3 (data unsorted: index = id)
g = I.LlamaSampler(); g.add_custom(custom); g.add_greedy()
print("custom", g.sample(c, -1), seen, llama_cpp.llama_sampler_chain_n(g.sampler))
g.close()
gr = I.LlamaSampler(); gr.add_greedy()
out = []
n_past = len(prompt)
margins = []
for i in range(6):
    row = np.sort(np.ctypeslib.as_array(c.get_logits_ith(-1), shape=(nv,)))
    margins.append(round(float(row[-1] - row[-2]), 2))
    t = gr.sample(c, -1)
    out.append(t)
    b.set_batch([t], n_past=n_past, logits_all=False); n_past += 1
    c.decode(b)
print("greedy", out)
print("margins", margins, file=sys.stderr)
c.kv_cache_seq_cp(0, 1, -1, -1)
print("seq", c.kv_cache_seq_rm(1, 8, -1), llama_cpp.llama_memory_seq_pos_max(c.memory, 1))
c.kv_cache_seq_keep(1)
print("keep", llama_cpp.llama_memory_seq_pos_max(c.memory, 0), llama_cpp.llama_memory_seq_pos_max(c.memory, 1))
c.kv_cache_seq_shift(1, 0, -1, 3)
print("shift", llama_cpp.llama_memory_seq_pos_max(c.memory, 1))
many = I.LlamaSampler()
many.add_penalties(nv, 64, 1.1, 0.1, 0.1)
many.add_dry(m, 0.8, 1.75, 2, 64, ["\n", ":"])
many.add_logit_bias(nv, {5: 2.0, 6: -100.0})
many.add_top_n_sigma(3.0); many.add_min_p(0.01); many.add_typical(0.99); many.add_temp_ext(0.9, 0.1, 1.0)
many.add_xtc(0.0, 0.5, 1, 7); many.add_dist(99)
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    many.add_softmax()
    print("softmax", [x.category.__name__ for x in w])
print("many", llama_cpp.llama_sampler_chain_n(many.sampler), many.get_seed())
cl = many.clone()
print("clone", llama_cpp.llama_sampler_chain_n(cl.sampler), cl.get_seed())
mi = I.LlamaSampler(); mi.add_mirostat(nv, 5, 5.0, 0.1, 100); mi2 = I.LlamaSampler(); mi2.add_mirostat_v2(5, 5.0, 0.1)
print("miro", mi.get_seed(), mi2.get_seed())
try:
    g2 = I.LlamaSampler(); g2.add_custom(custom); g2.clone()
except NotImplementedError as e:
    print("clone custom", e)
sp = I.LlamaSamplingParams(); sc = I.LlamaSamplingContext(params=sp)
sc.accept(c, 42, False); sc.accept(c, 17, False); sc2 = sc.cp(); sc2.accept(c, 99, False)
print("sctx", sp.top_k, sp.temp, sp.n_prev, sc.last(), sc2.prev, repr(sc.prev_str(c, 2)))
for name, call in [("sample_top_k", lambda: c.sample_top_k(None, 1, 1)), ("sctx.sample", lambda: sc.sample(c))]:
    try:
        call()
    except NotImplementedError as e:
        print(name, e)
bb = I.LlamaBatch(n_tokens=8, embd=0, n_seq_max=2)
bb.add_sequence([1, 2, 3], 0, False); bb.add_sequence([1, 2], 1, True)
print("addseq", bb.n_tokens(), [bb.batch.seq_id[i][0] for i in range(5)], [bb.batch.logits[i] for i in range(5)],
      [bb.batch.pos[i] for i in range(5)])
c.kv_cache_clear()
print("clear", llama_cpp.llama_memory_seq_pos_max(c.memory, 0))
print("norm", I.normalize_embedding([3.0, 4.0]), I.normalize_embedding([0.0, 0.0]))
try:
    I.LlamaModel(path_model="/nonexistent.gguf", params=I.LlamaModel.default_params(), verbose=False)
except ValueError as e:
    print("missing", e)
for o in (many, cl, mi, mi2, gr, chain, bb, b, c, m):
    o.close()
print("closed", c.ctx, m.model, b.batch)
