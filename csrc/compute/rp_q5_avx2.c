/* The AVX2 Q5_0 panel kernel (AVX2 + FMA + F16C; layout rp_q5_0.h; the avxvnni and avx512 back-ends fall back
 * to it only where they have none of their own). Each 32-byte half s of a 64-byte piece is rows 8s .. 8s + 7
 * (one ymm of 8 int32 lanes). Per block and half: the 8 groups of unsigned 5-bit codes e (nibbles | the
 * fifth-bit plane shifted to bit 4), and per activation row maddubs(e, x group broadcast), four groups summed
 * in int16 and widened by one madd by ones, plus -16 * sum(x) (vpsadbw): the exact int32 sums of (e - 16) * x
 * of 8 rows (products <= 31 * 128, pairs <= 7936, four pairs <= 31744: no saturation, no overflow). Then the
 * float step of rp_q5_0.h (acc + (d_w * d_x) * isum, no fma), so these give the AVX-512 and the plain C
 * kernels' bits. All nr rows (1..6) in one pass, the halves one after the other (q5y_body). */
#include "rp_q5_0.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
#include <immintrin.h>
#include <string.h>

#define Q5_TGT "avx2,fma,f16c"
#define Q5_INL static inline __attribute__((always_inline, target(Q5_TGT)))
#define Q5_UNR _Pragma("GCC unroll 8")

Q5_INL __m256i q5y_bc32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* -16 * sum(x[0..31]) (exact); x: 32 int8 (read only). vpsadbw of x ^ 0x80 against 0: the sums of x + 128 */
Q5_INL int32_t q5y_corr(const int8_t *x) {
    const __m256i xv = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)x), _mm256_set1_epi8((char)0x80));
    const __m256i s4 = _mm256_sad_epu8(xv, _mm256_setzero_si256());
    __m128i s = _mm_add_epi64(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
    s = _mm_add_epi64(s, _mm_unpackhi_epi64(s, s));
    return -16 * (_mm_cvtsi128_si32(s) - 32 * 128);
}

/* the fifth bits of group g (0x10 or 0) from the plane half hp */
Q5_INL __m256i q5y_hi(__m256i hp, const int g) {
    const __m256i b4 = _mm256_set1_epi8(0x10);
    if (g < 4) return _mm256_and_si256(_mm256_slli_epi16(hp, 4 - g), b4);
    if (g == 4) return _mm256_and_si256(hp, b4);
    return _mm256_and_si256(_mm256_srli_epi16(hp, g - 4), b4);
}

/* e[g], g < 8: group g (elements 4g .. 4g + 3 of rows 8s .. 8s + 7, codes e in [0, 31]) of block column b
 * (read only) */
Q5_INL void q5y_codes(const uint8_t *b, const int s, __m256i e[8]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i hp = _mm256_loadu_si256((const __m256i *)(b + RP_Q5_H + 32 * s));
    Q5_UNR for (int h = 0; h < 4; h++) {
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32 * s));
        e[2 * h] = _mm256_or_si256(_mm256_and_si256(raw, m4), q5y_hi(hp, 2 * h));
        e[2 * h + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), m4), q5y_hi(hp, 2 * h + 1));
    }
}

/* the exact int32 sums of (e - 16) * x of the 8 rows (corr = -16 * sum(x)): 4 maddubs summed in int16 (each
 * <= 7936 in magnitude, four <= 31744: exact) and one madd by ones per 4 groups */
Q5_INL __m256i q5y_isum(const __m256i e[8], const ub_act_q8_0 *x, int32_t corr) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i isum = _mm256_set1_epi32(corr);
    Q5_UNR for (int q = 0; q < 2; q++) { /* groups 4q .. 4q + 3 in int16 */
        __m256i t = _mm256_maddubs_epi16(e[4 * q], q5y_bc32(x->qs + 16 * q));
        Q5_UNR for (int g = 1; g < 4; g++)
            t = _mm256_add_epi16(t, _mm256_maddubs_epi16(e[4 * q + g], q5y_bc32(x->qs + 16 * q + 4 * g)));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(t, ones));
    }
    return isum;
}

/* y[r * ys + c], c < 16, r < NR: panel p (nb block columns of 352 bytes, read only) . Q8_0 rows a + r * as.
 * K is taken in chunks of Q5_CH blocks: first each (block, row)'s -16 * sum(x) into a small stack table, then
 * the half s = 0 (panel rows 0..7) over the chunk's blocks, then s = 1; the partial accumulators wait in y
 * between chunks (stored and reloaded unchanged). Per block and half the 8 groups of codes (8 registers) serve
 * the rows one after the other: 4 maddubs summed in int16 (each <= 7936 in magnitude, four <= 31744: exact)
 * and one madd by ones per 4 groups, so 10 maddubs / madd per half and row instead of 16. */
