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

static void dots_f32_c(const float *q, int32_t gq, int32_t n, const float *k, float *s, int64_t ss) {
    for (int32_t h = 0; h < gq; h++) s[h * ss] = dot_f32_c(q + (int64_t)h * n, k, n);
}
static void dots_f16_c(const float *q, int32_t gq, int32_t n, const uint16_t *k, float *s, int64_t ss) {
    for (int32_t h = 0; h < gq; h++) s[h * ss] = dot_f16_c(q + (int64_t)h * n, k, n);
}
static void axpys_f32_c(float *o, int32_t gq, int32_t n, const float *p, int64_t ps, const float *v) {
    for (int32_t h = 0; h < gq; h++) axpy_f32_c(o + (int64_t)h * n, p[h * ps], v, n);
}
static void axpys_f16_c(float *o, int32_t gq, int32_t n, const float *p, int64_t ps, const uint16_t *v) {
    for (int32_t h = 0; h < gq; h++) axpy_f16_c(o + (int64_t)h * n, p[h * ps], v, n);
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
/* n % 8 == 0. dots: per head one 8-lane FMA accumulator over the row, then a fixed horizontal sum; heads
 * in groups of 4 share each load of k (converted once for f16). axpys: o_h += p_h * v, v loaded once. */
#define LDK(ptr, d) (F16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)(ptr) + (d)))) \
                         : _mm256_loadu_ps((const float *)(ptr) + (d)))
static inline __attribute__((always_inline)) AVX2 void dots_v(const float *q, int32_t gq, int32_t n, const void *k,
                                                              float *s, int64_t ss, const int F16) {
    int32_t h = 0;
    for (; h + 4 <= gq; h += 4) {
        const float *q0 = q + (int64_t)h * n, *q1 = q0 + n, *q2 = q1 + n, *q3 = q2 + n;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int32_t d = 0; d < n; d += 8) {
            const __m256 kv = LDK(k, d);
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d), kv, a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q1 + d), kv, a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q2 + d), kv, a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q3 + d), kv, a3);
        }
        s[h * ss] = hsum(a0);
        s[(h + 1) * ss] = hsum(a1);
        s[(h + 2) * ss] = hsum(a2);
        s[(h + 3) * ss] = hsum(a3);
    }
    for (; h < gq; h++) {
        const float *q0 = q + (int64_t)h * n;
        __m256 a0 = _mm256_setzero_ps();
        for (int32_t d = 0; d < n; d += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d), LDK(k, d), a0);
        s[h * ss] = hsum(a0);
    }
}
static inline __attribute__((always_inline)) AVX2 void axpys_v(float *o, int32_t gq, int32_t n, const float *p,
                                                               int64_t ps, const void *v, const int F16) {
    for (int32_t d = 0; d < n; d += 8) {
        const __m256 vv = LDK(v, d);
        for (int32_t h = 0; h < gq; h++) {
            float *oh = o + (int64_t)h * n + d;
            _mm256_storeu_ps(oh, _mm256_fmadd_ps(_mm256_set1_ps(p[h * ps]), vv, _mm256_loadu_ps(oh)));
        }
    }
}
#undef LDK
static AVX2 void dots_f32_v(const float *q, int32_t gq, int32_t n, const float *k, float *s, int64_t ss) {
    dots_v(q, gq, n, k, s, ss, 0);
}
static AVX2 void dots_f16_v(const float *q, int32_t gq, int32_t n, const uint16_t *k, float *s, int64_t ss) {
    dots_v(q, gq, n, k, s, ss, 1);
}
static AVX2 void axpys_f32_v(float *o, int32_t gq, int32_t n, const float *p, int64_t ps, const float *v) {
    axpys_v(o, gq, n, p, ps, v, 0);
}
static AVX2 void axpys_f16_v(float *o, int32_t gq, int32_t n, const float *p, int64_t ps, const uint16_t *v) {
    axpys_v(o, gq, n, p, ps, v, 1);
}
#define HAVE_V 1
#else
#define HAVE_V 0
#endif

void ub_av_select(ub_av_kernels *kern, int avx2, int32_t hd_k, int32_t hd_v) {
    kern->dots_f32 = dots_f32_c;
    kern->dots_f16 = dots_f16_c;
    kern->axpys_f32 = axpys_f32_c;
    kern->axpys_f16 = axpys_f16_c;
#if HAVE_V
    if (avx2 && hd_k % 8 == 0) {
        kern->dots_f32 = dots_f32_v;
        kern->dots_f16 = dots_f16_v;
    }
    if (avx2 && hd_v % 8 == 0) {
        kern->axpys_f32 = axpys_f32_v;
        kern->axpys_f16 = axpys_f16_v;
    }
#else
    (void)avx2; (void)hd_k; (void)hd_v;
#endif
}
