/* Plain-C block decoders, dequantisers and dot kernels of the i-quant, ternary and MXFP4 weight types
 * (IQ4_NL, IQ4_XS, IQ3_S, IQ3_XXS, IQ2_S, IQ2_XS, IQ2_XXS, IQ1_S, IQ1_M, TQ1_0, TQ2_0, MXFP4) and their
 * type-table entries. Block layouts: the gguf package's (gguf.quants), little-endian, f16 scales (MXFP4: an
 * e8m0 exponent byte).
 *
 * Every block value is an exact small integer times a per-block (sub-block) factor, so a dot kernel decodes a
 * block once into integers q[] (the value up to the factor) and integer sub-block multipliers sc[], forms the
 * exact int32 sum isum = sum_s sc[s] * (q . x) over the sub-blocks, then one float step per block
 * acc += (d_w * d_x) * isum, blocks in index order, one accumulator per activation row; the row ends with
 * y = fin * acc, fin an exact power of two (1/8 for IQ2_* and IQ1_*, 1/4 for IQ3_XXS):
 *   IQ4_NL / MXFP4: q = the table value (IQ4_NL values; twice the e2m1 value), per 32 against Q8_0;
 *   IQ4_XS:  q = IQ4_NL value, sc = 6-bit scale - 32 per 32;               against Q8_K (as every type below;
 *            its dot kernel keeps 8 lanes instead, see dot_iq4_xs)
 *   IQ3_XXS: q = +-grid (4..62), sc = 2 s + 1 per 32, fin 1/4   (value d (s + 1/2) / 2 grid);
 *   IQ3_S:   q = +-grid (1..15), sc = 2 s + 1 per 32            (value d (2 s + 1) grid);
 *   IQ2_XXS: q = +-grid (8, 25, 43), sc = 2 s + 1 per 32, fin 1/8 (value d (s + 1/2) / 4 grid);
 *   IQ2_XS / IQ2_S: the same with a scale per 16;
 *   IQ1_S:   q = 8 grid +- 1 (grid in -1..1, the +-1/8 delta per 32), sc = 2 s + 1 per 32, fin 1/8;
 *   IQ1_M:   the same, the delta per 8, sc per 16, d assembled from the four scale words' top nibbles;
 *   TQ1_0 / TQ2_0: q in -1..1 (-1..2), sc = 1.
 * The dequantisers compute exactly gguf.quants.dequantize's float32 operations (the tests check bit for bit). */
#include <math.h>
#include <string.h>

#include "ub_compute.h"
#include "ub_matmul.h"
#include "mm_iq.h"

static inline float rd16(const uint8_t *p) { return ub_h2f((uint16_t)(p[0] | (p[1] << 8))); }
static inline uint16_t rdu16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t rdu32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline int32_t idot(const int8_t *a, const int8_t *b, int n) {
    int32_t s = 0;
    for (int j = 0; j < n; j++) s += (int32_t)a[j] * (int32_t)b[j];
    return s;
}
/* the 8 bytes of grid point v, each negated where the sign byte s has its bit set */
static inline void put_signed8(uint64_t v, uint8_t s, int8_t *q) {
    for (int j = 0; j < 8; j++) {
        const int g = (int)((v >> (8 * j)) & 0xFF);
        q[j] = (int8_t)((s >> j) & 1 ? -g : g);
    }
}

/* ---- decoders: block -> q[blck], sc[] (see the header comment), returns nothing; d read by the caller ---- */

