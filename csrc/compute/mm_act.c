/* Per-row activation quantisation, as ggml-cpu does it on x86 before a matmul (docs/llama-cpp-behaviours.md §M2.2):
 *   Q8_0 / Q8_1: per 32, amax = max|x|, d = amax/127, id = 127/amax (0 when amax == 0),
 *                q = round-half-even(x * id); d stored fp16-rounded; Q8_1 adds s = fp16(d * sum q);
 *   Q8_K:        per 256, m = the element of largest magnitude (first one), iscale = -127/m,
 *                q = min(127, round-half-even(iscale * x)), d = 1/iscale (f32, negative when m > 0),
 *                bsums = sums of q per 16;
 *   F16 / BF16:  round to nearest even.
 * A row's bytes depend on that row alone. */
#include <math.h>
#include <string.h>

#include "ub_compute.h"
#include "mm_internal.h"

static inline float fp16_round(float f) { return ub_h2f(ub_f2h(f)); }

static inline uint16_t f2bf(float f) { /* round to nearest even, NaN kept quiet */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64u);
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

/* A block holding a NaN or an infinity gets d = NaN and q = 0: the rows it feeds come out NaN (as in
 * llama.cpp), and no non-finite value is ever converted to an integer. */

/* x: float[32] -> blk (fields d, qs); returns sum of the q's. */
static int quant_q8_32(const float *x, float *d_out, int8_t *qs, float *d_exact) {
    float amax = 0.0f;
    int bad = 0;
    for (int j = 0; j < 32; j++) {
        const float a = fabsf(x[j]);
        bad |= !(a <= 3.4028234663852886e38f);
        if (a > amax) amax = a;
    }
    if (bad) {
        memset(qs, 0, 32);
        *d_out = *d_exact = NAN;
        return 0;
    }
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < 32; j++) {
        const int q = (int)rintf(x[j] * id);
        qs[j] = (int8_t)q;
        sum += q;
    }
    *d_out = fp16_round(d);
    *d_exact = d;
    return sum;
}

static void quant_q8_k(const float *x, ub_act_q8_k *b) {
    float amax = 0.0f, mx = 0.0f;
    int bad = 0;
    for (int j = 0; j < 256; j++) {
        const float a = fabsf(x[j]);
        bad |= !(a <= 3.4028234663852886e38f);
        if (a > amax) {
            amax = a;
            mx = x[j];
        }
    }
    if (amax == 0.0f || bad) {
        b->d = bad ? NAN : 0.0f;
        memset(b->qs, 0, sizeof b->qs);
        memset(b->bsums, 0, sizeof b->bsums);
        return;
    }
    const float iscale = -127.0f / mx;
    for (int j = 0; j < 256; j++) {
        const int v = (int)rintf(iscale * x[j]);
        b->qs[j] = (int8_t)(v < 127 ? v : 127);
    }
    for (int g = 0; g < 16; g++) {
        int s = 0;
        for (int j = 0; j < 16; j++) s += b->qs[16 * g + j];
        b->bsums[g] = (int16_t)s;
    }
    b->d = 1.0f / iscale;
}

int64_t ub_mm_act_row_bytes(int32_t act, int64_t k) {
    switch (act) {
    case UB_ACT_F32: return 4 * k;
    case UB_ACT_F16: case UB_ACT_BF16: return 2 * k;
    case UB_ACT_Q8_0: return (k / 32) * (int64_t)sizeof(ub_act_q8_0);
    case UB_ACT_Q8_1: return (k / 32) * (int64_t)sizeof(ub_act_q8_1);
    case UB_ACT_Q8_K: return (k / 256) * (int64_t)sizeof(ub_act_q8_k);
    }
    return -1;
}

/* x: float[k] (k a multiple of the act block) -> out: ub_mm_act_row_bytes(act, k) bytes. */
void ub_mm_quant_row_generic(int32_t act, const float *x, int64_t k, uint8_t *out) {
    switch (act) {
    case UB_ACT_F32:
        memcpy(out, x, (size_t)k * 4);
        break;
    case UB_ACT_F16: {
        uint16_t *h = (uint16_t *)out;
        for (int64_t i = 0; i < k; i++) h[i] = ub_f2h(x[i]);
        break;
    }
    case UB_ACT_BF16: {
        uint16_t *h = (uint16_t *)out;
        for (int64_t i = 0; i < k; i++) h[i] = f2bf(x[i]);
        break;
    }
    case UB_ACT_Q8_0: {
        ub_act_q8_0 *b = (ub_act_q8_0 *)out;
        float de;
        for (int64_t i = 0; i < k / 32; i++) quant_q8_32(x + 32 * i, &b[i].d, b[i].qs, &de);
        break;
    }
    case UB_ACT_Q8_1: {
        ub_act_q8_1 *b = (ub_act_q8_1 *)out;
        for (int64_t i = 0; i < k / 32; i++) {
            float de;
            const int sum = quant_q8_32(x + 32 * i, &b[i].d, b[i].qs, &de);
            b[i].s = fp16_round(de * (float)sum);
        }
        break;
    }
    case UB_ACT_Q8_K: {
        ub_act_q8_k *b = (ub_act_q8_k *)out;
        for (int64_t i = 0; i < k / 256; i++) quant_q8_k(x + 256 * i, &b[i]);
        break;
    }
    }
}
