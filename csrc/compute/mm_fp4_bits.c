/* Plain-C dequantisers and dot kernels of NVFP4, Q1_0 and Q2_0 (GGML types 40, 41, 42: the weight types
 * ggml pairs with Q8_0 activations that came after MXFP4) and their type-table entries. Block layouts
 * (little-endian), as llama.cpp 0c1e570 / gguf.quants define them:
 *   NVFP4: 64 elements in 36 bytes: d[4] unsigned e4m3 scales (one per 16 elements), then qs[32]; sub-block s
 *          holds qs[8 s .. 8 s + 7], element j (< 8) in the low nibble of qs[8 s + j], element j + 8 in the high
 *          nibble; a nibble is an e2m1 code (ub_mxfp4_kv gives twice its value, so the scale is halved:
 *          value = (ue4m3(d[s]) / 2) * kv[code]; the e4m3 bytes 0x00 and 0x7F mean 0, bit 7 is ignored).
 *   Q1_0:  128 elements in 18 bytes: f16 d, then 16 bytes of bits, element j = bit j % 8 of byte j / 8:
 *          value = +d when set, -d when clear.
 *   Q2_0:  64 elements in 18 bytes: f16 d, then 16 bytes of 2-bit codes, element j = bits 2 (j % 4) .. of byte
 *          j / 4: value = (code - 1) * d (codes 0..3 -> -1, 0, 1, 2).
 * Dot kernels against Q8_0 activation blocks (32 elements each; a weight block spans 2 (NVFP4, Q2_0) or 4
 * (Q1_0) of them). Every weight value is an exact small integer times the block (sub-block) factor, so each
 * kernel forms exact int32 sums over the 16 (NVFP4) or 32 elements that share one weight and one activation
 * scale, then float steps in a fixed order, one accumulator per activation row, blocks in index order:
 *   NVFP4: per sub-block s of activation block k: acc += (d_x[k] * sc[s]) * isum_s            (ggml's order)
 *   Q1_0 / Q2_0: per weight block: t = sum_k d_x[k] * isum_k (k ascending, from 0); acc += d_w * t
 *          (bit-equal to ggml-cpu's Q2_0 kernel on this machine's build; Q1_0's SIMD kernel there sums in
 *          another order, a few ulp away).
 * The dequantisers compute gguf.quants' / ggml's float32 operations (one product per element). The SIMD dot
 * kernels (mm_fp4_simd.h) give these kernels' results bit for bit. */
#include "ub_compute.h"
#include "ub_matmul.h"
#include "mm_iq.h"

static inline float rd16(const uint8_t *p) { return ub_h2f((uint16_t)(p[0] | (p[1] << 8))); }
static inline int32_t idot(const int8_t *a, const int8_t *b, int n) {
    int32_t s = 0;
    for (int j = 0; j < n; j++) s += (int32_t)a[j] * (int32_t)b[j];
    return s;
}

/* unsigned e4m3 byte -> its value / 2 (exact in float32) */
static float ue4m3_half(uint8_t x) {
    if (x == 0 || x == 0x7F) return 0.0f;
    const int e = (x >> 3) & 15, m = x & 7;
    float v = e == 0 ? (float)m * (1.0f / 512.0f) : (1.0f + (float)m / 8.0f);
    for (int i = 7; i < e; i++) v *= 2.0f;      /* 2^(e - 7), exact */
    for (int i = e; i < 7 && e > 0; i++) v *= 0.5f;
    return v * 0.5f;
}

/* ---- decoders: one block (read only) -> q[blck] int8 ---- */
static void dec_nvfp4(const uint8_t *b, int8_t *q) { /* 36 bytes: d[4], qs[32] -> q[64] */
    for (int s = 0; s < 4; s++)
        for (int j = 0; j < 8; j++) {
            const uint8_t v = b[4 + 8 * s + j];
            q[16 * s + j] = ub_mxfp4_kv[v & 15];
            q[16 * s + j + 8] = ub_mxfp4_kv[v >> 4];
        }
}
static void dec_q1_0(const uint8_t *b, int8_t *q) { /* 18 bytes: d, bits[16] -> q[128] in {-1, 1} */
    for (int j = 0; j < 128; j++) q[j] = (int8_t)(((b[2 + j / 8] >> (j % 8)) & 1) ? 1 : -1);
}
static void dec_q2_0(const uint8_t *b, int8_t *q) { /* 18 bytes: d, codes[16] -> q[64] in -1..2 */
    for (int j = 0; j < 64; j++) q[j] = (int8_t)(((b[2 + j / 4] >> (2 * (j % 4))) & 3) - 1);
}

