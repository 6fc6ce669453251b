"""A small llama GGUF with head_dim 32 (the K/V block of 32 divides it, unlike tiny-llama's 16) and a 256-entry
vocabulary without a tokenizer (served with the engine's byte tokenizer, as tiny-llama is): for tests of the
quantised K/V types in any room. write(path) -> path."""
import gguf
import numpy as np

VT = gguf.GGUFValueType
E, FF, NH, NKV, HD, NL, NV = 64, 96, 2, 1, 32, 2, 256


def write(path) -> str:
    w = gguf.GGUFWriter(str(path), "llama")
    for key, val, vt in (("llama.context_length", 2048, VT.UINT32), ("llama.embedding_length", E, VT.UINT32),
                         ("llama.block_count", NL, VT.UINT32), ("llama.feed_forward_length", FF, VT.UINT32),
                         ("llama.attention.head_count", NH, VT.UINT32),
                         ("llama.attention.head_count_kv", NKV, VT.UINT32),
                         ("llama.attention.layer_norm_rms_epsilon", 1e-6, VT.FLOAT32),
                         ("llama.rope.freq_base", 10000.0, VT.FLOAT32), ("llama.rope.dimension_count", HD, VT.UINT32),
                         ("llama.vocab_size", NV, VT.UINT32)):
        w.add_key_value(key, val, vt)
    rng = np.random.default_rng(32)
    shapes = {"token_embd.weight": (NV, E), "output_norm.weight": (E,)}
    for il in range(NL):
        for name, shp in (("attn_norm", (E,)), ("attn_q", (NH * HD, E)), ("attn_k", (NKV * HD, E)),
                          ("attn_v", (NKV * HD, E)), ("attn_output", (E, NH * HD)), ("ffn_norm", (E,)),
                          ("ffn_gate", (FF, E)), ("ffn_up", (FF, E)), ("ffn_down", (E, FF))):
            shapes[f"blk.{il}.{name}.weight"] = shp
    for name, shp in shapes.items():
        a = rng.standard_normal(shp).astype(np.float32) * (0.5 if len(shp) == 2 else 1.0)
        w.add_tensor(name, 1.0 + 0.1 * a if len(shp) == 1 else a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)
