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
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = w + ib * 136;
        uint16_t sh;
        memcpy(&sh, b + 2, 2);
        __m256i sumi[UB_MM_RT];
        UNR for (int r = 0; r < nr; r++) sumi[r] = _mm256_setzero_si256();
        for (int s = 0; s < 8; s++) {
            const int ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 15) | (((sh >> (2 * s)) & 3) << 4);
            const __m256i sc = _mm256_set1_epi16((short)(ls - 32));
            const __m256i q = _mm256_shuffle_epi8(kv, nibbles32(b + 8 + 16 * s)), qa = _mm256_sign_epi8(q, q);
            UNR for (int r = 0; r < nr; r++) {
                const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
                sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(pairs_s8(q, qa, ld(x->qs + 32 * s)), sc));
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

ub_mm_dot_fn ub_mm_dot_iq_avx2(int32_t type) {
    switch (type) {
    case UB_T_IQ4_XS: return dot_iq4_xs;
    }
    return 0;
}
#else
ub_mm_dot_fn ub_mm_dot_iq_avx2(int32_t type) {
    (void)type;
    return 0;
}
#endif
