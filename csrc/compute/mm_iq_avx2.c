/* AVX2 + FMA + F16C dot kernels of the i-quant and ternary types against Q8_K activations (IQ4_NL and MXFP4,
 * against Q8_0, are kinds of mm_avx2.c's 32-element kernel). Contracts: mm_internal.h; the integer forms of
 * the types: mm_iq_generic.c. Chosen at run time (matmul.c); without AVX2 support in the compiler nothing
 * is compiled in and the generic kernels run.
 *
 * Per superblock of 256 and activation row: 8 int32 lanes, lane i the exact sum over the sub-blocks of
 * sc[s] * (the 4 products of elements 32 c + 4 i .. 4 i + 3 of each 32-element chunk c of sub-block s) —
 * maddubs pairs (|w| <= 127 against |x| <= 127: below 2^15) and a madd by the scale; then one FMA of the
 * f32 product d_w * d_x into the row's 8-lane accumulator, superblocks in order, a fixed horizontal sum,
 * times the type's exact power of two. Every row's operations are the same whatever nr is. */
#include "mm_internal.h"
#include "mm_iq.h"
#include "ub_matmul.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
#include "mm_avx2_util.h"

/* signed w . signed x (|w| = wa), 32 bytes -> 16 int16 pair sums (exact: |w|, |x| <= 127) */
INL AVX2 __m256i pairs_s8(__m256i w, __m256i wa, __m256i x) { return _mm256_maddubs_epi16(wa, _mm256_sign_epi8(x, w)); }

/* ---- IQ4_XS: 8 sub-blocks of 32, q = IQ4_NL value of the nibble, sc = 6-bit scale - 32 ---- */
INL AVX2 void body_iq4_xs(int64_t nb, const uint8_t *w, const uint8_t *a, int64_t as, const int nr, float *y,
                          int64_t ys) {
    __m256 acc[UB_MM_RT];
    UNR for (int r = 0; r < nr; r++) acc[r] = _mm256_setzero_ps();
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)ub_iq4nl_kv));
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = w + ib * 136;
        uint16_t sh;
        memcpy(&sh, b + 2, 2);
        __m256i sumi[UB_MM_RT];
        UNR for (int r = 0; r < nr; r++) sumi[r] = _mm256_setzero_si256();
        for (int p = 0; p < 4; p++) { /* sub-blocks 2p, 2p + 1: bytes 32p .. 32p + 31 of qs, 16 each */
            const __m256i raw = ld(b + 8 + 32 * p);
            const __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
            /* sub-block 2p: low nibbles of its 16 bytes (elements 0..15), then high (16..31); likewise 2p + 1 */
            const __m256i q0 = _mm256_shuffle_epi8(kv, _mm256_permute2x128_si256(lo, hi, 0x20));
            const __m256i q1 = _mm256_shuffle_epi8(kv, _mm256_permute2x128_si256(lo, hi, 0x31));
            const __m256i qa0 = _mm256_sign_epi8(q0, q0), qa1 = _mm256_sign_epi8(q1, q1);
            const int l0 = (b[4 + p] & 15) | (((sh >> (4 * p)) & 3) << 4);
            const int l1 = (b[4 + p] >> 4) | (((sh >> (4 * p + 2)) & 3) << 4);
            const __m256i sc0 = _mm256_set1_epi16((short)(l0 - 32)), sc1 = _mm256_set1_epi16((short)(l1 - 32));
            UNR for (int r = 0; r < nr; r++) {
                const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
                sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(pairs_s8(q0, qa0, ld(x->qs + 64 * p)), sc0));
                sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(pairs_s8(q1, qa1, ld(x->qs + 64 * p + 32)), sc1));
            }
        }
        const float dw = h2f(b);
        UNR for (int r = 0; r < nr; r++) {
            const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * x->d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
        }
    }
    UNR for (int r = 0; r < nr; r++) y[r * ys] = hsum(acc[r]);
}
DISPATCH(dot_iq4_xs, body_iq4_xs)

