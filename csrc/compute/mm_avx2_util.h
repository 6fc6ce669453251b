/* Shared helpers of the AVX2 kernel files (mm_avx2.c, mm_iq_avx2.c): the target attribute, one-line
 * loads and conversions, the exact integer dot steps and the nr = 1..6 dispatch of a kernel body. Included
 * only where AVX2 code is compiled (GCC / Clang on x86-64). */
#ifndef UB_MM_AVX2_UTIL_H
#define UB_MM_AVX2_UTIL_H

#include <stdint.h>
#include <string.h>

#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline))
/* the per-row loops of a tile (nr a constant in every instantiation) are unrolled so that each row's
 * accumulators stay in registers; unrolling does not change any row's operations */
#define UNR _Pragma("GCC unroll 8")

INL AVX2 float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}
INL AVX2 float hsum(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
/* the sum of 8 int32 lanes (exact as long as it fits, in any order) */
INL AVX2 int32_t hsum_i32(__m256i a) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 1)));
}
INL AVX2 __m256i ld(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
/* signed w (any int8) . signed x (never -128) -> 8 int32 partial sums */
INL AVX2 __m256i dot_s8(__m256i w, __m256i x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)), _mm256_set1_epi16(1));
}
/* unsigned w (<= 63) . signed x -> 8 int32 partial sums */
INL AVX2 __m256i dot_u8(__m256i w, __m256i x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
}
/* 32 bytes: byte j = 0xFF when bit j of the little-endian uint32 at p is set, else 0 */
INL AVX2 __m256i bytes_of_bits(const uint8_t *p) {
    uint32_t h;
    memcpy(&h, p, 4);
    const __m256i sel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)h), sel), bit);
    return _mm256_cmpeq_epi8(v, bit);
}
INL AVX2 __m256i bit4_from_bits(const uint8_t *p) { return _mm256_and_si256(bytes_of_bits(p), _mm256_set1_epi8(0x10)); }
/* 16 packed nibble bytes -> 32 bytes: low nibbles (elements 0..15) then high nibbles (16..31) */
INL AVX2 __m256i nibbles32(const uint8_t *p) { /* the 16 bytes in both halves, the upper half shifted by 4 */
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
    return _mm256_and_si256(_mm256_srlv_epi64(b, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(0x0F));
}

#define DISPATCH(NAME, BODY) UB_DOT_BY_ROWS(static AVX2, NAME, BODY)

#endif