#define Q5_CH 64
Q5_INL void q5y_body(int64_t nb, const uint8_t *p, const uint8_t *a, int64_t as, const int NR, float *y,
                     int64_t ys) {
    int32_t corr[Q5_CH][UB_MM_RT];
    for (int64_t i0 = 0; i0 < nb; i0 += Q5_CH) {
        const int n = nb - i0 < Q5_CH ? (int)(nb - i0) : Q5_CH;
        for (int i = 0; i < n; i++)
            Q5_UNR for (int r = 0; r < NR; r++)
                corr[i][r] = q5y_corr(((const ub_act_q8_0 *)(a + r * as) + i0 + i)->qs);
#pragma GCC unroll 1
        for (int s = 0; s < 2; s++) { /* rows 8s .. 8s + 7 */
            __m256 acc[UB_MM_RT];
            Q5_UNR for (int r = 0; r < NR; r++) acc[r] = i0 ? _mm256_loadu_ps(y + r * ys + 8 * s) : _mm256_setzero_ps();
            for (int i = 0; i < n; i++) {
                const uint8_t *b = p + (i0 + i) * RP_Q5_BB;
                const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + RP_Q5_D + 16 * s)));
                __m256i e[8];
                q5y_codes(b, s, e);
                Q5_UNR for (int r = 0; r < NR; r++) {
                    const ub_act_q8_0 *x = (const ub_act_q8_0 *)(a + r * as) + i0 + i;
                    const __m256i isum = q5y_isum(e, x, corr[i][r]);
                    acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_mul_ps(dw, _mm256_set1_ps(x->d)), _mm256_cvtepi32_ps(isum)));
                }
            }
            Q5_UNR for (int r = 0; r < NR; r++) _mm256_storeu_ps(y + r * ys + 8 * s, acc[r]);
        }
    }
}

/* rows 8s .. 8s + 7 of block column b (read only) . Q8_0 block x: the exact int32 sums of (e - 16) * x */
Q5_INL __m256i q5y_isum1(const uint8_t *b, const int s, const ub_act_q8_0 *x, int32_t corr) {
    __m256i e[8];
    q5y_codes(b, s, e);
    return q5y_isum(e, x, corr);
}

/* y[c], c < 16: panel p (nb block columns, read only) . one Q8_0 row a, for B = 1: the bodies' operations per
 * element, block columns in order with both halves each (the panel streams once; the bodies' two passes per
 * chunk of K were 15 % slower on a DRAM-resident weight) */
#define Q5_PF 6 /* 2.1 KB; 40 DRAM-resident 4864 x 896 matrices, 1 thread, Zen 3: none 14.1, 3 15.5, 4 17.5, 6 18.2 GB/s */
Q5_INL void q5y_row1(int64_t nb, const uint8_t *p, const uint8_t *a, float *y) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = p + ib * RP_Q5_BB;
        /* one row streams the panels from memory: the block column Q5_PF ahead (past the panel's end the next
         * panel's start; a prefetch never faults) */
        for (int l = 0; l < RP_Q5_BB; l += 64) _mm_prefetch((const char *)(b + Q5_PF * RP_Q5_BB + l), _MM_HINT_T0);
        const ub_act_q8_0 *x = (const ub_act_q8_0 *)a + ib;
        const int32_t corr = q5y_corr(x->qs);
        const __m256 dx = _mm256_set1_ps(x->d);
        const __m256 dw0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + RP_Q5_D)));
        const __m256 dw1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + RP_Q5_D + 16)));
        acc0 = _mm256_add_ps(acc0, _mm256_mul_ps(_mm256_mul_ps(dw0, dx), _mm256_cvtepi32_ps(q5y_isum1(b, 0, x, corr))));
        acc1 = _mm256_add_ps(acc1, _mm256_mul_ps(_mm256_mul_ps(dw1, dx), _mm256_cvtepi32_ps(q5y_isum1(b, 1, x, corr))));
    }
    _mm256_storeu_ps(y, acc0);
    _mm256_storeu_ps(y + 8, acc1);
}

/* rp_internal.h's panel kernel contract: q5y_row1 for one row, one body per row count for 2..6 */
static __attribute__((target(Q5_TGT))) void rp_panel_q5_0_avx2(int64_t nb, const uint8_t *p, const uint8_t *a,
                                                               int64_t as, int nr, float *y, int64_t ys) {
    switch (nr) {
    case 1: q5y_row1(nb, p, a, y); break;
    case 2: q5y_body(nb, p, a, as, 2, y, ys); break;
    case 3: q5y_body(nb, p, a, as, 3, y, ys); break;
    case 4: q5y_body(nb, p, a, as, 4, y, ys); break;
    case 5: q5y_body(nb, p, a, as, 5, y, ys); break;
    default: q5y_body(nb, p, a, as, 6, y, ys); break;
    }
}

ub_rp_panel_fn ub_rp_q5_avx2(int32_t type) { return type == UB_T_Q5_0 ? rp_panel_q5_0_avx2 : 0; }
#else
ub_rp_panel_fn ub_rp_q5_avx2(int32_t type) {
    (void)type;
    return 0;
}
#endif
