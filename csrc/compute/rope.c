/* RoPE and the K-shift, following ggml's CPU rope: theta_scale = base^(-2/n_rot) in float, theta of pair i
 * = freq_scale * pos * theta_scale^i accumulated by repeated multiplication, rotation in float. */
#include <math.h>
#include <stdlib.h>

#include "ub_common.h"
#include "ub_compute.h"
#include "ub_matmul.h"

/* One pair's (cos, sin) as ggml's rope_yarn: theta_extrap = theta / freq factor, interpolated by freq_scale,
 * blended with YaRN's ramp when ext_factor != 0 (which also scales the magnitude); y NULL: plain RoPE. */
static void rope_pair(float *c, float *s, float theta, int32_t i, float freq_scale, const ub_rope_yarn *y) {
    if (!y) {
        const float t = freq_scale * theta;
        *c = cosf(t);
        *s = sinf(t);
        return;
    }
    const float extrap = y->freq_factors ? theta / y->freq_factors[i] : theta;
    const float interp = freq_scale * extrap;
    float t = interp, mscale = y->attn_factor;
    if (y->ext_factor != 0.0f) {
        const float r = ((float)i - y->corr_lo) / fmaxf(0.001f, y->corr_hi - y->corr_lo);
        const float ramp = (1.0f - fminf(1.0f, fmaxf(0.0f, r))) * y->ext_factor;
        t = interp * (1.0f - ramp) + extrap * ramp;
        mscale *= 1.0f + 0.1f * logf(1.0f / freq_scale);
    }
    *c = cosf(t) * mscale;
    *s = sinf(t) * mscale;
}

/* cs: float[n_rot] caller-owned scratch receiving (cos, sin) of each of the n_rot/2 pairs for position p
 * (one position for all pairs); y: the YaRN / frequency-factor parameters or NULL. */
static void rope_cache(float *cs, int32_t n_rot, float p, float theta_scale, float freq_scale,
                       const ub_rope_yarn *y) {
    float theta = p;
    for (int32_t i = 0; i < n_rot / 2; i++) {
        rope_pair(&cs[2 * i], &cs[2 * i + 1], theta, i, freq_scale, y);
        theta *= theta_scale;
    }
}

/* M-RoPE cache: pair i takes the position of its section (sections int32[4], pos4 float[4]). */
static void rope_cache_multi(float *cs, int32_t n_rot, const float *pos4, const int32_t *sections,
                             float theta_scale, float freq_scale) {
    const int32_t sect_dims = sections[0] + sections[1] + sections[2] + sections[3];
    float theta[4] = {pos4[0], pos4[1], pos4[2], pos4[3]};
    for (int32_t i = 0; i < n_rot / 2; i++) {
        const int32_t sector = sect_dims > 0 ? i % sect_dims : 0;
        int32_t which = 3;
        if (sector < sections[0]) which = 0;
        else if (sector < sections[0] + sections[1]) which = 1;
        else if (sector < sections[0] + sections[1] + sections[2]) which = 2;
        const float t = freq_scale * theta[which];
        cs[2 * i] = cosf(t);
        cs[2 * i + 1] = sinf(t);
        for (int j = 0; j < 4; j++) theta[j] *= theta_scale;
    }
}

/* Rotate one head vector x: float[head_dim] (first n_rot dims) with cs: float[n_rot] (cos, sin per pair). */
static void rotate_head(float *x, const float *cs, int32_t n_rot, int neox) {
    const int32_t half = n_rot / 2;
    for (int32_t i = 0; i < half; i++) {
        const int32_t a = neox ? i : 2 * i;
        const int32_t b = neox ? i + half : 2 * i + 1;
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const float x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
    }
}

static int rope_args_ok(int32_t n_head, int32_t head_dim, int32_t n_rot, int32_t mode) {
    if (n_head <= 0 || head_dim <= 0 || n_rot <= 0 || n_rot > head_dim || (n_rot & 1)) return 0;
    return mode == UB_ROPE_NORM || mode == UB_ROPE_NEOX || mode == UB_ROPE_MROPE;
}

/* x: float[n_rows][n_head][head_dim] in place (caller-owned); pos: int32[n_pos][n_rows] (caller-owned);
 * sections: int32[4] when mode == UB_ROPE_MROPE (caller-owned). */
int ub_rope_ext(float *x, int32_t n_rows, int32_t n_head, int32_t head_dim, int32_t n_rot,
                const int32_t *pos, int32_t n_pos, int32_t mode, float base, float freq_scale,
                const int32_t *sections, const ub_rope_yarn *yarn) {
    if (!x || !pos || n_rows < 0 || n_pos < 1 || !rope_args_ok(n_head, head_dim, n_rot, mode) || !(base > 0.0f))
        return UB_E_ARG;
    if (mode == UB_ROPE_MROPE) {
        if (n_pos != 4 || !sections || yarn) return UB_E_ARG;
        for (int j = 0; j < 4; j++)
            if (sections[j] < 0) return UB_E_ARG;
    }
    float *cs = (float *)malloc(sizeof(float) * (size_t)n_rot);
    if (!cs) return UB_E_NOMEM;
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    const int neox = mode != UB_ROPE_NORM;
    for (int32_t r = 0; r < n_rows; r++) {
        if (mode == UB_ROPE_MROPE) {
            float p4[4];
            for (int j = 0; j < 4; j++) p4[j] = (float)pos[(int64_t)j * n_rows + r];
            rope_cache_multi(cs, n_rot, p4, sections, theta_scale, freq_scale);
        } else {
            rope_cache(cs, n_rot, (float)pos[r], theta_scale, freq_scale, yarn);
        }
        float *row = x + (int64_t)r * n_head * head_dim;
        for (int32_t h = 0; h < n_head; h++) rotate_head(row + (int64_t)h * head_dim, cs, n_rot, neox);
    }
    free(cs);
    return UB_OK;
}

