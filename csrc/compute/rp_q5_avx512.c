/* The AVX-512 Q5_0 panel kernel (F/BW/VL + AVX512_VNNI; layout rp_q5_0.h): the 16 rows of a panel in the 16
 * int32 lanes of a zmm. Per block: 8 zmm of the unsigned 5-bit codes e (group g = elements 4g..4g+3 of every
 * row: the nibbles masked or shifted, | the fifth-bit plane shifted to bit 4), and 8 vpdpbusd against the
 * activation's 4-byte groups broadcast, started from -16 * sum(x): the 16 rows' exact int32 sums of
 * (e - 16) * x. Then the float step of rp_q5_0.h (acc + (d_w * d_x) * isum: no fma) on 16 lanes. Every row's
 * operations are the same for any nr (1..6 rows, one body), so any tile, thread split and back-end give the
 * same bits. Decode-sized calls (nr <= 3, the panel from DRAM) prefetch 2 block columns ahead. Calls of 4..6
 * rows (batched decode, prefill) take the -16 * sum(x) starts of a run of up to Q5_CB blocks first, eight blocks
 * per reduction tree (q5_corr8) instead of one shuffle chain per (row, block): the same exact int32 values, so
 * the same bits. Chosen at run time via rp_avx512.c's lookup. */
#include "rp_q5_0.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
#include <immintrin.h>
#include <string.h>

#define Q5_TGT "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
#define Q5_INL static inline __attribute__((always_inline, target(Q5_TGT)))
#define Q5_UNR _Pragma("GCC unroll 8")

Q5_INL __m512i q5_bc32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* -16 * sum(x[0..31]) in every lane of a zmm (exact); x: 32 int8 (read only) */
Q5_INL __m512i q5_corr(const int8_t *x) {
    __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(16), _mm256_loadu_si256((const __m256i *)x));
    s = _mm256_add_epi32(s, _mm256_permute2x128_si256(s, s, 1));
    s = _mm256_add_epi32(s, _mm256_shuffle_epi32(s, 0x4E));
    s = _mm256_add_epi32(s, _mm256_shuffle_epi32(s, 0xB1));
    return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_broadcastd_epi32(_mm256_castsi256_si128(s)));
}

/* the fifth bits of group g (0x10 or 0) from the plane hp */
Q5_INL __m512i q5_hi(__m512i hp, const int g) {
    const __m512i b4 = _mm512_set1_epi8(0x10);
    if (g < 4) return _mm512_and_si512(_mm512_slli_epi16(hp, 4 - g), b4);
    if (g == 4) return _mm512_and_si512(hp, b4);
    return _mm512_and_si512(_mm512_srli_epi16(hp, g - 4), b4);
}

/* u[g]: the 16 rows' unsigned 5-bit codes of group g (elements 4g..4g+3) of block column b (read only) */
Q5_INL void q5_codes(const uint8_t *b, __m512i *u) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), hp = _mm512_loadu_si512((const void *)(b + RP_Q5_H));
    Q5_UNR for (int h = 0; h < 4; h++) {
        const __m512i raw = _mm512_loadu_si512((const void *)(b + 64 * h));
        u[2 * h] = _mm512_or_si512(_mm512_and_si512(raw, m4), q5_hi(hp, 2 * h));
        u[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(raw, 4), m4), q5_hi(hp, 2 * h + 1));
    }
}

/* acc + (d_w * d_x) * isum for the 16 rows of codes u and block x (read only), the int32 sums started at s0
 * (-16 * sum(x) in every lane) */
Q5_INL __m512 q5_row(__m512 acc, const __m512i *u, __m512 dw, const ub_act_q8_0 *x, __m512i s0) {
    __m512i s1 = _mm512_setzero_si512();
    Q5_UNR for (int g = 0; g < 4; g++) {
        s0 = _mm512_dpbusd_epi32(s0, u[g], q5_bc32(x->qs + 4 * g));
        s1 = _mm512_dpbusd_epi32(s1, u[g + 4], q5_bc32(x->qs + 16 + 4 * g));
    }
    const __m512 isum = _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1));
    return _mm512_add_ps(acc, _mm512_mul_ps(_mm512_mul_ps(dw, _mm512_set1_ps(x->d)), isum));
}

/* y[r * ys + c], c < 16, r < nr: panel p (nb block columns of 352 bytes, read only) . Q8_0 rows a + r * as */
Q5_INL void q5_body(int64_t nb, const uint8_t *p, const uint8_t *a, int64_t as, const int nr, float *y, int64_t ys) {
    __m512 acc[UB_MM_RT];
    Q5_UNR for (int r = 0; r < nr; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = p + ib * RP_Q5_BB;
        if (nr <= 3) /* past the panel's end this is the next panel's start; a prefetch never faults */
            for (int l = 0; l < RP_Q5_BB; l += 64) _mm_prefetch((const char *)(b + 2 * RP_Q5_BB + l), _MM_HINT_T0);
        __m512i u[8];
        q5_codes(b, u);
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + RP_Q5_D)));
        Q5_UNR for (int r = 0; r < nr; r++) {
            const ub_act_q8_0 *x = (const ub_act_q8_0 *)(a + r * as) + ib;
            acc[r] = q5_row(acc[r], u, dw, x, q5_corr(x->qs));
        }
    }
    Q5_UNR for (int r = 0; r < nr; r++) _mm512_storeu_ps(y + r * ys, acc[r]);
}

