/* AVX2 + FMA inner loops of the attention kernel, compiled with a per-function target attribute and chosen
 * at run time (no -march flag needed). On other compilers/architectures the stubs report "unavailable". */
#include "attn_kernels.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
#include <immintrin.h>

int ub_attn_have_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* q: nq (1..4) pointers to float[hd]; kt: float[hd][16]; s: float[nq][16] written. hd % 8 == 0. */
__attribute__((target("avx2,fma"))) void ub_attn_scores_avx2(const float *const *q, int nq, const float *kt,
                                                             int hd, float *s) {
    __m256 a[UB_ATTN_QB][2];
    for (int i = 0; i < UB_ATTN_QB; i++) a[i][0] = a[i][1] = _mm256_setzero_ps();
    if (nq == 4) {
        for (int d = 0; d < hd; d++) {
            const __m256 k0 = _mm256_loadu_ps(kt + d * UB_ATTN_CB), k1 = _mm256_loadu_ps(kt + d * UB_ATTN_CB + 8);
            const __m256 q0 = _mm256_broadcast_ss(q[0] + d), q1 = _mm256_broadcast_ss(q[1] + d);
            const __m256 q2 = _mm256_broadcast_ss(q[2] + d), q3 = _mm256_broadcast_ss(q[3] + d);
            a[0][0] = _mm256_fmadd_ps(q0, k0, a[0][0]); a[0][1] = _mm256_fmadd_ps(q0, k1, a[0][1]);
            a[1][0] = _mm256_fmadd_ps(q1, k0, a[1][0]); a[1][1] = _mm256_fmadd_ps(q1, k1, a[1][1]);
            a[2][0] = _mm256_fmadd_ps(q2, k0, a[2][0]); a[2][1] = _mm256_fmadd_ps(q2, k1, a[2][1]);
            a[3][0] = _mm256_fmadd_ps(q3, k0, a[3][0]); a[3][1] = _mm256_fmadd_ps(q3, k1, a[3][1]);
        }
    } else {
        for (int d = 0; d < hd; d++) {
            const __m256 k0 = _mm256_loadu_ps(kt + d * UB_ATTN_CB), k1 = _mm256_loadu_ps(kt + d * UB_ATTN_CB + 8);
            for (int i = 0; i < nq; i++) {
                const __m256 qi = _mm256_broadcast_ss(q[i] + d);
                a[i][0] = _mm256_fmadd_ps(qi, k0, a[i][0]);
                a[i][1] = _mm256_fmadd_ps(qi, k1, a[i][1]);
            }
        }
    }
    for (int i = 0; i < nq; i++) {
        _mm256_storeu_ps(s + i * UB_ATTN_CB, a[i][0]);
        _mm256_storeu_ps(s + i * UB_ATTN_CB + 8, a[i][1]);
    }
}

/* p: float[nq][16]; v: float[16][hd]; acc: nq (1..4) pointers to float[hd], updated. hd % 8 == 0. */
__attribute__((target("avx2,fma"))) void ub_attn_pv_avx2(const float *p, int nq, const float *v, int hd,
                                                         float *const *acc) {
    for (int d = 0; d < hd; d += 8) {
        __m256 a[UB_ATTN_QB];
        for (int i = 0; i < nq; i++) a[i] = _mm256_loadu_ps(acc[i] + d);
        if (nq == 4) {
            for (int c = 0; c < UB_ATTN_CB; c++) {
                const __m256 vc = _mm256_loadu_ps(v + c * hd + d);
                a[0] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + c), vc, a[0]);
                a[1] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + UB_ATTN_CB + c), vc, a[1]);
                a[2] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + 2 * UB_ATTN_CB + c), vc, a[2]);
                a[3] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + 3 * UB_ATTN_CB + c), vc, a[3]);
            }
        } else {
            for (int c = 0; c < UB_ATTN_CB; c++) {
                const __m256 vc = _mm256_loadu_ps(v + c * hd + d);
                for (int i = 0; i < nq; i++)
                    a[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + i * UB_ATTN_CB + c), vc, a[i]);
            }
        }
        for (int i = 0; i < nq; i++) _mm256_storeu_ps(acc[i] + d, a[i]);
    }
}

#else /* not GCC/Clang on x86-64: generic loops only */

int ub_attn_have_avx2(void) { return 0; }
void ub_attn_scores_avx2(const float *const *q, int nq, const float *kt, int hd, float *s) {
    ub_attn_scores_generic(q, nq, kt, hd, s);
}
void ub_attn_pv_avx2(const float *p, int nq, const float *v, int hd, float *const *acc) {
    ub_attn_pv_generic(p, nq, v, hd, acc);
}

#endif
