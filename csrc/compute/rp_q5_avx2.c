/* The AVX2 Q5_0 panel kernel (AVX2 + FMA + F16C; layout rp_q5_0.h; the avxvnni and avx512 back-ends fall back
 * to it only where they have none of their own). Each 32-byte half s of a 64-byte piece is rows 8s .. 8s + 7
 * (one ymm of 8 int32 lanes). Per block and half: the 8 groups of unsigned 5-bit codes e (nibbles | the
 * fifth-bit plane shifted to bit 4), and per activation row maddubs(e, x group broadcast) + madd by ones,
 * summed from -16 * sum(x): the exact int32 sums of (e - 16) * x of 8 rows (products <= 31 * 128, pairs
 * <= 7936: no saturation). Then the float step of rp_q5_0.h (acc + (d_w * d_x) * isum, no fma), so these give
 * the AVX-512 and the plain C kernels' bits. Rows are taken in groups of up to 3 (16 ymm registers). */
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

/* -16 * sum(x[0..31]) in every lane (exact); x: 32 int8 (read only) */
Q5_INL __m256i q5y_corr(const int8_t *x) {
    const __m256i xv = _mm256_loadu_si256((const __m256i *)x);
    __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(16), xv), _mm256_set1_epi16(1));
    s = _mm256_add_epi32(s, _mm256_permute2x128_si256(s, s, 1));
    s = _mm256_add_epi32(s, _mm256_shuffle_epi32(s, 0x4E));
    s = _mm256_add_epi32(s, _mm256_shuffle_epi32(s, 0xB1));
    return _mm256_sub_epi32(_mm256_setzero_si256(), s);
}

/* the fifth bits of group g (0x10 or 0) from the plane half hp */
Q5_INL __m256i q5y_hi(__m256i hp, const int g) {
    const __m256i b4 = _mm256_set1_epi8(0x10);
    if (g < 4) return _mm256_and_si256(_mm256_slli_epi16(hp, 4 - g), b4);
    if (g == 4) return _mm256_and_si256(hp, b4);
    return _mm256_and_si256(_mm256_srli_epi16(hp, g - 4), b4);
}

/* y[r * ys + c], c < 16, r < g3: panel p (nb block columns of 352 bytes, read only) . Q8_0 rows a + r * as */
Q5_INL void q5y_body(int64_t nb, const uint8_t *p, const uint8_t *a, int64_t as, const int g3, float *y,
                     int64_t ys) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256 acc[2][3];
    Q5_UNR for (int r = 0; r < g3; r++) acc[0][r] = acc[1][r] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = p + ib * RP_Q5_BB;
        __m256i init[3];
        Q5_UNR for (int r = 0; r < g3; r++) init[r] = q5y_corr(((const ub_act_q8_0 *)(a + r * as) + ib)->qs);
        Q5_UNR for (int s = 0; s < 2; s++) { /* rows 8s .. 8s + 7 */
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + RP_Q5_D + 16 * s)));
            const __m256i hp = _mm256_loadu_si256((const __m256i *)(b + RP_Q5_H + 32 * s));
            __m256i isum[3];
            Q5_UNR for (int r = 0; r < g3; r++) isum[r] = init[r];
            Q5_UNR for (int h = 0; h < 4; h++) {
                const __m256i raw = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32 * s));
                const __m256i el = _mm256_or_si256(_mm256_and_si256(raw, m4), q5y_hi(hp, 2 * h));
                const __m256i eh = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), m4), q5y_hi(hp, 2 * h + 1));
                Q5_UNR for (int r = 0; r < g3; r++) {
                    const ub_act_q8_0 *x = (const ub_act_q8_0 *)(a + r * as) + ib;
                    const __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(el, q5y_bc32(x->qs + 8 * h)), ones);
                    const __m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(eh, q5y_bc32(x->qs + 8 * h + 4)), ones);
                    isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(pl, ph));
                }
            }
            Q5_UNR for (int r = 0; r < g3; r++) {
                const ub_act_q8_0 *x = (const ub_act_q8_0 *)(a + r * as) + ib;
                acc[s][r] = _mm256_add_ps(acc[s][r], _mm256_mul_ps(_mm256_mul_ps(dw, _mm256_set1_ps(x->d)), _mm256_cvtepi32_ps(isum[r])));
            }
        }
    }
    Q5_UNR for (int r = 0; r < g3; r++) {
        _mm256_storeu_ps(y + r * ys, acc[0][r]);
        _mm256_storeu_ps(y + r * ys + 8, acc[1][r]);
    }
}

/* rp_internal.h's panel kernel contract: rows in groups of 3, then the rest */
static __attribute__((target(Q5_TGT))) void rp_panel_q5_0_avx2(int64_t nb, const uint8_t *p, const uint8_t *a,
                                                               int64_t as, int nr, float *y, int64_t ys) {
    for (int r0 = 0; r0 < nr; r0 += 3) {
        const int g3 = nr - r0 < 3 ? nr - r0 : 3;
        const uint8_t *ar = a + r0 * as;
        float *yr = y + r0 * ys;
        if (g3 == 3) q5y_body(nb, p, ar, as, 3, yr, ys);
        else if (g3 == 2) q5y_body(nb, p, ar, as, 2, yr, ys);
        else q5y_body(nb, p, ar, as, 1, yr, ys);
    }
}

ub_rp_panel_fn ub_rp_q5_avx2(int32_t type) { return type == UB_T_Q5_0 ? rp_panel_q5_0_avx2 : 0; }
#else
ub_rp_panel_fn ub_rp_q5_avx2(int32_t type) {
    (void)type;
    return 0;
}
#endif