/* ---- the grid and ternary types: each 32-element chunk c of a superblock as (wq: unsigned magnitudes,
 * sv: a byte whose sign is the weight's, sc: the chunk's int16 multipliers, one per 128-bit half), so that
 * maddubs(wq, sign(x, sv)) pairs w * x exactly; the weight's value is q = sign(sv) * wq ---- */

/* 32 bytes: 0xFF (-1) where bit j of h is set, else 1 */
INL AVX2 __m256i sign_bytes(uint32_t h) {
    const __m256i sel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i m = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)h), sel), bit), bit);
    return _mm256_or_si256(m, _mm256_set1_epi8(1));
}
INL uint16_t u16at(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
INL uint32_t u32at(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
INL AVX2 __m256i sc2(int lo, int hi) { return _mm256_set_m128i(_mm_set1_epi16((short)hi), _mm_set1_epi16((short)lo)); }
/* the four 7-bit sign indices of an IQ2_XXS / IQ3_XXS word -> 32 sign bits */
INL uint32_t ksign32(uint32_t aux) {
    return (uint32_t)ub_iq_ksigns[aux & 127] | ((uint32_t)ub_iq_ksigns[(aux >> 7) & 127] << 8) |
           ((uint32_t)ub_iq_ksigns[(aux >> 14) & 127] << 16) | ((uint32_t)ub_iq_ksigns[(aux >> 21) & 127] << 24);
}

INL AVX2 void ch_iq2_xxs(const uint8_t *b, int c, __m256i *wq, __m256i *sv, __m256i *sc) {
    const uint8_t *g = b + 2 + 8 * c;
    const uint32_t aux = u32at(g + 4);
    *wq = _mm256_set_epi64x((long long)ub_iq2xxs_grid[g[3]], (long long)ub_iq2xxs_grid[g[2]],
                            (long long)ub_iq2xxs_grid[g[1]], (long long)ub_iq2xxs_grid[g[0]]);
    *sv = sign_bytes(ksign32(aux));
    *sc = _mm256_set1_epi16((short)(2 * (aux >> 28) + 1));
}
INL AVX2 void ch_iq2_xs(const uint8_t *b, int c, __m256i *wq, __m256i *sv, __m256i *sc) {
    uint16_t v[4];
    memcpy(v, b + 2 + 8 * c, 8);
    *wq = _mm256_set_epi64x((long long)ub_iq2xs_grid[v[3] & 511], (long long)ub_iq2xs_grid[v[2] & 511],
                            (long long)ub_iq2xs_grid[v[1] & 511], (long long)ub_iq2xs_grid[v[0] & 511]);
    *sv = sign_bytes((uint32_t)ub_iq_ksigns[v[0] >> 9] | ((uint32_t)ub_iq_ksigns[v[1] >> 9] << 8) |
                     ((uint32_t)ub_iq_ksigns[v[2] >> 9] << 16) | ((uint32_t)ub_iq_ksigns[v[3] >> 9] << 24));
    *sc = sc2(2 * (b[66 + c] & 15) + 1, 2 * (b[66 + c] >> 4) + 1);
}
INL AVX2 void ch_iq2_s(const uint8_t *b, int c, __m256i *wq, __m256i *sv, __m256i *sc) {
    const uint8_t *qs = b + 2 + 4 * c;
    const int h = b[66 + c];
    *wq = _mm256_set_epi64x((long long)ub_iq2s_grid[qs[3] | ((h >> 6) & 3) << 8], (long long)ub_iq2s_grid[qs[2] | ((h >> 4) & 3) << 8],
                            (long long)ub_iq2s_grid[qs[1] | ((h >> 2) & 3) << 8], (long long)ub_iq2s_grid[qs[0] | (h & 3) << 8]);
    *sv = sign_bytes(u32at(b + 34 + 4 * c));
    *sc = sc2(2 * (b[74 + c] & 15) + 1, 2 * (b[74 + c] >> 4) + 1);
}
INL AVX2 void ch_iq3_xxs(const uint8_t *b, int c, __m256i *wq, __m256i *sv, __m256i *sc) {
    const uint8_t *g = b + 2 + 8 * c;
    const uint32_t aux = u32at(b + 66 + 4 * c);
    *wq = _mm256_set_epi32((int)ub_iq3xxs_grid[g[7]], (int)ub_iq3xxs_grid[g[6]], (int)ub_iq3xxs_grid[g[5]],
                           (int)ub_iq3xxs_grid[g[4]], (int)ub_iq3xxs_grid[g[3]], (int)ub_iq3xxs_grid[g[2]],
                           (int)ub_iq3xxs_grid[g[1]], (int)ub_iq3xxs_grid[g[0]]);
    *sv = sign_bytes(ksign32(aux));
    *sc = _mm256_set1_epi16((short)(2 * (aux >> 28) + 1));
}
INL AVX2 void ch_iq3_s(const uint8_t *b, int c, __m256i *wq, __m256i *sv, __m256i *sc) {
    const uint8_t *g = b + 2 + 8 * c;
    const int h = b[66 + c];
#define G3(k) (int)ub_iq3s_grid[g[k] | ((h >> (k)) & 1) << 8]
    *wq = _mm256_set_epi32(G3(7), G3(6), G3(5), G3(4), G3(3), G3(2), G3(1), G3(0));
#undef G3
    *sv = sign_bytes(u32at(b + 74 + 4 * c));
    *sc = _mm256_set1_epi16((short)(2 * ((b[106 + c / 2] >> (4 * (c % 2))) & 15) + 1));
}
/* IQ1: q = 8 g + dl (g in -1..1 from the grid, dl = +-1 per 32 (IQ1_S) or per 8 (IQ1_M)); wq = |q|, sv = q */
INL AVX2 __m256i iq1_q(__m256i g, __m256i dl) {
    const __m256i g2 = _mm256_add_epi8(g, g), g4 = _mm256_add_epi8(g2, g2);
    return _mm256_add_epi8(_mm256_add_epi8(g4, g4), dl);
}
INL AVX2 void ch_iq1_s(const uint8_t *b, int c, __m256i *wq, __m256i *sv, __m256i *sc) {
    const uint16_t h = u16at(b + 34 + 2 * c);
    const uint8_t *qs = b + 2 + 4 * c;
    const __m256i g = _mm256_set_epi64x((long long)ub_iq1s_grid[qs[3] | ((h >> 9) & 7) << 8], (long long)ub_iq1s_grid[qs[2] | ((h >> 6) & 7) << 8],
                                        (long long)ub_iq1s_grid[qs[1] | ((h >> 3) & 7) << 8], (long long)ub_iq1s_grid[qs[0] | (h & 7) << 8]);
    const __m256i q = iq1_q(g, _mm256_set1_epi8(h & 0x8000 ? -1 : 1));
    *wq = _mm256_abs_epi8(q);
    *sv = q;
    *sc = _mm256_set1_epi16((short)(2 * ((h >> 12) & 7) + 1));
}
INL AVX2 void ch_iq1_m(const uint8_t *b, int c, __m256i *wq, __m256i *sv, __m256i *sc) {
    const uint8_t *qs = b + 4 * c;
    const int h0 = b[32 + 2 * c], h1 = b[33 + 2 * c]; /* nibbles: groups 4c, 4c + 1 | 4c + 2, 4c + 3 */
    const __m256i g = _mm256_set_epi64x((long long)ub_iq1s_grid[qs[3] | ((h1 >> 4) & 7) << 8], (long long)ub_iq1s_grid[qs[2] | (h1 & 7) << 8],
                                        (long long)ub_iq1s_grid[qs[1] | ((h0 >> 4) & 7) << 8], (long long)ub_iq1s_grid[qs[0] | (h0 & 7) << 8]);
#define DL(h) (long long)((h) & 8 ? -1LL : 0x0101010101010101LL)
    const __m256i dl = _mm256_set_epi64x(DL(h1 >> 4), DL(h1), DL(h0 >> 4), DL(h0));
#undef DL
    const __m256i q = iq1_q(g, dl);
    *wq = _mm256_abs_epi8(q);
    *sv = q;
    const uint16_t sw = u16at(b + 48 + 2 * (c / 2)); /* scales 2c, 2c + 1: 3 bits each, 4 per word */
    const int k = 2 * (c % 2);
    *sc = sc2(2 * ((sw >> (3 * k)) & 7) + 1, 2 * ((sw >> (3 * (k + 1))) & 7) + 1);
}
/* TQ2_0: chunk c = elements 128 h + 32 k .. + 31 (h = c / 4, k = c % 4): 2-bit field k of byte j, minus 1 */
INL AVX2 void ch_tq2_0(const uint8_t *b, int c, __m256i *wq, __m256i *sv, __m256i *sc) {
    const __m256i u = _mm256_and_si256(_mm256_srli_epi16(ld(b + 32 * (c / 4)), 2 * (c % 4)), _mm256_set1_epi8(3));
    const __m256i q = _mm256_sub_epi8(u, _mm256_set1_epi8(1));
    *wq = _mm256_abs_epi8(q);
    *sv = q;
    *sc = _mm256_set1_epi16(1);
}

/* the body of every type above: 8 chunks per superblock, per row sumi += madd(maddubs(wq, sign(x, sv)), sc),
 * then acc += (d_w * d_x) * sumi (one FMA), y = fin * hsum(acc). TQ1_0 decodes its base-3 digits per block
 * with the generic arithmetic first (pre: q[256] of -1..1). */
#define IQ_BODY(NAME, BYTES, CHUNK, DW, FIN)                                                                \
    INL AVX2 void NAME(int64_t nb, const uint8_t *w, const uint8_t *a, int64_t as, const int nr, float *y,    \
                       int64_t ys) {                                                                        \
        __m256 acc[UB_MM_RT];                                                                               \
        UNR for (int r = 0; r < nr; r++) acc[r] = _mm256_setzero_ps();                                      \
        for (int64_t ib = 0; ib < nb; ib++) {                                                               \
            const uint8_t *b = w + ib * (BYTES);                                                            \
            __m256i sumi[UB_MM_RT];                                                                         \
            UNR for (int r = 0; r < nr; r++) sumi[r] = _mm256_setzero_si256();                              \
            for (int c = 0; c < 8; c++) {                                                                   \
                __m256i wq, sv, sc;                                                                         \
                CHUNK(b, c, &wq, &sv, &sc);                                                                 \
                UNR for (int r = 0; r < nr; r++) {                                                          \
                    const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;                          \
                    const __m256i p = _mm256_maddubs_epi16(wq, _mm256_sign_epi8(ld(x->qs + 32 * c), sv));    \
                    sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(p, sc));                          \
                }                                                                                           \
            }                                                                                               \
            const float dw = DW;                                                                            \
            UNR for (int r = 0; r < nr; r++) {                                                              \
                const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;                              \
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * x->d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);   \
            }                                                                                               \
        }                                                                                                   \
        UNR for (int r = 0; r < nr; r++) y[r * ys] = (FIN) * hsum(acc[r]);                                  \
    }