static void dec_iq4_nl(const uint8_t *b, int8_t *q) { /* 18 bytes: d, qs[16] */
    for (int j = 0; j < 16; j++) {
        q[j] = ub_iq4nl_kv[b[2 + j] & 15];
        q[j + 16] = ub_iq4nl_kv[b[2 + j] >> 4];
    }
}
static void dec_mxfp4(const uint8_t *b, int8_t *q) { /* 17 bytes: e, qs[16] */
    for (int j = 0; j < 16; j++) {
        q[j] = ub_mxfp4_kv[b[1 + j] & 15];
        q[j + 16] = ub_mxfp4_kv[b[1 + j] >> 4];
    }
}
static void dec_iq4_xs(const uint8_t *b, int8_t *q, int *sc) { /* 136: d, scales_h u16, scales_l[4], qs[128] */
    const uint16_t sh = rdu16(b + 2);
    for (int s = 0; s < 8; s++) {
        sc[s] = (int)(((b[4 + s / 2] >> (4 * (s % 2))) & 15) | (((sh >> (2 * s)) & 3) << 4)) - 32;
        const uint8_t *qs = b + 8 + 16 * s;
        for (int j = 0; j < 16; j++) {
            q[32 * s + j] = ub_iq4nl_kv[qs[j] & 15];
            q[32 * s + j + 16] = ub_iq4nl_kv[qs[j] >> 4];
        }
    }
}
static void dec_iq2_xxs(const uint8_t *b, int8_t *q, int *sc) { /* 66: d, 8 x (u32 grid ids, u32 signs+scale) */
    for (int s = 0; s < 8; s++) {
        const uint8_t *g = b + 2 + 8 * s;
        const uint32_t aux = rdu32(g + 4);
        sc[s] = 2 * (int)(aux >> 28) + 1;
        for (int l = 0; l < 4; l++) put_signed8(ub_iq2xxs_grid[g[l]], ub_iq_ksigns[(aux >> (7 * l)) & 127], q + 32 * s + 8 * l);
    }
}
static void dec_iq2_xs(const uint8_t *b, int8_t *q, int *sc) { /* 74: d, u16 qs[32], scales[8] */
    for (int g = 0; g < 32; g++) {
        const uint16_t v = rdu16(b + 2 + 2 * g);
        put_signed8(ub_iq2xs_grid[v & 511], ub_iq_ksigns[v >> 9], q + 8 * g);
    }
    for (int s = 0; s < 16; s++) sc[s] = 2 * ((b[66 + s / 2] >> (4 * (s % 2))) & 15) + 1;
}
static void dec_iq2_s(const uint8_t *b, int8_t *q, int *sc) { /* 82: d, qs[32], signs[32], qh[8], scales[8] */
    for (int g = 0; g < 32; g++) {
        const int id = b[2 + g] | (((b[66 + g / 4] >> (2 * (g % 4))) & 3) << 8);
        put_signed8(ub_iq2s_grid[id], b[34 + g], q + 8 * g);
    }
    for (int s = 0; s < 16; s++) sc[s] = 2 * ((b[74 + s / 2] >> (4 * (s % 2))) & 15) + 1;
}
static void dec_iq3_xxs(const uint8_t *b, int8_t *q, int *sc) { /* 98: d, qs[64], 8 x u32 signs+scale */
    for (int s = 0; s < 8; s++) {
        const uint32_t aux = rdu32(b + 66 + 4 * s);
        sc[s] = 2 * (int)(aux >> 28) + 1;
        for (int l = 0; l < 4; l++) {
            const uint64_t v = (uint64_t)ub_iq3xxs_grid[b[2 + 8 * s + 2 * l]] |
                               ((uint64_t)ub_iq3xxs_grid[b[2 + 8 * s + 2 * l + 1]] << 32);
            put_signed8(v, ub_iq_ksigns[(aux >> (7 * l)) & 127], q + 32 * s + 8 * l);
        }
    }
}
static void dec_iq3_s(const uint8_t *b, int8_t *q, int *sc) { /* 110: d, qs[64], qh[8], signs[32], scales[4] */
    for (int g = 0; g < 32; g++) {
        const int i0 = 2 * g, i1 = 2 * g + 1;
        const int id0 = b[2 + i0] | (((b[66 + i0 / 8] >> (i0 % 8)) & 1) << 8);
        const int id1 = b[2 + i1] | (((b[66 + i1 / 8] >> (i1 % 8)) & 1) << 8);
        put_signed8((uint64_t)ub_iq3s_grid[id0] | ((uint64_t)ub_iq3s_grid[id1] << 32), b[74 + g], q + 8 * g);
    }
    for (int s = 0; s < 8; s++) sc[s] = 2 * ((b[106 + s / 2] >> (4 * (s % 2))) & 15) + 1;
}
/* 8 IQ1 grid values g (-1..1) -> 8 g + dl (dl = +1 or -1: the +-1/8 delta, times 8) */
static inline void put_iq1(uint64_t v, int dl, int8_t *q) {
    for (int j = 0; j < 8; j++) q[j] = (int8_t)(8 * (int8_t)((v >> (8 * j)) & 0xFF) + dl);
}
static void dec_iq1_s(const uint8_t *b, int8_t *q, int *sc) { /* 50: d, qs[32], u16 qh[8] */
    for (int s = 0; s < 8; s++) {
        const uint16_t h = rdu16(b + 34 + 2 * s);
        sc[s] = 2 * ((h >> 12) & 7) + 1;
        const int dl = h & 0x8000 ? -1 : 1;
        for (int l = 0; l < 4; l++) put_iq1(ub_iq1s_grid[b[2 + 4 * s + l] | (((h >> (3 * l)) & 7) << 8)], dl, q + 32 * s + 8 * l);
    }
}
static float iq1_m_d(const uint8_t *b) { /* the f16 scale from the top nibbles of the four scale words */
    const uint16_t s0 = rdu16(b + 48), s1 = rdu16(b + 50), s2 = rdu16(b + 52), s3 = rdu16(b + 54);
    return ub_h2f((uint16_t)((s0 >> 12) | ((s1 >> 8) & 0x00F0) | ((s2 >> 4) & 0x0F00) | (s3 & 0xF000)));
}
static void dec_iq1_m(const uint8_t *b, int8_t *q, int *sc) { /* 56: qs[32], qh[16], u16 scales[4] */
    for (int g = 0; g < 32; g++) {
        const int h = (b[32 + g / 2] >> (4 * (g % 2))) & 15;
        put_iq1(ub_iq1s_grid[b[g] | ((h & 7) << 8)], h & 8 ? -1 : 1, q + 8 * g);
    }
    for (int s = 0; s < 16; s++) sc[s] = 2 * ((rdu16(b + 48 + 2 * (s / 4)) >> (3 * (s % 4))) & 7) + 1;
}
static void dec_tq1_0(const uint8_t *b, int8_t *q) { /* 54: qs[48], qh[4], d at 52; base-3 digits */
    static const uint8_t pw[5] = {1, 3, 9, 27, 81};
    for (int k = 0; k < 5; k++) {
        for (int j = 0; j < 32; j++) q[32 * k + j] = (int8_t)((((uint8_t)(b[j] * pw[k])) * 3 >> 8) - 1);
        for (int j = 0; j < 16; j++) q[160 + 16 * k + j] = (int8_t)((((uint8_t)(b[32 + j] * pw[k])) * 3 >> 8) - 1);
    }
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 4; j++) q[240 + 4 * k + j] = (int8_t)((((uint8_t)(b[48 + j] * pw[k])) * 3 >> 8) - 1);
}
static void dec_tq2_0(const uint8_t *b, int8_t *q) { /* 66: qs[64], d at 64 */
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 32; j++) q[128 * h + 32 * k + j] = (int8_t)(((b[32 * h + j] >> (2 * k)) & 3) - 1);
}

