"""Tiny random-weight llama GGUFs, one per weight type (the i-quants, TQ1_0 / TQ2_0, MXFP4,
NVFP4, Q1_0, Q2_0), written with the
`gguf` package from fixed seeds: every matrix (the attention and FFN weights and output.weight) in the type,
token_embd Q8_0, norms f32, the 260-token BPE vocabulary of gguf_util.

    write(tname, path) -> path    the model of weight type tname (a key of TYPES), the same bytes every call
    sha256(path) -> str

The blocks are random bytes (every grid index, sign pattern and sub-block scale the type can spell) with valid,
positive f16 block scales (MXFP4: an e8m0 exponent; NVFP4: four e4m3 sub-block scales, one value per block) sized so that the weights are ~1 / sqrt(n_in): the models
are noise, but a well-scaled noise through which a wrong decoder or dot would show at once. n_embd 256 and
n_ff 512 so that every row holds whole 256-element blocks."""
from __future__ import annotations

import hashlib
import os
import sys

import numpy as np

import gguf
from gguf.quants import dequantize

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support"))  # gguf_util
import gguf_util  # noqa: E402
import lowbit_ref  # noqa: E402

VT = gguf.GGUFValueType
Q = gguf.GGMLQuantizationType
E, FF, NH, NKV, NL, HD = 256, 512, 4, 2, 2, 64
TYPES = {t.name: t for t in (Q.IQ4_NL, Q.IQ4_XS, Q.IQ3_S, Q.IQ3_XXS, Q.IQ2_S, Q.IQ2_XS, Q.IQ2_XXS, Q.IQ1_S,
                             Q.IQ1_M, Q.TQ1_0, Q.TQ2_0, Q.MXFP4)}
# NVFP4, Q1_0, Q2_0 (GGML types 40..42; gguf 0.19 has no Q2_0 and no Q1_0 dequantize): plain ints, lowbit_ref
TYPES.update({name: t for t, name in lowbit_ref.NAMES.items()})
SEED = 2525
# byte offset of the f16 block scale (IQ1_M: spread over the top nibbles of bytes 48..55; MXFP4: e8m0 byte 0)
_D_AT = {Q.TQ1_0: 52, Q.TQ2_0: 64}


def _set_scale(t, b: np.ndarray, d: np.ndarray) -> None:
    """Writes the per-block scales d (float, > 0) into blocks b [n, bytes] in place."""
    if int(t) == lowbit_ref.NVFP4:      # four unsigned e4m3 sub-block scales (bytes 0..3), the same for the block
        e = gguf.quants.NVFP4.fp32_to_ue4m3(np.asarray(d, np.float32))
        b[:, 0:4] = np.maximum(e, 1)[:, None]
        return
    if t == Q.MXFP4:
        b[:, 0] = np.clip(np.round(np.log2(d)) + 128, 1, 254).astype(np.uint8)
        return
    h = d.astype(np.float16).view(np.uint16)
    if t == Q.IQ1_M:
        sw = b[:, 48:56].copy().view(np.uint16)
        for k in range(4):
            sw[:, k] = (sw[:, k] & 0x0FFF) | (((h >> (4 * k)) & 0xF) << 12)
        b[:, 48:56] = sw.view(np.uint8)
        return
    o = _D_AT.get(t, 0)
    b[:, o:o + 2] = h.view(np.uint8).reshape(-1, 2)


def blocks(t, n_rows: int, n_cols: int, rng: np.random.Generator) -> np.ndarray:
    """uint8[n_rows, row bytes] of type t: random bytes, scales giving weights of rms ~ 1 / sqrt(n_cols)."""
    blck, nb = lowbit_ref.SIZES[int(t)] if int(t) in lowbit_ref.SIZES else gguf.GGML_QUANT_SIZES[t]
    deq = (lambda x: lowbit_ref.dequant(int(t), x)) if int(t) in lowbit_ref.SIZES else (lambda x: dequantize(x, t))
    n = n_rows * n_cols // blck
    b = rng.integers(0, 256, size=(n, nb), dtype=np.uint8)
    _set_scale(t, b, np.ones(n))
    unit = float(np.sqrt(np.mean(deq(b).astype(np.float64) ** 2))) or 1.0
    _set_scale(t, b, (1.0 / np.sqrt(n_cols)) / unit * rng.uniform(0.7, 1.3, n))
    return b.reshape(n_rows, -1)


def write(tname: str, path: "str | os.PathLike") -> str:
    t = TYPES[tname]
    rng = np.random.default_rng(SEED + int(t))
    n_vocab = len(gguf_util.vocab_tokens())
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_string("general.name", f"tiny-llama-{tname}")
    kv = gguf_util.standard_kv("llama")
    kv.update({"llama.embedding_length": (E, VT.UINT32), "llama.feed_forward_length": (FF, VT.UINT32),
               "llama.block_count": (NL, VT.UINT32), "llama.attention.head_count": (NH, VT.UINT32),
               "llama.attention.head_count_kv": (NKV, VT.UINT32), "llama.rope.dimension_count": (HD, VT.UINT32),
               "llama.context_length": (256, VT.UINT32)})
    for key, (val, vt, *sub) in kv.items():
        if vt == VT.ARRAY:
            w.add_key_value(key, val, vt, sub_type=sub[0])
        else:
            w.add_key_value(key, val, vt)
    emb = gguf.quants.quantize((rng.standard_normal((n_vocab, E)) * 0.5).astype(np.float32), Q.Q8_0)
    w.add_tensor("token_embd.weight", emb, raw_shape=emb.shape, raw_dtype=Q.Q8_0)
    w.add_tensor("output_norm.weight", (1.0 + 0.1 * rng.standard_normal(E)).astype(np.float32))
    mats = [("output.weight", (n_vocab, E))]
    for i in range(NL):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", (1.0 + 0.1 * rng.standard_normal(E)).astype(np.float32))
        w.add_tensor(p + "ffn_norm.weight", (1.0 + 0.1 * rng.standard_normal(E)).astype(np.float32))
        mats += [(p + "attn_q.weight", (NH * HD, E)), (p + "attn_k.weight", (NKV * HD, E)),
                 (p + "attn_v.weight", (NKV * HD, E)), (p + "attn_output.weight", (E, NH * HD)),
                 (p + "ffn_gate.weight", (FF, E)), (p + "ffn_up.weight", (FF, E)), (p + "ffn_down.weight", (E, FF))]
    for name, (r, c) in mats:
        q = blocks(t, r, c, rng)
        if int(t) in lowbit_ref.SIZES:   # gguf cannot convert a byte shape for these: give the element shape
            w.add_tensor(name, q.view(np.int8), raw_shape=(r, c), raw_dtype=int(t))
        else:
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def sha256(path: "str | os.PathLike") -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()