/* k: [n_cells][n_head_kv][head_dim] float32 or half (uint16), in place, caller-owned;
 * delta: int32[n_cells], caller-owned. */
int ub_rope_shift_ext(void *k, int32_t dtype, int64_t n_cells, int32_t n_head_kv, int32_t head_dim,
                      int32_t n_rot, const int32_t *delta, int32_t mode, float base, float freq_scale,
                      const ub_rope_yarn *yarn) {
    if (!k || !delta || n_cells < 0 || !rope_args_ok(n_head_kv, head_dim, n_rot, mode) || !(base > 0.0f))
        return UB_E_ARG;
    if (dtype != UB_T_F32 && dtype != UB_T_F16) return UB_E_ARG;
    float *cs = (float *)malloc(sizeof(float) * ((size_t)n_rot + (size_t)head_dim));
    if (!cs) return UB_E_NOMEM;
    float *tmp = cs + n_rot;
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    const int neox = mode != UB_ROPE_NORM;
    const int64_t row = (int64_t)n_head_kv * head_dim;
    for (int64_t c = 0; c < n_cells; c++) {
        if (delta[c] == 0) continue;
        rope_cache(cs, n_rot, (float)delta[c], theta_scale, freq_scale, yarn);
        for (int32_t h = 0; h < n_head_kv; h++) {
            const int64_t off = c * row + (int64_t)h * head_dim;
            if (dtype == UB_T_F32) {
                rotate_head((float *)k + off, cs, n_rot, neox);
            } else {
                uint16_t *hk = (uint16_t *)k + off;
                for (int32_t d = 0; d < head_dim; d++) tmp[d] = ub_h2f(hk[d]);
                rotate_head(tmp, cs, n_rot, neox);
                for (int32_t d = 0; d < head_dim; d++) hk[d] = ub_f2h(tmp[d]);
            }
        }
    }
    free(cs);
    return UB_OK;
}

/* x, pos, sections: as ub_rope_ext (no YaRN). */
int ub_rope(float *x, int32_t n_rows, int32_t n_head, int32_t head_dim, int32_t n_rot,
            const int32_t *pos, int32_t n_pos, int32_t mode, float base, float freq_scale,
            const int32_t *sections) {
    return ub_rope_ext(x, n_rows, n_head, head_dim, n_rot, pos, n_pos, mode, base, freq_scale, sections, NULL);
}

/* k, delta: as ub_rope_shift_ext (no YaRN). */
int ub_rope_shift(void *k, int32_t dtype, int64_t n_cells, int32_t n_head_kv, int32_t head_dim,
                  int32_t n_rot, const int32_t *delta, int32_t mode, float base, float freq_scale) {
    return ub_rope_shift_ext(k, dtype, n_cells, n_head_kv, head_dim, n_rot, delta, mode, base, freq_scale, NULL);
}

/* ggml_rope_yarn_corr_dim: the pair index whose wavelength makes n_rot_beta turns over n_ctx_orig. */
static float yarn_corr_dim(int32_t n_dims, int32_t n_ctx_orig, float n_rot_beta, float base) {
    return (float)n_dims * logf((float)n_ctx_orig / (n_rot_beta * 2 * (float)3.14159265358979323846)) / (2 * logf(base));
}

/* y: caller-owned struct to fill; freq_factors: float[n_rot/2] or NULL (kept by pointer). */
int ub_rope_yarn_init(ub_rope_yarn *y, int32_t n_rot, int32_t n_ctx_orig, float base, float ext_factor,
                      float attn_factor, float beta_fast, float beta_slow, const float *freq_factors) {
    if (!y || n_rot <= 0 || n_ctx_orig <= 0 || !(base > 0.0f) || !(beta_fast > 0.0f) || !(beta_slow > 0.0f))
        return UB_E_ARG;
    const float start = floorf(yarn_corr_dim(n_rot, n_ctx_orig, beta_fast, base));
    const float end = ceilf(yarn_corr_dim(n_rot, n_ctx_orig, beta_slow, base));
    y->corr_lo = fmaxf(0.0f, start);
    y->corr_hi = fminf((float)(n_rot - 1), end);
    y->ext_factor = ext_factor;
    y->attn_factor = attn_factor;
    y->freq_factors = freq_factors;
    return UB_OK;
}

/* llama_context's yarn_attn_factor for a model without rope.scaling.yarn_log_multiplier. */
float ub_rope_attn_factor(float ext_factor, float freq_scale, float rope_attn_factor) {
    float a = 1.0f;
    if (ext_factor != 0.0f) {
        const float factor = 1.0f / freq_scale;
        a = factor <= 1.0f ? 1.0f : 0.1f * 1.0f * logf(factor) + 1.0f;
        a *= 1.0f / (1.0f + 0.1f * logf(factor));
    }
    return a * rope_attn_factor;
}

/* src: uint16[n] halves, dst: float[n]; caller-owned. */
void ub_f16_to_f32(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = ub_h2f(src[i]);
}

/* src: float[n], dst: uint16[n] halves (round to nearest even); caller-owned. */
void ub_f32_to_f16(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = ub_f2h(src[i]);
}
