/* Plain-C block decoders, dequantisers and dot kernels for every weight type, and the type table.
 * Block layouts: docs/llama-cpp-behaviours.md §M2.1 (little-endian; f16 scales). A dot kernel decodes each weight block
 * once into small integers (+ integer sub-block scales/mins) and reuses it for the nr activation rows;
 * inside a block everything is exact int32 arithmetic, then one float combination per block into the
 * row's single accumulator, blocks in index order. Nothing depends on nr or on the other rows. */
#include <string.h>

#include "ub_compute.h"
#include "ub_matmul.h"
#include "mm_internal.h"
#include "mm_iq.h"

static inline float rd16(const uint8_t *p) { return ub_h2f((uint16_t)(p[0] | (p[1] << 8))); }
static inline float bf2f(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* ---- 32-element blocks: q[32] (signed or unsigned small integers), d, m ---- */

static void dec_q4_0(const uint8_t *b, int8_t *q) {
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)((b[2 + j] & 15) - 8);
        q[j + 16] = (int8_t)((b[2 + j] >> 4) - 8);
    }
}
static void dec_q4_1(const uint8_t *b, int8_t *q) {
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)(b[4 + j] & 15);
        q[j + 16] = (int8_t)(b[4 + j] >> 4);
    }
}
static void dec_q5(const uint8_t *qh4, const uint8_t *qs, int off, int8_t *q) {
    const uint32_t h = rd32(qh4);
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)(((qs[j] & 15) | (((h >> j) & 1u) << 4)) - off);
        q[j + 16] = (int8_t)(((qs[j] >> 4) | (((h >> (j + 16)) & 1u) << 4)) - off);
    }
}

/* ---- 256-element blocks: q[256], per-sub-block integer scales sc[] and mins mn[] ---- */

static void scale_min_k4(const uint8_t *s, int *sc, int *mn) { /* 8 six-bit scales and mins */
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
    }
    for (int j = 4; j < 8; j++) {
        sc[j] = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        mn[j] = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}