#define Q5_CB 64 /* blocks whose -16 * sum(x) starts q5_body_cs takes at a time (a 1.5 KB stack table for 6 rows) */

/* cs[j] = -16 * sum(x_j) for the 8 activation blocks x_j = x0 + j (read only; exact int32): one vpdpbusd of 16s
 * per block (eight lanes of 4-byte sums), then a vphaddd tree pairing the blocks and the two 128-bit halves added */
Q5_INL void q5_corr8(const ub_act_q8_0 *x0, int32_t *cs) {
    const __m256i k16 = _mm256_set1_epi8(16), z = _mm256_setzero_si256();
    __m256i d[8];
    Q5_UNR for (int j = 0; j < 8; j++) d[j] = _mm256_dpbusd_epi32(z, k16, _mm256_loadu_si256((const __m256i *)x0[j].qs));
    const __m256i h01 = _mm256_hadd_epi32(d[0], d[1]), h23 = _mm256_hadd_epi32(d[2], d[3]);
    const __m256i h45 = _mm256_hadd_epi32(d[4], d[5]), h67 = _mm256_hadd_epi32(d[6], d[7]);
    const __m256i q0 = _mm256_hadd_epi32(h01, h23), q1 = _mm256_hadd_epi32(h45, h67); /* [b0..b3 lo | b0..b3 hi] */
    const __m128i r0 = _mm_add_epi32(_mm256_castsi256_si128(q0), _mm256_extracti128_si256(q0, 1));
    const __m128i r1 = _mm_add_epi32(_mm256_castsi256_si128(q1), _mm256_extracti128_si256(q1, 1));
    _mm_storeu_si128((__m128i *)cs, _mm_sub_epi32(_mm_setzero_si128(), r0));
    _mm_storeu_si128((__m128i *)(cs + 4), _mm_sub_epi32(_mm_setzero_si128(), r1));
}

/* q5_body's operations for nr of 4..6 rows, the correction starts tabled per run of Q5_CB blocks */
Q5_INL void q5_body_cs(int64_t nb, const uint8_t *p, const uint8_t *a, int64_t as, const int nr, float *y, int64_t ys) {
    int32_t cs[UB_MM_RT][Q5_CB];
    __m512 acc[UB_MM_RT];
    Q5_UNR for (int r = 0; r < nr; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t i0 = 0; i0 < nb; i0 += Q5_CB) {
        const int nc = nb - i0 < Q5_CB ? (int)(nb - i0) : Q5_CB;
        for (int r = 0; r < nr; r++) {
            const ub_act_q8_0 *x = (const ub_act_q8_0 *)(a + r * as) + i0;
            int j = 0;
            for (; j + 8 <= nc; j += 8) q5_corr8(x + j, cs[r] + j);
            for (; j < nc; j++) cs[r][j] = _mm_cvtsi128_si32(_mm512_castsi512_si128(q5_corr(x[j].qs)));
        }
        for (int j = 0; j < nc; j++) {
            const int64_t ib = i0 + j;
            const uint8_t *b = p + ib * RP_Q5_BB;
            __m512i u[8];
            q5_codes(b, u);
            const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + RP_Q5_D)));
            Q5_UNR for (int r = 0; r < nr; r++) {
                const ub_act_q8_0 *x = (const ub_act_q8_0 *)(a + r * as) + ib;
                acc[r] = q5_row(acc[r], u, dw, x, _mm512_set1_epi32(cs[r][j]));
            }
        }
    }
    Q5_UNR for (int r = 0; r < nr; r++) _mm512_storeu_ps(y + r * ys, acc[r]);
}

/* rp_internal.h's panel kernel contract */
static __attribute__((target(Q5_TGT))) void rp_panel_q5_0_avx512(int64_t nb, const uint8_t *p, const uint8_t *a,
                                                                 int64_t as, int nr, float *y, int64_t ys) {
    switch (nr) {
    case 1: q5_body(nb, p, a, as, 1, y, ys); break;
    case 2: q5_body(nb, p, a, as, 2, y, ys); break;
    case 3: q5_body(nb, p, a, as, 3, y, ys); break;
    case 4: q5_body_cs(nb, p, a, as, 4, y, ys); break;
    case 5: q5_body_cs(nb, p, a, as, 5, y, ys); break;
    default: q5_body_cs(nb, p, a, as, 6, y, ys); break;
    }
}

ub_rp_panel_fn ub_rp_q5_avx512(int32_t type) { return type == UB_T_Q5_0 ? rp_panel_q5_0_avx512 : 0; }
#else
ub_rp_panel_fn ub_rp_q5_avx512(int32_t type) {
    (void)type;
    return 0;
}
#endif
