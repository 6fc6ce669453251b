"""numpy references for the matmul kernel tests: random GGUF blocks of every type (with edge values),
ggml-cpu's activation quantisation (x86 behaviour, docs/llama-cpp-behaviours.md §M2.2) and float64 dot products built on
gguf.quants dequantisation."""
from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

BLOCK = {T.F32: (1, 4), T.F16: (1, 2), T.BF16: (1, 2), T.Q4_0: (32, 18), T.Q4_1: (32, 20), T.Q5_0: (32, 22),
         T.Q5_1: (32, 24), T.Q8_0: (32, 34), T.Q2_K: (256, 84), T.Q3_K: (256, 110), T.Q4_K: (256, 144),
         T.Q5_K: (256, 176), T.Q6_K: (256, 210),
         T.IQ4_NL: (32, 18), T.IQ4_XS: (256, 136), T.IQ3_S: (256, 110), T.IQ3_XXS: (256, 98),
         T.IQ2_S: (256, 82), T.IQ2_XS: (256, 74), T.IQ2_XXS: (256, 66), T.IQ1_S: (256, 50), T.IQ1_M: (256, 56),
         T.TQ1_0: (256, 54), T.TQ2_0: (256, 66), T.MXFP4: (32, 17)}
# byte offsets of the f16 scale fields (d, and dmin / m) inside a block
SCALES = {T.Q4_0: (0,), T.Q4_1: (0, 2), T.Q5_0: (0,), T.Q5_1: (0, 2), T.Q8_0: (0,), T.Q2_K: (80, 82),
          T.Q3_K: (108,), T.Q4_K: (0, 2), T.Q5_K: (0, 2), T.Q6_K: (208,),
          T.IQ4_NL: (0,), T.IQ4_XS: (0,), T.IQ3_S: (0,), T.IQ3_XXS: (0,), T.IQ2_S: (0,), T.IQ2_XS: (0,),
          T.IQ2_XXS: (0,), T.IQ1_S: (0,), T.TQ1_0: (52,), T.TQ2_0: (64,)}
# IQ1_M's f16 scale is spread over the top nibbles of its four u16 scale words (bytes 48..55); MXFP4's
# scale is an e8m0 exponent byte (byte 0)
ACT = {T.F32: "f32", T.F16: "f16", T.BF16: "bf16", T.Q4_0: "q8_0", T.Q5_0: "q8_0", T.Q8_0: "q8_0",
       T.Q4_1: "q8_1", T.Q5_1: "q8_1", T.Q2_K: "q8_k", T.Q3_K: "q8_k", T.Q4_K: "q8_k", T.Q5_K: "q8_k",
       T.Q6_K: "q8_k", T.IQ4_NL: "q8_0", T.MXFP4: "q8_0", T.IQ4_XS: "q8_k", T.IQ3_S: "q8_k", T.IQ3_XXS: "q8_k",
       T.IQ2_S: "q8_k", T.IQ2_XS: "q8_k", T.IQ2_XXS: "q8_k", T.IQ1_S: "q8_k", T.IQ1_M: "q8_k", T.TQ1_0: "q8_k",
       T.TQ2_0: "q8_k"}
ALL_TYPES = list(BLOCK)


def bf16_round(x: np.ndarray) -> np.ndarray:
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint32) << 16
    return r.astype(np.uint32).view(np.float32)