/* ---- dequantisers (gguf.quants' float32 operations, in its order) ---- */

static void deq_iq4_nl(const uint8_t *b, float *y) {
    int8_t q[32];
    dec_iq4_nl(b, q);
    const float d = rd16(b);
    for (int j = 0; j < 32; j++) y[j] = d * (float)q[j];
}
static void deq_mxfp4(const uint8_t *b, float *y) {
    int8_t q[32];
    dec_mxfp4(b, q);
    const float d = ub_e8m0_half(b[0]);
    for (int j = 0; j < 32; j++) y[j] = d * (float)q[j];
}
static void deq_iq4_xs(const uint8_t *b, float *y) {
    int8_t q[256];
    int sc[8];
    dec_iq4_xs(b, q, sc);
    const float d = rd16(b);
    for (int s = 0; s < 8; s++) {
        const float dl = d * (float)sc[s];
        for (int j = 0; j < 32; j++) y[32 * s + j] = dl * (float)q[32 * s + j];
    }
}
/* IQ2 / IQ3_XXS: db = d * (0.5 + s) * f (f = 0.25 / 0.5), value = (db * grid) * sign, q = +-grid, sc = 2 s + 1 */
static void deq_grid_half(const int8_t *q, const int *sc, int nsub, float d, float f, float *y) {
    const int sub = 256 / nsub;
    for (int s = 0; s < nsub; s++) {
        const float db = d * (0.5f + (float)((sc[s] - 1) / 2)) * f;
        for (int j = 0; j < sub; j++) {
            const int v = q[s * sub + j];
            const float g = db * (float)(v < 0 ? -v : v);
            y[s * sub + j] = v < 0 ? -g : g;
        }
    }
}
static void deq_iq2_xxs(const uint8_t *b, float *y) {
    int8_t q[256];
    int sc[8];
    dec_iq2_xxs(b, q, sc);
    deq_grid_half(q, sc, 8, rd16(b), 0.25f, y);
}
static void deq_iq2_xs(const uint8_t *b, float *y) {
    int8_t q[256];
    int sc[16];
    dec_iq2_xs(b, q, sc);
    deq_grid_half(q, sc, 16, rd16(b), 0.25f, y);
}
static void deq_iq2_s(const uint8_t *b, float *y) {
    int8_t q[256];
    int sc[16];
    dec_iq2_s(b, q, sc);
    deq_grid_half(q, sc, 16, rd16(b), 0.25f, y);
}
static void deq_iq3_xxs(const uint8_t *b, float *y) {
    int8_t q[256];
    int sc[8];
    dec_iq3_xxs(b, q, sc);
    deq_grid_half(q, sc, 8, rd16(b), 0.5f, y);
}
static void deq_iq3_s(const uint8_t *b, float *y) { /* db = d * (1 + 2 s), value = (db * grid) * sign */
    int8_t q[256];
    int sc[8];
    dec_iq3_s(b, q, sc);
    const float d = rd16(b);
    for (int s = 0; s < 8; s++) {
        const float db = d * (float)sc[s];
        for (int j = 0; j < 32; j++) {
            const int v = q[32 * s + j];
            const float g = db * (float)(v < 0 ? -v : v);
            y[32 * s + j] = v < 0 ? -g : g;
        }
    }
}
/* IQ1: dl = d * (2 s + 1), value = dl * (grid + delta); q = 8 grid + 8 delta */
static void deq_iq1(const int8_t *q, const int *sc, int nsub, float d, float *y) {
    const int sub = 256 / nsub;
    for (int s = 0; s < nsub; s++) {
        const float dl = d * (float)sc[s];
        for (int j = 0; j < sub; j++) y[s * sub + j] = dl * ((float)q[s * sub + j] * 0.125f);
    }
}
static void deq_iq1_s(const uint8_t *b, float *y) {
    int8_t q[256];
    int sc[8];
    dec_iq1_s(b, q, sc);
    deq_iq1(q, sc, 8, rd16(b), y);
}
static void deq_iq1_m(const uint8_t *b, float *y) {
    int8_t q[256];
    int sc[16];
    dec_iq1_m(b, q, sc);
    deq_iq1(q, sc, 16, iq1_m_d(b), y);
}
static void deq_tq1_0(const uint8_t *b, float *y) {
    int8_t q[256];
    dec_tq1_0(b, q);
    const float d = rd16(b + 52);
    for (int j = 0; j < 256; j++) y[j] = d * (float)q[j];
}
static void deq_tq2_0(const uint8_t *b, float *y) {
    int8_t q[256];
    dec_tq2_0(b, q);
    const float d = rd16(b + 64);
    for (int j = 0; j < 256; j++) y[j] = d * (float)q[j];
}