INL AVX2 float iq1m_d(const uint8_t *b) {
    const uint16_t s0 = u16at(b + 48), s1 = u16at(b + 50), s2 = u16at(b + 52), s3 = u16at(b + 54);
    return _cvtsh_ss((uint16_t)((s0 >> 12) | ((s1 >> 8) & 0x00F0) | ((s2 >> 4) & 0x0F00) | (s3 & 0xF000)));
}

IQ_BODY(body_iq2_xxs, 66, ch_iq2_xxs, h2f(b), 0.125f)
IQ_BODY(body_iq2_xs, 74, ch_iq2_xs, h2f(b), 0.125f)
IQ_BODY(body_iq2_s, 82, ch_iq2_s, h2f(b), 0.125f)
IQ_BODY(body_iq3_xxs, 98, ch_iq3_xxs, h2f(b), 0.25f)
IQ_BODY(body_iq3_s, 110, ch_iq3_s, h2f(b), 1.0f)
IQ_BODY(body_iq1_s, 50, ch_iq1_s, h2f(b), 0.125f)
IQ_BODY(body_iq1_m, 56, ch_iq1_m, iq1m_d(b), 0.125f)
IQ_BODY(body_tq2_0, 66, ch_tq2_0, h2f(b + 64), 1.0f)

/* TQ1_0: the 256 base-3 digits decoded once per block (the generic arithmetic), the dot as above */
INL void dec_tq1(const uint8_t *b, int8_t *q) {
    static const uint8_t pw[5] = {1, 3, 9, 27, 81};
    for (int k = 0; k < 5; k++) {
        for (int j = 0; j < 32; j++) q[32 * k + j] = (int8_t)((((uint8_t)(b[j] * pw[k])) * 3 >> 8) - 1);
        for (int j = 0; j < 16; j++) q[160 + 16 * k + j] = (int8_t)((((uint8_t)(b[32 + j] * pw[k])) * 3 >> 8) - 1);
    }
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 4; j++) q[240 + 4 * k + j] = (int8_t)((((uint8_t)(b[48 + j] * pw[k])) * 3 >> 8) - 1);
}
INL AVX2 void body_tq1_0(int64_t nb, const uint8_t *w, const uint8_t *a, int64_t as, const int nr, float *y,
                         int64_t ys) {
    __m256 acc[UB_MM_RT];
    UNR for (int r = 0; r < nr; r++) acc[r] = _mm256_setzero_ps();
    const __m256i one = _mm256_set1_epi16(1);
    int8_t q[256];
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = w + ib * 54;
        dec_tq1(b, q);
        __m256i sumi[UB_MM_RT];
        UNR for (int r = 0; r < nr; r++) sumi[r] = _mm256_setzero_si256();
        for (int c = 0; c < 8; c++) {
            const __m256i qv = ld(q + 32 * c), wq = _mm256_abs_epi8(qv);
            UNR for (int r = 0; r < nr; r++) {
                const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
                sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(_mm256_maddubs_epi16(wq, _mm256_sign_epi8(ld(x->qs + 32 * c), qv)), one));
            }
        }
        const float dw = h2f(b + 52);
        UNR for (int r = 0; r < nr; r++) {
            const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * x->d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
        }
    }
    UNR for (int r = 0; r < nr; r++) y[r * ys] = hsum(acc[r]);
}

