"""Small valid GGUF files written with the `gguf` package (a llama-architecture model of one layer with a tiny
BPE vocabulary; or only metadata), and raw GGUF bytes for headers the package cannot write (hostile counts,
deep nesting). Used by test_gguf_hostile.py and the byte fuzzer test_fuzz_gguf.py."""
from __future__ import annotations

import struct
from typing import Any, Dict, Optional

import numpy as np

import gguf

VT = gguf.GGUFValueType
E, FF, NH, NKV, NL = 32, 64, 4, 2, 1
HD = E // NH
BYTE_CHARS = [chr(c) for c in range(ord("!"), ord("~") + 1)]      # printable ASCII: byte-level chars as is
CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def byte_level_chars():
    """The 256 characters of GPT-2's byte-level alphabet (byte b -> one code point), in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return [out[b] for b in range(256)]


def vocab_tokens():
    return byte_level_chars() + ["ab", "Ġa", "<|im_start|>", "<|im_end|>"]


def standard_kv(arch: str = "llama", n_vocab: Optional[int] = None) -> Dict[str, tuple]:
    """key -> (value, value type[, element type]) of a small model; n_vocab=None: with a BPE vocabulary."""
    kv: Dict[str, tuple] = {
        f"{arch}.context_length": (128, VT.UINT32), f"{arch}.embedding_length": (E, VT.UINT32),
        f"{arch}.block_count": (NL, VT.UINT32), f"{arch}.feed_forward_length": (FF, VT.UINT32),
        f"{arch}.attention.head_count": (NH, VT.UINT32), f"{arch}.attention.head_count_kv": (NKV, VT.UINT32),
        f"{arch}.attention.layer_norm_rms_epsilon": (1e-6, VT.FLOAT32), f"{arch}.rope.freq_base": (10000.0, VT.FLOAT32),
        f"{arch}.rope.dimension_count": (HD, VT.UINT32),
    }
    if n_vocab is not None:
        kv[f"{arch}.vocab_size"] = (n_vocab, VT.UINT32)
    else:
        toks = vocab_tokens()
        kv.update({"tokenizer.ggml.model": ("gpt2", VT.STRING), "tokenizer.ggml.pre": ("qwen2", VT.STRING),
                   "tokenizer.ggml.tokens": (toks, VT.ARRAY, VT.STRING),
                   "tokenizer.ggml.token_type": ([1] * (len(toks) - 2) + [3, 3], VT.ARRAY, VT.INT32),
                   "tokenizer.ggml.merges": (["a b", "Ġ a"], VT.ARRAY, VT.STRING),
                   "tokenizer.ggml.eos_token_id": (len(toks) - 1, VT.UINT32),
                   "tokenizer.ggml.bos_token_id": (len(toks) - 2, VT.UINT32),
                   "tokenizer.chat_template": (CHATML, VT.STRING)})
    return kv


def write(path, kv: Dict[str, tuple], *, arch: str = "llama", tensors: bool = True, n_vocab: int = 0,
          qtype=None) -> str:
    """A GGUF file with the given metadata and (tensors=True) llama tensors for n_vocab tokens."""
    w = gguf.GGUFWriter(str(path), arch)
    for key, (val, vt, *sub) in kv.items():
        if vt == VT.ARRAY:
            w.add_key_value(key, val, vt, sub_type=sub[0])
        else:
            w.add_key_value(key, val, vt)
    if tensors:
        rng = np.random.default_rng(0)
        shapes = {"token_embd.weight": (n_vocab, E), "output_norm.weight": (E,)}
        for name, shp in (("attn_norm", (E,)), ("attn_q", (NH * HD, E)), ("attn_k", (NKV * HD, E)),
                          ("attn_v", (NKV * HD, E)), ("attn_output", (E, NH * HD)), ("ffn_norm", (E,)),
                          ("ffn_gate", (FF, E)), ("ffn_up", (FF, E)), ("ffn_down", (E, FF))):
            shapes[f"blk.0.{name}.weight"] = shp
        for name, shp in shapes.items():
            a = (rng.standard_normal(shp) * 0.3).astype(np.float32)
            if qtype is not None and len(shp) == 2:
                q = gguf.quants.quantize(a, qtype)
                w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)
            else:
                w.add_tensor(name, a.astype(np.float16) if len(shp) == 2 else a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    if tensors:
        w.write_tensors_to_file()
    else:
        w.write_ti_data_to_file()
    w.close()
    return str(path)


def small_model(path, qtype=None) -> str:
    """A complete small llama model with its BPE vocabulary (loads, tokenizes and decodes)."""
    return write(path, standard_kv(), n_vocab=len(vocab_tokens()), qtype=qtype)


def raw_header(n_tensors: int, kvs: bytes, n_kv: int = 1) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + kvs


def raw_key(name: str) -> bytes:
    b = name.encode()
    return struct.pack("<Q", len(b)) + b


def raw_array_head(etype: int, count: int) -> bytes:
    return struct.pack("<IIQ", VT.ARRAY, etype, count)