/* ---- dot kernels (contract: mm_internal.h) ---- */

#define ACT(T, r, ib) ((const T *)(a + (r) * as) + (ib))

/* 32-element blocks against Q8_0: acc += (d_w * d_x) * (q . x) */
#define DOT32(NAME, BYTES, DECODE, DW)                                                                     \
    static void NAME(int64_t nb, const uint8_t *w, const uint8_t *a, int64_t as, int nr, float *y,          \
                     int64_t ys) {                                                                         \
        float acc[UB_MM_RT] = {0};                                                                         \
        int8_t q[32];                                                                                      \
        for (int64_t ib = 0; ib < nb; ib++) {                                                              \
            const uint8_t *b = w + ib * (BYTES);                                                           \
            DECODE(b, q);                                                                                  \
            const float dw = DW;                                                                           \
            for (int r = 0; r < nr; r++) {                                                                 \
                const ub_act_q8_0 *x = ACT(ub_act_q8_0, r, ib);                                            \
                acc[r] += (dw * x->d) * (float)idot(q, x->qs, 32);                                         \
            }                                                                                              \
        }                                                                                                  \
        for (int r = 0; r < nr; r++) y[r * ys] = acc[r];                                                   \
    }
DOT32(dot_iq4_nl, 18, dec_iq4_nl, rd16(b))
DOT32(dot_mxfp4, 17, dec_mxfp4, ub_e8m0_half(b[0]))

