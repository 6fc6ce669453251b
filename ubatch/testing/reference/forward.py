"""The float64 reference forward of one sequence (positions 0 .. n-1) for llama, qwen2 and gemma3
(docs/llama-cpp-behaviours.md §M3), written from that description and independent of ubatch's kernels.

    forward(model, tokens, mode="emulate", kv="f32", out_rows=None, trace=None) -> float64[R, n_vocab]

mode "exact": every operation in float64 on the dequantised weights (no activation quantisation, exact
RoPE angles, exact softmax and GELU). mode "emulate": the same, but each matmul's activations first become
what ggml's format for that weight type holds (actquant: Q8_0 / Q8_1 / Q8_K per row, f16 for F16 weights),
Gemma's GELU goes through ggml's f16 table (input and output rounded to f16, identity / 0 beyond +-10), and
with kv="f16" the K/V cells are stored as f16 and the two attention products see f16 operands as ggml's
(non flash) attention does: Q rounded to f16 for K.Q, the probabilities rounded to f16 for V.p. Nothing else is
rounded: the arithmetic between the formats is exact (float64), so ubatch's and llama.cpp's distances to it
are their own float32 arithmetic and its consequences (a flipped rounding step in a later quantisation).
Slow (numpy, weights dequantised per call) and meant for short prompts."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from ubatch.testing.reference import actquant
from ubatch.testing.reference.model import ROPE_NORM, RefModel

_CHUNK = 1 << 24          # weight elements dequantised at a time (64 MB of float32)


class _Fwd:
    def __init__(self, m: RefModel, mode: str, kv: str, noise: Optional[tuple] = None,
                 dtype=np.float64, rope: str = "exact") -> None:
        if mode not in ("exact", "emulate"):
            raise ValueError(f"mode must be 'exact' or 'emulate', got {mode!r}")
        if kv not in ("f32", "f16"):
            raise ValueError(f"kv must be 'f32' or 'f16', got {kv!r}")
        self.m, self.hp, self.emulate, self.kv16 = m, m.hp, mode == "emulate", kv == "f16"
        self.rng, self.eps = (np.random.default_rng(noise[0]), float(noise[1])) if noise else (None, 0.0)
        self.dt = np.dtype(dtype)
        if rope not in ("exact", "f32"):
            raise ValueError(f"rope must be 'exact' or 'f32', got {rope!r}")
        self.rope_f32 = rope == "f32"

    def jitter(self, a: np.ndarray) -> np.ndarray:
        """With noise: a x (1 + eps N(0, 1)) elementwise, the input of a format rounding seen through a
        float32 computation's last-bit differences; without: a."""
        if self.rng is None:
            return a
        return a * (1.0 + self.eps * self.rng.standard_normal(a.shape))

    # y = x @ W.T (+ the Q4_1/Q5_1 min-term correction when emulating)
    def mm(self, x: np.ndarray, name: str) -> np.ndarray:
        m = self.m
        wt = m.wtype(name)
        kind = actquant.act_kind(wt)
        xq = (actquant.quantize(self.jitter(x), kind) if self.emulate else x).astype(self.dt)
        rows = m.n_rows(name)
        step = max(1, _CHUNK // max(1, x.shape[1]))
        out = np.empty((x.shape[0], rows), self.dt)
        sums = actquant.q8_1_sums(x) if (self.emulate and kind == "q8_1") else None
        for r0 in range(0, rows, step):
            r1 = min(rows, r0 + step)
            w = m.dequant(name, r0, r1).astype(self.dt)
            out[:, r0:r1] = xq @ w.T
            if sums is not None:   # the dot uses s = fp16(d * sum q), not the dequantised values' sum
                out[:, r0:r1] += (sums[1] - sums[0]) @ m.block_mins(name, r0, r1).T
        return out

    def bias(self, y: np.ndarray, name: str) -> np.ndarray:
        b = self.m.vector(name)
        return y if b is None else y + b.astype(self.dt)

    def norm(self, x: np.ndarray, name: str) -> np.ndarray:
        w = self.m.vector(name).astype(self.dt)
        ms = np.mean(x * x, axis=-1, keepdims=True, dtype=np.float64).astype(self.dt)
        return x / np.sqrt(ms + self.dt.type(self.hp.rms_eps)) * w

    def rope(self, x: np.ndarray, pos: np.ndarray, base: float, scale: float) -> np.ndarray:
        """x float64[n, heads, d]: exact angles p * scale * base^(-2i/d)."""
        d = x.shape[-1]
        half = d // 2
        if self.rope_f32:     # ggml's angles: theta_scale = powf(base, -2/d), theta *= theta_scale in float32
            ts = np.float32(base) ** np.float32(-2.0 / d)
            th = np.empty((pos.size, half), np.float32)
            t = pos.astype(np.float32)
            for i in range(half):
                th[:, i] = np.float32(scale) * t
                t = (t * ts).astype(np.float32)
            th = th.astype(np.float64)
        else:
            inv = base ** (-2.0 * np.arange(half, dtype=np.float64) / d)
            th = (pos.astype(np.float64)[:, None] * scale) * inv[None, :]          # [n, half]
        c, s = np.cos(th)[:, None, :].astype(self.dt), np.sin(th)[:, None, :].astype(self.dt)
        y = x.copy()
        if self.hp.rope_type == ROPE_NORM:
            a, b = x[..., 0::2], x[..., 1::2]
            y[..., 0::2], y[..., 1::2] = a * c - b * s, a * s + b * c
        else:
            a, b = x[..., :half], x[..., half:]
            y[..., :half], y[..., half:] = a * c - b * s, a * s + b * c
        return y

    def f16(self, a: np.ndarray) -> np.ndarray:
        return self.jitter(a).astype(np.float32).astype(np.float16).astype(self.dt)

    def attention(self, q, k, v, pos, seq, swa: bool, kq_scale: float) -> np.ndarray:
        """q [n, H, d], k/v [n, Hkv, d] -> [n, H*d]; same sequence, causal, plus the window
        0 <= p_q - p_k < n_swa."""
        hp = self.hp
        n, H, d = q.shape
        g = H // k.shape[1]
        if self.emulate and self.kv16:
            q, k, v = self.f16(q), self.f16(k), self.f16(v)
        dp = pos[:, None] - pos[None, :]
        vis = (dp >= 0) & (seq[:, None] == seq[None, :])
        if swa and hp.n_swa > 0:
            vis &= dp < hp.n_swa
        out = np.empty((n, H, v.shape[2]), self.dt)
        for h in range(H):
            kh, vh = k[:, h // g, :], v[:, h // g, :]
            s = (q[:, h, :] @ kh.T) * self.dt.type(kq_scale)
            s = np.where(vis, s, -np.inf)
            s -= s.max(axis=1, keepdims=True)
            p = np.exp(s)
            p /= p.sum(axis=1, keepdims=True, dtype=np.float64).astype(self.dt)
            if self.emulate and self.kv16:
                p = self.f16(p)
            out[:, h, :] = p @ vh
        return out.reshape(n, -1)

    def gelu(self, a: np.ndarray) -> np.ndarray:
        def g(v):
            return 0.5 * v * (1.0 + np.tanh(0.7978845608028654 * v * (1.0 + 0.044715 * v * v)))
        if not self.emulate:
            return g(a)
        t = self.f16(g(self.f16(a)))
        return np.where(a <= -10.0, 0.0, np.where(a >= 10.0, a, t)).astype(self.dt)

    # the graphs
    def run(self, tokens: np.ndarray, pos: np.ndarray, seq: np.ndarray, out_rows: np.ndarray,
            trace: Optional[dict]) -> np.ndarray:
        hp, m = self.hp, self.m
        n = tokens.size
        ids = np.asarray(tokens, dtype=np.int64)
        emb = np.stack([m.dequant("token_embd.weight", int(t), int(t) + 1)[0] for t in ids]).astype(self.dt)
        x = emb * self.dt.type(hp.embd_scale)
        H, Hkv, d = hp.n_head, hp.n_head_kv, hp.head_dim
        gemma = hp.arch == "gemma3"
        for il in range(hp.n_layer):
            p = f"blk.{il}."
            h = self.norm(x, p + "attn_norm.weight")
            q = self.bias(self.mm(h, p + "attn_q.weight"), p + "attn_q.bias").reshape(n, H, d)
            k = self.bias(self.mm(h, p + "attn_k.weight"), p + "attn_k.bias").reshape(n, Hkv, d)
            v = self.bias(self.mm(h, p + "attn_v.weight"), p + "attn_v.bias").reshape(n, Hkv, d)
            if gemma:
                q, k = self.norm(q, p + "attn_q_norm.weight"), self.norm(k, p + "attn_k_norm.weight")
            base, scale = hp.rope(il)
            q, k = self.rope(q, pos, base, scale), self.rope(k, pos, base, scale)
            if gemma:
                q = q * self.dt.type(hp.q_scale)
            a = self.attention(q, k, v, pos, seq, hp.swa[il], hp.kq_scale)
            a = self.bias(self.mm(a, p + "attn_output.weight"), p + "attn_output.bias")
            if gemma:
                a = self.norm(a, p + "post_attention_norm.weight")
            x = x + a
            h = self.norm(x, p + "ffn_norm.weight")
            gt, up = self.mm(h, p + "ffn_gate.weight"), self.mm(h, p + "ffn_up.weight")
            if gemma:
                f = self.gelu(gt) * up
            else:
                f = gt / (1.0 + np.exp(-gt)) * up
            f = self.mm(f, p + "ffn_down.weight")
            if gemma:
                f = self.norm(f, p + "post_ffw_norm.weight")
            x = x + f
            if trace is not None:
                trace.setdefault("x", []).append(x.copy())
        xn = self.norm(x[out_rows], "output_norm.weight")
        head = "output.weight" if m.has("output.weight") else "token_embd.weight"
        y = self.bias(self.mm(xn, head), "output.bias")
        if hp.softcap:
            y = hp.softcap * np.tanh(y / hp.softcap)
        return y


def forward(model: RefModel, tokens: Sequence[int], *, mode: str = "emulate", kv: str = "f32",
            out_rows: Optional[Sequence[int]] = None, trace: Optional[dict] = None,
            noise: Optional[tuple] = None, dtype=np.float64, rope: str = "exact",
            pos: Optional[Sequence[int]] = None, seq: Optional[Sequence[int]] = None) -> np.ndarray:
    """Logits float64[len(out_rows), n_vocab] of one sequence decoded from position 0 (out_rows: indices
    into tokens, default all); pos / seq (one per token) instead give each token its position and
    sequence: a token sees the tokens of its sequence at positions <= its own. trace, if a dict, receives
    "x": the residual stream after each layer.
    noise = (seed, eps): every input of a format rounding (activation quantisation, f16 K/V / Q / P, the
    GELU table) is multiplied by 1 + eps N(0, 1) first: one member of the ensemble that measures how far
    float32-sized differences alone move the logits (the noise floor of any float32 implementation).
    dtype=np.float32 runs the same graph in float32 arithmetic (numpy / BLAS order): one more float32
    implementation, whose distance to the float64 reference is another sample of that floor.
    rope="f32" takes ggml's RoPE angles instead of the exact ones (float32 theta_scale = powf(base, -2/d),
    theta multiplied by it pair after pair in float32): what those angles alone cost."""
    toks = np.asarray(list(tokens), dtype=np.int64)
    if toks.ndim != 1 or toks.size == 0:
        raise ValueError("tokens must be a non-empty sequence of ids")
    if toks.min() < 0 or toks.max() >= model.hp.n_vocab:
        raise ValueError(f"token ids must lie in [0, {model.hp.n_vocab})")
    rows = np.arange(toks.size) if out_rows is None else np.asarray(list(out_rows), dtype=np.int64)
    p = np.arange(toks.size, dtype=np.int64) if pos is None else np.asarray(list(pos), dtype=np.int64)
    s = np.zeros(toks.size, np.int64) if seq is None else np.asarray(list(seq), dtype=np.int64)
    if p.shape != toks.shape or s.shape != toks.shape:
        raise ValueError("pos and seq must have one entry per token")
    return _Fwd(model, mode, kv, noise, dtype, rope).run(toks, p, s, rows, trace).astype(np.float64)