def random_weight(t: T, n_rows: int, n_cols: int, rng: np.random.Generator) -> np.ndarray:
    """uint8 bytes of an [n_rows, n_cols] tensor of type t: random quants, random f16 scales including
    zero, subnormal and negative ones, some blocks with every quant byte 0x00 or 0xFF."""
    blck, nb = BLOCK[t]
    if t == T.F32:
        return rng.standard_normal((n_rows, n_cols)).astype(np.float32).view(np.uint8).reshape(-1)
    if t == T.F16:
        w = rng.standard_normal((n_rows, n_cols)).astype(np.float16)
        w.flat[::17] = np.float16(6e-5)  # subnormal-ish and large values
        w.flat[5::23] = np.float16(-60000.0 / max(n_cols, 1))
        return w.view(np.uint8).reshape(-1)
    if t == T.BF16:
        w = bf16_round(rng.standard_normal((n_rows, n_cols)).astype(np.float32))
        return (w.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(-1)
    n_blocks = n_rows * n_cols // blck
    b = rng.integers(0, 256, size=(n_blocks, nb), dtype=np.uint8)
    b[1::7] = 0xFF
    b[3::11] = 0x00
    for o in SCALES.get(t, ()):
        b[:, o:o + 2] = _f16_scales(n_blocks, rng).view(np.uint8).reshape(n_blocks, 2)
    if t == T.IQ1_M:
        u = _f16_scales(n_blocks, rng).view(np.uint16).astype(np.uint16)
        sw = b[:, 48:56].copy().view(np.uint16)                      # [n_blocks, 4]
        for k in range(4):
            sw[:, k] = (sw[:, k] & 0x0FFF) | (((u >> (4 * k)) & 0xF) << 12)
        b[:, 48:56] = sw.view(np.uint8)
    if t == T.MXFP4:                                                  # 2^(e - 128): keep products normal
        b[:, 0] = rng.integers(110, 141, n_blocks, dtype=np.uint8)
    return b.reshape(-1)


def _f16_scales(n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    d = (rng.uniform(1e-3, 2e-2, n_blocks) * rng.choice([1, 1, 1, -1], n_blocks)).astype(np.float16)
    d[::13] = 0
    d[2::19] = np.float16(3e-6)  # subnormal half
    return d


def deq(t: T, data: np.ndarray, n_rows: int, n_cols: int) -> np.ndarray:
    if t == T.F32:
        return data.view(np.float32).reshape(n_rows, n_cols).astype(np.float64)
    if t == T.F16:
        return data.view(np.float16).reshape(n_rows, n_cols).astype(np.float64)
    if t == T.BF16:
        return (data.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(n_rows, n_cols).astype(np.float64)
    return dequantize(data.reshape(n_rows, -1), t).reshape(n_rows, n_cols).astype(np.float64)


def quant_act(kind: str, x: np.ndarray) -> dict:
    """ggml-cpu's quantisation of one activation row x float32[k] -> dict(q, d, s / bsums, xdeq)."""
    x = x.astype(np.float32)
    if kind == "f32":
        return {"xdeq": x.astype(np.float64)}
    if kind == "f16":
        return {"xdeq": x.astype(np.float16).astype(np.float64)}
    if kind == "bf16":
        return {"xdeq": bf16_round(x).astype(np.float64)}
    if kind in ("q8_0", "q8_1"):
        xb = x.reshape(-1, 32)
        amax = np.abs(xb).max(axis=1)
        d = (amax / np.float32(127)).astype(np.float32)
        with np.errstate(divide="ignore"):
            idv = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
        q = np.rint(xb * idv[:, None]).astype(np.int32)
        d16 = d.astype(np.float16).astype(np.float32)
        out = {"q": q, "d": d16, "xdeq": (q * d16[:, None].astype(np.float64)).reshape(-1)}
        if kind == "q8_1":
            out["s"] = (d * q.sum(axis=1).astype(np.float32)).astype(np.float16).astype(np.float32)
        return out
    xb = x.reshape(-1, 256)
    idx = np.abs(xb).argmax(axis=1)
    mx = xb[np.arange(xb.shape[0]), idx]
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = np.where(mx != 0, np.float32(-127) / mx, np.float32(0)).astype(np.float32)
    q = np.minimum(127, np.rint(xb * iscale[:, None])).astype(np.int32)
    with np.errstate(divide="ignore"):
        d = np.where(mx != 0, np.float32(1) / iscale, np.float32(0)).astype(np.float32)
    q[mx == 0] = 0
    bsums = q.reshape(-1, 16, 16).sum(axis=2)
    return {"q": q, "d": d, "bsums": bsums, "xdeq": (q * d[:, None].astype(np.float64)).reshape(-1)}


def act_bytes(kind: str, x: np.ndarray) -> bytes:
    """The byte layout ubatch.compute.matmul.quantize_activations documents, from quant_act."""
    a = quant_act(kind, x)
    if kind == "f32":
        return x.astype(np.float32).tobytes()
    if kind == "f16":
        return x.astype(np.float16).tobytes()
    if kind == "bf16":
        return (bf16_round(x).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    out = bytearray()
    for b in range(a["q"].shape[0]):
        out += np.float32(a["d"][b]).tobytes()
        if kind == "q8_1":
            out += np.float32(a["s"][b]).tobytes()
        out += a["q"][b].astype(np.int8).tobytes()
        if kind == "q8_k":
            out += a["bsums"][b].astype(np.int16).tobytes()
    return bytes(out)


def reference(t: T, data: np.ndarray, n_rows: int, n_cols: int, x: np.ndarray):
    """(y_ref float64[n, n_rows] with activations quantised as ggml does and exact products,
    bound float64[n, n_rows] = sum |w| |x_q| for the tolerance, y_f float64 with float activations)."""
    W = deq(t, data, n_rows, n_cols)
    kind = ACT[t]
    ys, bounds = [], []
    for row in x:
        a = quant_act(kind, row)
        y = W @ a["xdeq"]
        if kind == "q8_1":  # ggml uses s = fp16(d * sum q) for the min term, not d16 * sum q
            m = data.reshape(n_rows, -1, BLOCK[t][1])[:, :, 2:4].copy().view(np.float16)[..., 0].astype(np.float64)
            corr = a["s"].astype(np.float64) - a["d"].astype(np.float64) * a["q"].sum(axis=1)
            y = y + m @ corr
        ys.append(y)
        bounds.append(np.abs(W) @ np.abs(a["xdeq"]))
    return np.array(ys), np.array(bounds), x.astype(np.float64) @ W.T
