/* Compute kernels of the forward pass: RoPE (llama.cpp NORM / NEOX / M-RoPE pairings), the K-shift
 * (re-rotation of cached K by a per-cell delta) and IEEE half conversions. The attention over visible cells
 * is in ub_matmul.h (ub_attention_vis). Shapes and ownership are documented at each function. */
#ifndef UB_COMPUTE_H
#define UB_COMPUTE_H

#include <stdint.h>
#include <string.h>

/* cdef:begin */
/* RoPE pairings (values of llama.cpp's rope_type; the one definition). K/V cells are stored as the weight
 * types UB_T_F32 / UB_T_F16 of ub_matmul.h (values of ggml_type, as llama.cpp's type_k / type_v). */
enum {
    UB_ROPE_NORM = 0,      /* rotate consecutive pairs (x[2i], x[2i+1]) */
    UB_ROPE_NEOX = 2,      /* rotate halves (x[i], x[i + n_rot/2]) */
    UB_ROPE_MROPE = 8      /* NEOX pairing, position section chosen per pair by `sections` (n_pos = 4) */
};

/* Rotate x in place. x: float[n_rows][n_head][head_dim] (caller-owned, contiguous); pos: int32[n_pos][n_rows]
 * section-major (caller-owned); sections: int32[4] for UB_ROPE_MROPE, else ignored (may be NULL).
 * Only the first n_rot dims of each head rotate; theta_i = freq_scale * pos * base^(-2i/n_rot).
 * Returns UB_OK or UB_E_ARG. */
int ub_rope(float *x, int32_t n_rows, int32_t n_head, int32_t head_dim, int32_t n_rot,
            const int32_t *pos, int32_t n_pos, int32_t mode, float base, float freq_scale,
            const int32_t *sections);

/* RoPE scaling beyond linear (llama.cpp's ggml_rope_ext): YaRN's ramp between interpolated and extrapolated
 * angles, the magnitude factor on cos/sin, and per-pair frequency factors (Llama-3 rope_freqs, LongRoPE's
 * long/short factors). Filled by ub_rope_yarn_init; freq_factors: float[n_rot/2] or NULL (read only, owned
 * by the caller, must outlive the calls that use the struct). */
typedef struct {
    float ext_factor, attn_factor, corr_lo, corr_hi;
    const float *freq_factors;
} ub_rope_yarn;

/* y: the struct to fill (caller-owned). ext_factor / attn_factor: the context's values as llama.cpp derives
 * them (ub_rope_attn_factor); corr dims from n_rot, n_ctx_orig, base, beta_fast, beta_slow as
 * ggml_rope_yarn_corr_dims. Returns UB_OK or UB_E_ARG (n_rot <= 0, n_ctx_orig <= 0, base <= 0). */
int ub_rope_yarn_init(ub_rope_yarn *y, int32_t n_rot, int32_t n_ctx_orig, float base, float ext_factor,
                      float attn_factor, float beta_fast, float beta_slow, const float *freq_factors);

/* llama.cpp's context attention factor: with YaRN (ext_factor != 0) the mscale of 1/freq_scale, cancelled
 * by ggml's own factor, times the model's rope.scaling.attn_factor; else rope_attn_factor. */
float ub_rope_attn_factor(float ext_factor, float freq_scale, float rope_attn_factor);

/* ub_rope / ub_rope_shift with YaRN / frequency factors: yarn NULL is exactly ub_rope / ub_rope_shift. */
int ub_rope_ext(float *x, int32_t n_rows, int32_t n_head, int32_t head_dim, int32_t n_rot,
                const int32_t *pos, int32_t n_pos, int32_t mode, float base, float freq_scale,
                const int32_t *sections, const ub_rope_yarn *yarn);
int ub_rope_shift_ext(void *k, int32_t dtype, int64_t n_cells, int32_t n_head_kv, int32_t head_dim,
                      int32_t n_rot, const int32_t *delta, int32_t mode, float base, float freq_scale,
                      const ub_rope_yarn *yarn);

/* K-shift: rotate every cached key of cell c by delta[c] (cells with delta 0 are left untouched).
 * k: [n_cells][n_head_kv][head_dim] of float32 (dtype UB_T_F32) or IEEE half as uint16 (UB_T_F16),
 * caller-owned, modified in place; delta: int32[n_cells] caller-owned. M-RoPE shifts every section by
 * the same delta, which is the NEOX rotation. Returns UB_OK or UB_E_ARG. */
int ub_rope_shift(void *k, int32_t dtype, int64_t n_cells, int32_t n_head_kv, int32_t head_dim,
                  int32_t n_rot, const int32_t *delta, int32_t mode, float base, float freq_scale);

/* Elementwise IEEE half <-> float conversion (round to nearest even), n values, caller-owned buffers. */
void ub_f16_to_f32(const uint16_t *src, float *dst, int64_t n);
void ub_f32_to_f16(const float *src, uint16_t *dst, int64_t n);
/* cdef:end */

/* --- internal helpers (not exported) --- */
static inline float ub_h2f(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t ex = (h >> 10) & 0x1fu;
    const uint32_t man = h & 0x3ffu;
    uint32_t bits;
    float f;
    if (ex == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: man * 2^-24, exact in float */
            f = (float)man * 5.9604644775390625e-08f;
            memcpy(&bits, &f, 4);
            bits |= sign;
        }
    } else if (ex == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((ex + 112u) << 23) | (man << 13);
    }
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t ub_f2h(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf / nan (keep a quiet nan) */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? (0x200u | ((ax >> 13) & 0x3ffu)) : 0u));
    if (ax >= 0x477ff000u) /* >= 65520 rounds to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below 2^-14: half subnormal or zero; adding 0.5 rounds to a multiple of 2^-24 */
        float a;
        memcpy(&a, &ax, 4);
        a += 0.5f;
        uint32_t b;
        memcpy(&b, &a, 4);
        return (uint16_t)(sign | (b - 0x3f000000u));
    }
    /* normal: rebias exponent (127 -> 15) and round the 13 dropped bits to nearest even */
    ax += 0xc8000fffu + ((ax >> 13) & 1u);
    return (uint16_t)(sign | (ax >> 13));
}

#endif