/* 256-element blocks against Q8_K: isum = sum_s sc[s] * (q . x over sub-block s); acc += (d_w * d_x) * isum;
 * y = FIN * acc. NSUB = 0: no sub-block multipliers (sc = 1). */
#define DOT256(NAME, BYTES, NSUB, DECODE, DW, FIN)                                                         \
    static void NAME(int64_t nb, const uint8_t *w, const uint8_t *a, int64_t as, int nr, float *y,          \
                     int64_t ys) {                                                                         \
        float acc[UB_MM_RT] = {0};                                                                         \
        int8_t q[256];                                                                                     \
        int sc[(NSUB) ? (NSUB) : 1];                                                                       \
        for (int64_t ib = 0; ib < nb; ib++) {                                                              \
            const uint8_t *b = w + ib * (BYTES);                                                           \
            DECODE;                                                                                        \
            const float dw = DW;                                                                           \
            for (int r = 0; r < nr; r++) {                                                                 \
                const ub_act_q8_k *x = ACT(ub_act_q8_k, r, ib);                                            \
                int32_t isum = 0;                                                                          \
                if (NSUB) {                                                                                \
                    const int sub = 256 / ((NSUB) ? (NSUB) : 1);                                           \
                    for (int s = 0; s < (NSUB); s++) isum += sc[s] * idot(q + s * sub, x->qs + s * sub, sub); \
                } else {                                                                                   \
                    isum = idot(q, x->qs, 256);                                                            \
                }                                                                                          \
                acc[r] += (dw * x->d) * (float)isum;                                                       \
            }                                                                                              \
        }                                                                                                  \
        for (int r = 0; r < nr; r++) y[r * ys] = (FIN) * acc[r];                                           \
    }
/* IQ4_XS in the 8-lane order of the AVX2 kernel (mm_iq_avx2.c body_iq4_xs) and of ggml-cpu's x86 vec_dot
 * (llama.cpp's bits): per superblock lane j (0..7) is the exact int32 sum over the sub-blocks s of
 * sc[s] * (elements 32 s + 4 j .. 32 s + 4 j + 3 of q . x), lane accumulator j = fmaf(d_w * d_x, lane j, acc j),
 * superblocks in order, y = ub_hsum8(acc). w: nb blocks of 136 bytes; a: nr Q8_K rows (stride as); y[r * ys]. */