/* ---- dequantisers: one block (read only) -> y[blck] ---- */
static void deq_nvfp4(const uint8_t *b, float *y) {
    int8_t q[64];
    dec_nvfp4(b, q);
    for (int s = 0; s < 4; s++) {
        const float d = ue4m3_half(b[s]);
        for (int j = 0; j < 16; j++) y[16 * s + j] = d * (float)q[16 * s + j];
    }
}
static void deq_q1_0(const uint8_t *b, float *y) {
    int8_t q[128];
    dec_q1_0(b, q);
    const float d = rd16(b);
    for (int j = 0; j < 128; j++) y[j] = (float)q[j] * d;
}
static void deq_q2_0(const uint8_t *b, float *y) {
    int8_t q[64];
    dec_q2_0(b, q);
    const float d = rd16(b);
    for (int j = 0; j < 64; j++) y[j] = (float)q[j] * d;
}

/* ---- dot kernels (contract: mm_internal.h; a: Q8_0 activation rows of nb * blck / 32 blocks) ---- */

#define ACT0(r, k) ((const ub_act_q8_0 *)(a + (r) * as) + (k))

static void dot_nvfp4(int64_t nb, const uint8_t *w, const uint8_t *a, int64_t as, int nr, float *y, int64_t ys) {
    float acc[UB_MM_RT] = {0};
    int8_t q[64];
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = w + ib * 36;
        dec_nvfp4(b, q);
        float sc[4];
        for (int s = 0; s < 4; s++) sc[s] = ue4m3_half(b[s]);
        for (int r = 0; r < nr; r++)
            for (int k = 0; k < 2; k++) {
                const ub_act_q8_0 *x = ACT0(r, 2 * ib + k);
                for (int h = 0; h < 2; h++) {
                    const int s = 2 * k + h;
                    acc[r] += (x->d * sc[s]) * (float)idot(q + 16 * s, x->qs + 16 * h, 16);
                }
            }
    }
    for (int r = 0; r < nr; r++) y[r * ys] = acc[r];
}

/* Q1_0 (NSUB 4, 18 bytes) and Q2_0 (NSUB 2, 18 bytes): t = sum_k d_x[k] * isum_k; acc += d_w * t */
#define DOTB(NAME, NSUB, DECODE)                                                                           \
    static void NAME(int64_t nb, const uint8_t *w, const uint8_t *a, int64_t as, int nr, float *y,          \
                     int64_t ys) {                                                                         \
        float acc[UB_MM_RT] = {0};                                                                         \
        int8_t q[32 * (NSUB)];                                                                             \
        for (int64_t ib = 0; ib < nb; ib++) {                                                              \
            const uint8_t *b = w + ib * 18;                                                                \
            DECODE(b, q);                                                                                  \
            const float dw = rd16(b);                                                                      \
            for (int r = 0; r < nr; r++) {                                                                 \
                float t = 0.0f;                                                                            \
                for (int k = 0; k < (NSUB); k++) {                                                         \
                    const ub_act_q8_0 *x = ACT0(r, (NSUB) * ib + k);                                       \
                    t += x->d * (float)idot(q + 32 * k, x->qs, 32);                                        \
                }                                                                                          \
                acc[r] += dw * t;                                                                          \
            }                                                                                              \
        }                                                                                                  \
        for (int r = 0; r < nr; r++) y[r * ys] = acc[r];                                                   \
    }
DOTB(dot_q1_0, 4, dec_q1_0)
DOTB(dot_q2_0, 2, dec_q2_0)

static const ub_mm_type g_fp4_bits_types[] = {
    {UB_T_NVFP4, 64, 36, UB_ACT_Q8_0, dot_nvfp4, deq_nvfp4, 0},
    {UB_T_Q1_0, 128, 18, UB_ACT_Q8_0, dot_q1_0, deq_q1_0, 0},
    {UB_T_Q2_0, 64, 18, UB_ACT_Q8_0, dot_q2_0, deq_q2_0, 0},
};

const ub_mm_type *ub_mm_find_fp4_bits(int32_t type) {
    for (size_t i = 0; i < sizeof g_fp4_bits_types / sizeof g_fp4_bits_types[0]; i++)
        if (g_fp4_bits_types[i].type == type) return &g_fp4_bits_types[i];
    return NULL;
}