static void dec_q4_k(const uint8_t *b, int8_t *q, int *sc, int *mn) {
    scale_min_k4(b + 4, sc, mn);
    const uint8_t *qs = b + 16;
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            q[64 * c + l] = (int8_t)(qs[32 * c + l] & 15);
            q[64 * c + 32 + l] = (int8_t)(qs[32 * c + l] >> 4);
        }
}
static void dec_q5_k(const uint8_t *b, int8_t *q, int *sc, int *mn) {
    scale_min_k4(b + 4, sc, mn);
    const uint8_t *qh = b + 16, *qs = b + 48;
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            q[64 * c + l] = (int8_t)((qs[32 * c + l] & 15) | (((qh[l] >> (2 * c)) & 1) << 4));
            q[64 * c + 32 + l] = (int8_t)((qs[32 * c + l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4));
        }
}
static void dec_q6_k(const uint8_t *b, int8_t *q, int *sc) {
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
        int8_t *e = q + 128 * h;
        for (int l = 0; l < 32; l++) {
            e[l] = (int8_t)(((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32);
            e[l + 32] = (int8_t)(((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32);
            e[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            e[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
    for (int s = 0; s < 16; s++) sc[s] = (int8_t)b[192 + s];
}
static void dec_q2_k(const uint8_t *b, int8_t *q, int *sc, int *mn) {
    for (int s = 0; s < 16; s++) {
        sc[s] = b[s] & 15;
        mn[s] = b[s] >> 4;
    }
    const uint8_t *qs = b + 16;
    for (int h = 0; h < 2; h++)
        for (int g = 0; g < 4; g++)
            for (int j = 0; j < 32; j++) q[128 * h + 32 * g + j] = (int8_t)((qs[32 * h + j] >> (2 * g)) & 3);
}
static void dec_q3_k(const uint8_t *b, int8_t *q, int *sc) {
    const uint8_t *hm = b, *qs = b + 32, *s = b + 96;
    for (int k = 0; k < 16; k++) {
        const int lo = k < 8 ? (s[k] & 15) : (s[k - 8] >> 4);
        const int hi = (s[8 + (k % 4)] >> (2 * (k / 4))) & 3;
        sc[k] = (lo | (hi << 4)) - 32;
    }
    for (int h = 0; h < 2; h++)
        for (int g = 0; g < 4; g++)
            for (int j = 0; j < 32; j++) {
                const int v = (qs[32 * h + j] >> (2 * g)) & 3;
                const int hb = (hm[j] >> (4 * h + g)) & 1;
                q[128 * h + 32 * g + j] = (int8_t)(v - (hb ? 0 : 4));
            }
}

/* ---- dequantisers: one block -> float[blck]; value = (d * sc) * q - (dmin * mn) in f32 ---- */

static void deq_q4_0(const uint8_t *b, float *y) {
    int8_t q[32];
    dec_q4_0(b, q);
    const float d = rd16(b);
    for (int j = 0; j < 32; j++) y[j] = (float)q[j] * d;
}
static void deq_q4_1(const uint8_t *b, float *y) {
    int8_t q[32];
    dec_q4_1(b, q);
    const float d = rd16(b), m = rd16(b + 2);
    for (int j = 0; j < 32; j++) y[j] = d * (float)q[j] + m;
}
static void deq_q5_0(const uint8_t *b, float *y) {
    int8_t q[32];
    dec_q5(b + 2, b + 6, 16, q);
    const float d = rd16(b);
    for (int j = 0; j < 32; j++) y[j] = (float)q[j] * d;
}
static void deq_q5_1(const uint8_t *b, float *y) {
    int8_t q[32];
    dec_q5(b + 4, b + 8, 0, q);
    const float d = rd16(b), m = rd16(b + 2);
    for (int j = 0; j < 32; j++) y[j] = d * (float)q[j] + m;
}
static void deq_q8_0(const uint8_t *b, float *y) {
    const float d = rd16(b);
    for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)b[2 + j] * d;
}
static void deq_kmin(const int8_t *q, const int *sc, const int *mn, int sub, float d, float dmin, float *y) {
    for (int s = 0; s < 256 / sub; s++) {
        const float ds = d * (float)sc[s], dm = dmin * (float)mn[s];
        for (int j = 0; j < sub; j++) y[s * sub + j] = ds * (float)q[s * sub + j] - dm;
    }
}
static void deq_kplain(const int8_t *q, const int *sc, float d, float *y) {
    for (int s = 0; s < 16; s++) {
        const float ds = d * (float)sc[s];
        for (int j = 0; j < 16; j++) y[s * 16 + j] = ds * (float)q[s * 16 + j];
    }
}
static void deq_q4_k(const uint8_t *b, float *y) {
    int8_t q[256];
    int sc[8], mn[8];
    dec_q4_k(b, q, sc, mn);
    deq_kmin(q, sc, mn, 32, rd16(b), rd16(b + 2), y);
}
static void deq_q5_k(const uint8_t *b, float *y) {
    int8_t q[256];
    int sc[8], mn[8];
    dec_q5_k(b, q, sc, mn);
    deq_kmin(q, sc, mn, 32, rd16(b), rd16(b + 2), y);
}
static void deq_q2_k(const uint8_t *b, float *y) {
    int8_t q[256];
    int sc[16], mn[16];
    dec_q2_k(b, q, sc, mn);
    deq_kmin(q, sc, mn, 16, rd16(b + 80), rd16(b + 82), y);
}
static void deq_q3_k(const uint8_t *b, float *y) {
    int8_t q[256];
    int sc[16];
    dec_q3_k(b, q, sc);
    deq_kplain(q, sc, rd16(b + 108), y);
}
static void deq_q6_k(const uint8_t *b, float *y) {
    int8_t q[256];
    int sc[16];
    dec_q6_k(b, q, sc);
    deq_kplain(q, sc, rd16(b + 208), y);
}
static void deq_f32(const uint8_t *b, float *y) { memcpy(y, b, 4); }
static void deq_f16(const uint8_t *b, float *y) { y[0] = rd16(b); }
static void deq_bf16(const uint8_t *b, float *y) { y[0] = bf2f((uint16_t)(b[0] | (b[1] << 8))); }

/* ---- dot kernels (contract: mm_internal.h) ---- */

static inline int32_t idot(const int8_t *a, const int8_t *b, int n) {
    int32_t s = 0;
    for (int j = 0; j < n; j++) s += (int32_t)a[j] * (int32_t)b[j];
    return s;
}

#define ACT(T, r, ib) ((const T *)(a + (r) * as) + (ib))

/* Q4_0 / Q5_0 / Q8_0 against Q8_0: acc += (d_w * d_a) * isum. */
#define DOT_Q8_0_PAIRED(NAME, DECODE)                                                                      \
    static void NAME(int64_t nb, const uint8_t *w, const uint8_t *a, int64_t as, int nr, float *y,          \
                     int64_t ys) {                                                                         \
        float acc[UB_MM_RT] = {0};                                                                         \
        int8_t q[32];                                                                                      \
        for (int64_t ib = 0; ib < nb; ib++) {                                                              \
            const uint8_t *b = w + ib * BYTES;                                                             \
            DECODE;                                                                                        \
            const float dw = rd16(b);                                                                      \
            for (int r = 0; r < nr; r++) {                                                                 \
                const ub_act_q8_0 *x = ACT(ub_act_q8_0, r, ib);                                            \
                acc[r] += (dw * x->d) * (float)idot(q, x->qs, 32);                                         \
            }                                                                                              \
        }                                                                                                  \
        for (int r = 0; r < nr; r++) y[r * ys] = acc[r];                                                   \
    }
#define BYTES 18
DOT_Q8_0_PAIRED(dot_q4_0, dec_q4_0(b, q))
#undef BYTES
#define BYTES 22
DOT_Q8_0_PAIRED(dot_q5_0, dec_q5(b + 2, b + 6, 16, q))
#undef BYTES
#define BYTES 34
DOT_Q8_0_PAIRED(dot_q8_0, memcpy(q, b + 2, 32))
#undef BYTES

/* Q4_1 / Q5_1 against Q8_1: acc += (d_w * d_a) * isum + m_w * s_a. */
#define DOT_Q8_1_PAIRED(NAME, DECODE)                                                                      \
    static void NAME(int64_t nb, const uint8_t *w, const uint8_t *a, int64_t as, int nr, float *y,          \
                     int64_t ys) {                                                                         \
        float acc[UB_MM_RT] = {0};                                                                         \
        int8_t q[32];                                                                                      \
        for (int64_t ib = 0; ib < nb; ib++) {                                                              \
            const uint8_t *b = w + ib * BYTES;                                                             \
            DECODE;                                                                                        \
            const float dw = rd16(b), mw = rd16(b + 2);                                                    \
            for (int r = 0; r < nr; r++) {                                                                 \
                const ub_act_q8_1 *x = ACT(ub_act_q8_1, r, ib);                                            \
                acc[r] += (dw * x->d) * (float)idot(q, x->qs, 32) + mw * x->s;                             \
            }                                                                                              \
        }                                                                                                  \
        for (int r = 0; r < nr; r++) y[r * ys] = acc[r];                                                   \
    }
#define BYTES 20
DOT_Q8_1_PAIRED(dot_q4_1, dec_q4_1(b, q))
#undef BYTES
#define BYTES 24
DOT_Q8_1_PAIRED(dot_q5_1, dec_q5(b + 4, b + 8, 0, q))
#undef BYTES

/* K-quants against Q8_K: isum = sum_s sc[s] * dot(sub-block s), imin = sum_s mn[s] * bsum(s);
 * acc += (d_w * d_a) * isum - (dmin_w * d_a) * imin. */
static inline float kdot(const int8_t *q, const int *sc, const int *mn, int sub, const ub_act_q8_k *x,
                         float dw, float dmw) {
    int32_t isum = 0, imin = 0;
    for (int s = 0; s < 256 / sub; s++) isum += sc[s] * idot(q + s * sub, x->qs + s * sub, sub);
    if (mn) {
        const int per = sub / 16;
        for (int s = 0; s < 256 / sub; s++) {
            int32_t bs = 0;
            for (int t = 0; t < per; t++) bs += x->bsums[s * per + t];
            imin += mn[s] * bs;
        }
        return (dw * x->d) * (float)isum - (dmw * x->d) * (float)imin;
    }
    return (dw * x->d) * (float)isum;
}

#define DOT_K(NAME, BYTES_, NSUB, SUB, DECODE, DW, DMW, HASMIN)                                            \
    static void NAME(int64_t nb, const uint8_t *w, const uint8_t *a, int64_t as, int nr, float *y,          \
                     int64_t ys) {                                                                         \
        float acc[UB_MM_RT] = {0};                                                                         \
        int8_t q[256];                                                                                     \
        int sc[NSUB], mn[NSUB];                                                                            \
        (void)mn;                                                                                          \
        for (int64_t ib = 0; ib < nb; ib++) {                                                              \
            const uint8_t *b = w + ib * BYTES_;                                                            \
            DECODE;                                                                                        \
            const float dw = DW, dmw = DMW;                                                                \
            for (int r = 0; r < nr; r++)                                                                   \
                acc[r] += kdot(q, sc, HASMIN ? mn : NULL, SUB, ACT(ub_act_q8_k, r, ib), dw, dmw);          \
        }                                                                                                  \
        for (int r = 0; r < nr; r++) y[r * ys] = acc[r];                                                   \
    }
DOT_K(dot_q4_k, 144, 8, 32, dec_q4_k(b, q, sc, mn), rd16(b), rd16(b + 2), 1)
DOT_K(dot_q5_k, 176, 8, 32, dec_q5_k(b, q, sc, mn), rd16(b), rd16(b + 2), 1)
DOT_K(dot_q2_k, 84, 16, 16, dec_q2_k(b, q, sc, mn), rd16(b + 80), rd16(b + 82), 1)
DOT_K(dot_q3_k, 110, 16, 16, dec_q3_k(b, q, sc), rd16(b + 108), 0.0f, 0)
DOT_K(dot_q6_k, 210, 16, 16, dec_q6_k(b, q, sc), rd16(b + 208), 0.0f, 0)

/* Float types: 8 partial sums (lane j takes elements j, j+8, ...), combined as ((0+4)+(2+6))+((1+5)+(3+7));
 * the tail (k % 8) is added last in order. Activations are F32 / F16 / BF16 as the weight. */
#define DOT_F(NAME, WT, AT, WCONV, ACONV)                                                                  \
    static void NAME(int64_t k, const uint8_t *w, const uint8_t *a, int64_t as, int nr, float *y,           \
                     int64_t ys) {                                                                         \
        const WT *wv = (const WT *)w;                                                                      \
        for (int r = 0; r < nr; r++) {                                                                     \
            const AT *av = (const AT *)(a + r * as);                                                       \
            float p[8] = {0};                                                                              \
            int64_t i = 0;                                                                                 \
            for (; i + 8 <= k; i += 8)                                                                     \
                for (int j = 0; j < 8; j++) p[j] += WCONV(wv[i + j]) * ACONV(av[i + j]);                   \
            float s = ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));                   \
            for (; i < k; i++) s += WCONV(wv[i]) * ACONV(av[i]);                                           \
            y[r * ys] = s;                                                                                 \
        }                                                                                                  \
    }
#define ID(x) (x)
DOT_F(dot_f32, float, float, ID, ID)
DOT_F(dot_f16, uint16_t, uint16_t, ub_h2f, ub_h2f)
DOT_F(dot_bf16, uint16_t, uint16_t, bf2f, bf2f)

static const ub_mm_type g_types[] = {
    {UB_T_F32, 1, 4, UB_ACT_F32, dot_f32, deq_f32, 0},
    {UB_T_F16, 1, 2, UB_ACT_F16, dot_f16, deq_f16, 0},
    {UB_T_BF16, 1, 2, UB_ACT_BF16, dot_bf16, deq_bf16, 0},
    {UB_T_Q4_0, 32, 18, UB_ACT_Q8_0, dot_q4_0, deq_q4_0, 0},
    {UB_T_Q4_1, 32, 20, UB_ACT_Q8_1, dot_q4_1, deq_q4_1, 0},
    {UB_T_Q5_0, 32, 22, UB_ACT_Q8_0, dot_q5_0, deq_q5_0, 0},
    {UB_T_Q5_1, 32, 24, UB_ACT_Q8_1, dot_q5_1, deq_q5_1, 0},
    {UB_T_Q8_0, 32, 34, UB_ACT_Q8_0, dot_q8_0, deq_q8_0, 0},
    {UB_T_Q2_K, 256, 84, UB_ACT_Q8_K, dot_q2_k, deq_q2_k, 0},
    {UB_T_Q3_K, 256, 110, UB_ACT_Q8_K, dot_q3_k, deq_q3_k, 0},
    {UB_T_Q4_K, 256, 144, UB_ACT_Q8_K, dot_q4_k, deq_q4_k, 0},
    {UB_T_Q5_K, 256, 176, UB_ACT_Q8_K, dot_q5_k, deq_q5_k, 0},
    {UB_T_Q6_K, 256, 210, UB_ACT_Q8_K, dot_q6_k, deq_q6_k, 0},
};

const ub_mm_type *ub_mm_find(int32_t type) {
    for (size_t i = 0; i < sizeof g_types / sizeof g_types[0]; i++)
        if (g_types[i].type == type) return &g_types[i];
    return ub_mm_find_iq(type);
}

int ub_mm_type_ready(const ub_mm_type *t) { return !t->tables || ub_mm_iq_ready(); }
