/* The table GeGLU of layer.c (ub_gelu_table_mul) on 8 lanes (AVX2 + F16C), for every SIMD back-end (a 16-lane
 * AVX-512 copy measured no faster: 1.25-1.4 against 1.25 us for 2048 elements): the gate's f16 bits by
 * vcvtps2ph (round to nearest even, as ub_f2h) and a gather of the table entries, the +-10 cut-offs by
 * compares, then the product by u: per lane the plain C loop's operations, so its bits on every back-end. */
#include "ub_matmul.h"
#include "act_simd.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
#include <immintrin.h>

/* table: float[65536]; g, u, y: float[n] (y may alias g or u); returns the count done (a multiple of 8). Per
 * lane layer.c's ub_gelu_table_mul: g >= 10 -> g, g <= -10 -> 0, else table[f16 bits of g] (vcvtps2ph, round
 * to nearest even: ub_f2h's rounding, NaN -> the same quiet NaN); then times u. */
static __attribute__((target("avx2,fma,f16c"))) int64_t gelu_tab_avx2(const float *table, const float *g,
                                                                       const float *u, float *y, int64_t n) {
    const __m256 p10 = _mm256_set1_ps(10.0f), m10 = _mm256_set1_ps(-10.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 a = _mm256_loadu_ps(g + i);
        const __m256i h = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        __m256 act = _mm256_i32gather_ps(table, h, 4);
        act = _mm256_blendv_ps(act, _mm256_setzero_ps(), _mm256_cmp_ps(a, m10, _CMP_LE_OQ));
        act = _mm256_blendv_ps(act, a, _mm256_cmp_ps(a, p10, _CMP_GE_OQ));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(act, _mm256_loadu_ps(u + i)));
    }
    return i;
}

int64_t ub_gelu_table_mul_simd(const float *table, const float *g, const float *u, float *y, int64_t n, int backend) {
    return backend == UB_MM_GENERIC ? 0 : gelu_tab_avx2(table, g, u, y, n);
}

#else
int64_t ub_gelu_table_mul_simd(const float *table, const float *g, const float *u, float *y, int64_t n, int backend) {
    (void)table; (void)g; (void)u; (void)y; (void)n; (void)backend;
    return 0;
}
#endif
