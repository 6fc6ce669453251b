/* AVX2 + FMA inner loops of the attention kernel, compiled with a per-function target attribute and chosen
 * at run time (no -march flag needed). On other compilers/architectures the stubs fall back to the generic
 * loops and ub_attn_have_avx2() returns 0. */
#include "attn_kernels.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
#include <immintrin.h>

int ub_attn_have_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

#define UB_AVX2 __attribute__((target("avx2,fma")))

static inline UB_AVX2 float hsum8(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* q: nq (1..4) pointers to float[hd]; k: cb rows at stride ks; s: float[nq][16] written for c < cb.
 * Two cells per step keep 8 independent FMA chains in flight. hd % 8 == 0. */
static inline __attribute__((always_inline)) UB_AVX2 void scores_n(const float *const *q, const int nq,
                                                                    const float *k, int64_t ks, int cb, int hd,
                                                                    float *s) {
    int c = 0;
    for (; c + 2 <= cb; c += 2) {
        const float *k0 = k + c * ks, *k1 = k0 + ks;
        __m256 a0[UB_ATTN_QB], a1[UB_ATTN_QB];
        for (int i = 0; i < UB_ATTN_QB; i++) a0[i] = a1[i] = _mm256_setzero_ps();
        for (int d = 0; d < hd; d += 8) {
            const __m256 x0 = _mm256_loadu_ps(k0 + d), x1 = _mm256_loadu_ps(k1 + d);
            for (int i = 0; i < nq; i++) {
                const __m256 qi = _mm256_loadu_ps(q[i] + d);
                a0[i] = _mm256_fmadd_ps(qi, x0, a0[i]);
                a1[i] = _mm256_fmadd_ps(qi, x1, a1[i]);
            }
        }
        for (int i = 0; i < nq; i++) {
            s[i * UB_ATTN_CB + c] = hsum8(a0[i]);
            s[i * UB_ATTN_CB + c + 1] = hsum8(a1[i]);
        }
    }
    for (; c < cb; c++) {
        const float *k0 = k + c * ks;
        __m256 a0[UB_ATTN_QB];
        for (int i = 0; i < UB_ATTN_QB; i++) a0[i] = _mm256_setzero_ps();
        for (int d = 0; d < hd; d += 8) {
            const __m256 x0 = _mm256_loadu_ps(k0 + d);
            for (int i = 0; i < nq; i++) a0[i] = _mm256_fmadd_ps(_mm256_loadu_ps(q[i] + d), x0, a0[i]);
        }
        for (int i = 0; i < nq; i++) s[i * UB_ATTN_CB + c] = hsum8(a0[i]);
    }
}

/* nq is a compile-time constant at each call site below, so the accumulator arrays live in registers. */
UB_AVX2 void ub_attn_scores_avx2(const float *const *q, int nq, const float *k, int64_t ks, int cb, int hd,
                                 float *s) {
    switch (nq) {
    case 4: scores_n(q, 4, k, ks, cb, hd, s); break;
    case 3: scores_n(q, 3, k, ks, cb, hd, s); break;
    case 2: scores_n(q, 2, k, ks, cb, hd, s); break;
    default: scores_n(q, 1, k, ks, cb, hd, s); break;
    }
}

static inline __attribute__((always_inline)) UB_AVX2 void pv_n(const float *p, const int nq, const float *v,
                                                                int64_t vs, int cb, int hd, float *const *acc) {
    for (int d = 0; d < hd; d += 8) {
        __m256 a[UB_ATTN_QB];
        for (int i = 0; i < nq; i++) a[i] = _mm256_loadu_ps(acc[i] + d);
        for (int c = 0; c < cb; c++) {
            const __m256 vc = _mm256_loadu_ps(v + c * vs + d);
            for (int i = 0; i < nq; i++)
                a[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + i * UB_ATTN_CB + c), vc, a[i]);
        }
        for (int i = 0; i < nq; i++) _mm256_storeu_ps(acc[i] + d, a[i]);
    }
}

/* p: float[nq][16]; v: cb rows at stride vs; acc: nq (1..4) pointers to float[hd], updated. hd % 8 == 0. */
UB_AVX2 void ub_attn_pv_avx2(const float *p, int nq, const float *v, int64_t vs, int cb, int hd,
                             float *const *acc) {
    switch (nq) {
    case 4: pv_n(p, 4, v, vs, cb, hd, acc); break;
    case 3: pv_n(p, 3, v, vs, cb, hd, acc); break;
    case 2: pv_n(p, 2, v, vs, cb, hd, acc); break;
    default: pv_n(p, 1, v, vs, cb, hd, acc); break;
    }
}

/* exp of 8 floats: 2^n * P(r) with r = x - n ln2 (Cody-Waite split), degree-6 polynomial (~1 ulp);
 * inputs below -87.3 give 0 (so exp(-inf) = 0), inputs are never above 0 here (scores minus their max). */
static inline UB_AVX2 __m256 exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.3f);
    const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.0f)), lo);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(under, y);
}

/* x: float[16] in place. */
UB_AVX2 void ub_attn_exp_avx2(float *x) {
    _mm256_storeu_ps(x, exp8(_mm256_loadu_ps(x)));
    _mm256_storeu_ps(x + 8, exp8(_mm256_loadu_ps(x + 8)));
}

#else /* not GCC/Clang on x86-64: generic loops only */

int ub_attn_have_avx2(void) { return 0; }
void ub_attn_scores_avx2(const float *const *q, int nq, const float *k, int64_t ks, int cb, int hd, float *s) {
    ub_attn_scores_generic(q, nq, k, ks, cb, hd, s);
}
void ub_attn_pv_avx2(const float *p, int nq, const float *v, int64_t vs, int cb, int hd, float *const *acc) {
    ub_attn_pv_generic(p, nq, v, vs, cb, hd, acc);
}
void ub_attn_exp_avx2(float *x) { ub_attn_exp_generic(x); }

#endif