static void dot_iq4_xs(int64_t nb, const uint8_t *w, const uint8_t *a, int64_t as, int nr, float *y, int64_t ys) {
    float acc[UB_MM_RT][8];
    memset(acc, 0, sizeof acc);
    int8_t q[256];
    int sc[8];
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = w + ib * 136;
        dec_iq4_xs(b, q, sc);
        const float dw = rd16(b);
        for (int r = 0; r < nr; r++) {
            const ub_act_q8_k *x = ACT(ub_act_q8_k, r, ib);
            const float d = dw * x->d;
            for (int j = 0; j < 8; j++) {
                int32_t lane = 0;
                for (int s = 0; s < 8; s++) lane += sc[s] * idot(q + 32 * s + 4 * j, x->qs + 32 * s + 4 * j, 4);
                acc[r][j] = fmaf(d, (float)lane, acc[r][j]);
            }
        }
    }
    for (int r = 0; r < nr; r++) y[r * ys] = ub_hsum8(acc[r]);
}
DOT256(dot_iq3_s, 110, 8, dec_iq3_s(b, q, sc), rd16(b), 1.0f)
DOT256(dot_iq3_xxs, 98, 8, dec_iq3_xxs(b, q, sc), rd16(b), 0.25f)
DOT256(dot_iq2_xxs, 66, 8, dec_iq2_xxs(b, q, sc), rd16(b), 0.125f)
DOT256(dot_iq2_xs, 74, 16, dec_iq2_xs(b, q, sc), rd16(b), 0.125f)
DOT256(dot_iq2_s, 82, 16, dec_iq2_s(b, q, sc), rd16(b), 0.125f)
DOT256(dot_iq1_s, 50, 8, dec_iq1_s(b, q, sc), rd16(b), 0.125f)
DOT256(dot_iq1_m, 56, 16, dec_iq1_m(b, q, sc), iq1_m_d(b), 0.125f)
DOT256(dot_tq1_0, 54, 0, dec_tq1_0(b, q), rd16(b + 52), 1.0f)
DOT256(dot_tq2_0, 66, 0, dec_tq2_0(b, q), rd16(b + 64), 1.0f)

/* the last field: 1 = needs the tables ub_mm_set_iq_tables sets */
static const ub_mm_type g_iq_types[] = {
    {UB_T_IQ4_NL, 32, 18, UB_ACT_Q8_0, dot_iq4_nl, deq_iq4_nl, 1},
    {UB_T_IQ4_XS, 256, 136, UB_ACT_Q8_K, dot_iq4_xs, deq_iq4_xs, 1},
    {UB_T_IQ3_S, 256, 110, UB_ACT_Q8_K, dot_iq3_s, deq_iq3_s, 1},
    {UB_T_IQ3_XXS, 256, 98, UB_ACT_Q8_K, dot_iq3_xxs, deq_iq3_xxs, 1},
    {UB_T_IQ2_S, 256, 82, UB_ACT_Q8_K, dot_iq2_s, deq_iq2_s, 1},
    {UB_T_IQ2_XS, 256, 74, UB_ACT_Q8_K, dot_iq2_xs, deq_iq2_xs, 1},
    {UB_T_IQ2_XXS, 256, 66, UB_ACT_Q8_K, dot_iq2_xxs, deq_iq2_xxs, 1},
    {UB_T_IQ1_S, 256, 50, UB_ACT_Q8_K, dot_iq1_s, deq_iq1_s, 1},
    {UB_T_IQ1_M, 256, 56, UB_ACT_Q8_K, dot_iq1_m, deq_iq1_m, 1},
    {UB_T_TQ1_0, 256, 54, UB_ACT_Q8_K, dot_tq1_0, deq_tq1_0, 0},
    {UB_T_TQ2_0, 256, 66, UB_ACT_Q8_K, dot_tq2_0, deq_tq2_0, 0},
    {UB_T_MXFP4, 32, 17, UB_ACT_Q8_0, dot_mxfp4, deq_mxfp4, 0},
};

const ub_mm_type *ub_mm_find_iq(int32_t type) {
    for (size_t i = 0; i < sizeof g_iq_types / sizeof g_iq_types[0]; i++)
        if (g_iq_types[i].type == type) return &g_iq_types[i];
    return ub_mm_find_fp4_bits(type);
}
