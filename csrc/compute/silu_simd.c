/* silu(g) * u eight (AVX2+FMA) or sixteen (AVX-512F) elements at a time, bitwise the scalar loop of ops.c
 * (ub_gexp.h, then g / (1 + e) * u): every step is the same IEEE operation lane by lane — the fused
 * multiply-adds are vfmadd (fmaf's single rounding), the negated ones vfnmadd (-n * c + x, negation exact),
 * the division vdivps (correctly rounded). scalbnf(j, n) (n an integer in [-192, 192], j in [0.7, 1.5]) is
 * one rounded product j * 2^n: for |n| <= 126, 2^n is a normal float built from its exponent bits and one
 * vmulps is that rounding; outside, j * 2^(n -/+ 100) is exact (a normal result) and the product with
 * 2^(+/-100) rounds once (gradual underflow, or overflow to +inf as scalbnf). NaN and |n| > 192 lanes are
 * replaced as ub_gexp does. The avxvnni back-end runs the AVX2 loop. No buffers of its own. */
#include "ub_matmul.h"
#include "ub_silu_simd.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
#include <immintrin.h>

#define SL_TGT "avx2,fma"
#define SL_SFX(x) x##_sl2
#define SL_W 8
#define SL_V __m256
#define SL_VI __m256i
#define SL_M __m256
#define SL_SET1 _mm256_set1_ps
#define SL_LOAD _mm256_loadu_ps
#define SL_STORE _mm256_storeu_ps
#define SL_ADD _mm256_add_ps
#define SL_SUB _mm256_sub_ps
#define SL_NEG(a) _mm256_xor_ps((a), _mm256_set1_ps(-0.0f))
#define SL_MUL _mm256_mul_ps
#define SL_DIV _mm256_div_ps
#define SL_FMA _mm256_fmadd_ps
#define SL_FNMA _mm256_fnmadd_ps
#define SL_MIN _mm256_min_ps
#define SL_MAX _mm256_max_ps
#define SL_CMP(a, b, p) _mm256_cmp_ps((a), (b), (p))
#define SL_BLEND(m, a, b) _mm256_blendv_ps((a), (b), (m))   /* m ? b : a */
#define SL_CVT _mm256_cvttps_epi32
#define SL_I2F_BITS(i) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32((i), _mm256_set1_epi32(127)), 23))
#include "silu_simd.h"
#undef SL_TGT
#undef SL_SFX
#undef SL_W
#undef SL_V
#undef SL_VI
#undef SL_M
#undef SL_SET1
#undef SL_LOAD
#undef SL_STORE
#undef SL_ADD
#undef SL_SUB
#undef SL_NEG
#undef SL_MUL
#undef SL_DIV
#undef SL_FMA
#undef SL_FNMA
#undef SL_MIN
#undef SL_MAX
#undef SL_CMP
#undef SL_BLEND
#undef SL_CVT
#undef SL_I2F_BITS

#define SL_TGT "avx2,fma,avx512f"
#define SL_SFX(x) x##_sl5
#define SL_W 16
#define SL_V __m512
#define SL_VI __m512i
#define SL_M __mmask16
#define SL_SET1 _mm512_set1_ps
#define SL_LOAD _mm512_loadu_ps
#define SL_STORE _mm512_storeu_ps
#define SL_ADD _mm512_add_ps
#define SL_SUB _mm512_sub_ps
#define SL_NEG(a) _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32((int)0x80000000u)))
#define SL_MUL _mm512_mul_ps
#define SL_DIV _mm512_div_ps
#define SL_FMA _mm512_fmadd_ps
#define SL_FNMA _mm512_fnmadd_ps
#define SL_MIN _mm512_min_ps
#define SL_MAX _mm512_max_ps
#define SL_CMP(a, b, p) _mm512_cmp_ps_mask((a), (b), (p))
#define SL_BLEND(m, a, b) _mm512_mask_blend_ps((m), (a), (b))   /* m ? b : a */
#define SL_CVT _mm512_cvttps_epi32
#define SL_I2F_BITS(i) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32((i), _mm512_set1_epi32(127)), 23))
#include "silu_simd.h"
#define HAVE_SL 1
#else
#define HAVE_SL 0
#endif

int64_t ub_silu_mul_simd(int be, const float *g, const float *u, float *y, int64_t n) {
#if HAVE_SL
    if (be == UB_MM_AVX512) return silu_mul_sl5(g, u, y, n);
    if (be == UB_MM_AVX2 || be == UB_MM_AVXVNNI) return silu_mul_sl2(g, u, y, n);
#else
    (void)g; (void)u; (void)y; (void)n;
#endif
    (void)be;
    return 0;
}