DISPATCH(dot_iq2_xxs, body_iq2_xxs)
DISPATCH(dot_iq2_xs, body_iq2_xs)
DISPATCH(dot_iq2_s, body_iq2_s)
DISPATCH(dot_iq3_xxs, body_iq3_xxs)
DISPATCH(dot_iq3_s, body_iq3_s)
DISPATCH(dot_iq1_s, body_iq1_s)
DISPATCH(dot_iq1_m, body_iq1_m)
DISPATCH(dot_tq1_0, body_tq1_0)
DISPATCH(dot_tq2_0, body_tq2_0)

ub_mm_dot_fn ub_mm_dot_iq_avx2(int32_t type) {
    switch (type) {
    case UB_T_IQ4_XS: return dot_iq4_xs;
    case UB_T_IQ3_S: return dot_iq3_s;
    case UB_T_IQ3_XXS: return dot_iq3_xxs;
    case UB_T_IQ2_S: return dot_iq2_s;
    case UB_T_IQ2_XS: return dot_iq2_xs;
    case UB_T_IQ2_XXS: return dot_iq2_xxs;
    case UB_T_IQ1_S: return dot_iq1_s;
    case UB_T_IQ1_M: return dot_iq1_m;
    case UB_T_TQ1_0: return dot_tq1_0;
    case UB_T_TQ2_0: return dot_tq2_0;
    }
    return ub_mm_dot_fp4_avx2(type);
}
#else
ub_mm_dot_fn ub_mm_dot_iq_avx2(int32_t type) { return ub_mm_dot_fp4_avx2(type); }
#endif
