/* Plain-C and AVX2/FMA/F16C inner loops of the visible-cell attention (contracts: attn_vis_kernels.h). */
#include "ub_compute.h"
#include "attn_vis_kernels.h"

/* 8 partial sums (lane j: elements j, j+8, ...), combined pairwise in a fixed order, tail last. */
static float dot_f32_c(const float *q, const float *k, int32_t n) {
    float p[8] = {0};
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) p[j] += q[i + j] * k[i + j];
    float s = ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
    for (; i < n; i++) s += q[i] * k[i];
    return s;
}
static float dot_f16_c(const float *q, const uint16_t *k, int32_t n) {
    float p[8] = {0};
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) p[j] += q[i + j] * ub_h2f(k[i + j]);
    float s = ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
    for (; i < n; i++) s += q[i] * ub_h2f(k[i]);
    return s;
}
static void axpy_f32_c(float *o, float p, const float *v, int32_t n) {
    for (int32_t d = 0; d < n; d++) o[d] += p * v[d];
}
static void axpy_f16_c(float *o, float p, const uint16_t *v, int32_t n) {
    for (int32_t d = 0; d < n; d++) o[d] += p * ub_h2f(v[d]);
}

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
#include <immintrin.h>
#define AVX2 __attribute__((target("avx2,fma,f16c")))

static AVX2 float hsum(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
/* n % 8 == 0: one 8-lane FMA accumulator over the row, then a fixed horizontal sum. */
static AVX2 float dot_f32_v(const float *q, const float *k, int32_t n) {
    __m256 a = _mm256_setzero_ps();
    for (int32_t i = 0; i < n; i += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), a);
    return hsum(a);
}
static AVX2 float dot_f16_v(const float *q, const uint16_t *k, int32_t n) {
    __m256 a = _mm256_setzero_ps();
    for (int32_t i = 0; i < n; i += 8)
        a = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i))), a);
    return hsum(a);
}
static AVX2 void axpy_f32_v(float *o, float p, const float *v, int32_t n) {
    const __m256 pp = _mm256_set1_ps(p);
    for (int32_t d = 0; d < n; d += 8)
        _mm256_storeu_ps(o + d, _mm256_fmadd_ps(pp, _mm256_loadu_ps(v + d), _mm256_loadu_ps(o + d)));
}
static AVX2 void axpy_f16_v(float *o, float p, const uint16_t *v, int32_t n) {
    const __m256 pp = _mm256_set1_ps(p);
    for (int32_t d = 0; d < n; d += 8)
        _mm256_storeu_ps(o + d, _mm256_fmadd_ps(pp, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + d))),
                                                _mm256_loadu_ps(o + d)));
}
#define HAVE_V 1
#else
#define HAVE_V 0
#endif

void ub_av_select(ub_av_kernels *kern, int avx2, int32_t hd_k, int32_t hd_v) {
    kern->dot_f32 = dot_f32_c;
    kern->dot_f16 = dot_f16_c;
    kern->axpy_f32 = axpy_f32_c;
    kern->axpy_f16 = axpy_f16_c;
#if HAVE_V
    if (avx2 && hd_k % 8 == 0) {
        kern->dot_f32 = dot_f32_v;
        kern->dot_f16 = dot_f16_v;
    }
    if (avx2 && hd_v % 8 == 0) {
        kern->axpy_f32 = axpy_f32_v;
        kern->axpy_f16 = axpy_f16_v;
    }
#else
    (void)avx2; (void)hd_k; (void)hd_v;
#endif
}
