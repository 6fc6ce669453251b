/* AVX2 + FMA (and F16C) inner loops of the attention kernel, compiled with per-function target attributes
 * and chosen at run time (no -march flag needed). On other compilers/architectures the entry points fall
 * back to the generic loops and ub_attn_cpu() returns 0. Contracts: attn_kernels.h. */
#include <math.h>

#include "attn_kernels.h"
#include "ub_matmul.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
#include <immintrin.h>

int ub_attn_cpu(void) { /* the CPU probe is mm_cpu.c's (its AVX2 back-end means AVX2 + FMA + F16C) */
    return (ub_mm_cpu_backends() & (1 << UB_MM_AVX2)) ? UB_CPU_AVX2_FMA | UB_CPU_F16C : 0;
}

#define UB_AVX2 __attribute__((target("avx2,fma")))
#define UB_INLINE static inline __attribute__((always_inline))

UB_INLINE UB_AVX2 float hsum8(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

UB_INLINE UB_AVX2 float hmax8(__m256 a) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* The 8 horizontal sums of x0..x7 as one vector [sum x0, ..., sum x7]. */
UB_INLINE UB_AVX2 __m256 hsum8x8(__m256 x0, __m256 x1, __m256 x2, __m256 x3, __m256 x4, __m256 x5,
                                 __m256 x6, __m256 x7) {
    const __m256 g0 = _mm256_hadd_ps(_mm256_hadd_ps(x0, x1), _mm256_hadd_ps(x2, x3));
    const __m256 g1 = _mm256_hadd_ps(_mm256_hadd_ps(x4, x5), _mm256_hadd_ps(x6, x7));
    return _mm256_add_ps(_mm256_permute2f128_ps(g0, g1, 0x20), _mm256_permute2f128_ps(g0, g1, 0x31));
}

/* Scores of 2 queries against cells [0, cb), 4 cells per step (8 independent FMA chains); rows past the
 * last cell repeat it (their scores land in s[.][c >= cb], ignored). s0, s1: rows of s. */
UB_INLINE UB_AVX2 void scores_2q(const float *q0, const float *q1, const float *k, int64_t ks, int cb, int hd,
                                 float *s0, float *s1) {
    for (int c = 0; c < cb; c += 4) {
        const float *k0 = k + c * ks;
        const float *k1 = k + (c + 1 < cb ? c + 1 : cb - 1) * ks;
        const float *k2 = k + (c + 2 < cb ? c + 2 : cb - 1) * ks;
        const float *k3 = k + (c + 3 < cb ? c + 3 : cb - 1) * ks;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
        for (int d = 0; d < hd; d += 8) {
            const __m256 x = _mm256_loadu_ps(q0 + d), y = _mm256_loadu_ps(q1 + d);
            const __m256 r0 = _mm256_loadu_ps(k0 + d), r1 = _mm256_loadu_ps(k1 + d);
            const __m256 r2 = _mm256_loadu_ps(k2 + d), r3 = _mm256_loadu_ps(k3 + d);
            a0 = _mm256_fmadd_ps(x, r0, a0); b0 = _mm256_fmadd_ps(y, r0, b0);
            a1 = _mm256_fmadd_ps(x, r1, a1); b1 = _mm256_fmadd_ps(y, r1, b1);
            a2 = _mm256_fmadd_ps(x, r2, a2); b2 = _mm256_fmadd_ps(y, r2, b2);
            a3 = _mm256_fmadd_ps(x, r3, a3); b3 = _mm256_fmadd_ps(y, r3, b3);
        }
        const __m256 t = hsum8x8(a0, a1, a2, a3, b0, b1, b2, b3);
        _mm_storeu_ps(s0 + c, _mm256_castps256_ps128(t));
        _mm_storeu_ps(s1 + c, _mm256_extractf128_ps(t, 1));
    }
}

/* Scores of one query against cells [0, cb), 8 cells per step. */
UB_INLINE UB_AVX2 void scores_1q(const float *q0, const float *k, int64_t ks, int cb, int hd, float *s0) {
    for (int c = 0; c < cb; c += 8) {
        const float *r0 = k + c * ks;
        const float *r1 = k + (c + 1 < cb ? c + 1 : cb - 1) * ks, *r2 = k + (c + 2 < cb ? c + 2 : cb - 1) * ks;
        const float *r3 = k + (c + 3 < cb ? c + 3 : cb - 1) * ks, *r4 = k + (c + 4 < cb ? c + 4 : cb - 1) * ks;
        const float *r5 = k + (c + 5 < cb ? c + 5 : cb - 1) * ks, *r6 = k + (c + 6 < cb ? c + 6 : cb - 1) * ks;
        const float *r7 = k + (c + 7 < cb ? c + 7 : cb - 1) * ks;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
        for (int d = 0; d < hd; d += 8) {
            const __m256 x = _mm256_loadu_ps(q0 + d);
            a0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(r0 + d), a0);
            a1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(r1 + d), a1);
            a2 = _mm256_fmadd_ps(x, _mm256_loadu_ps(r2 + d), a2);
            a3 = _mm256_fmadd_ps(x, _mm256_loadu_ps(r3 + d), a3);
            a4 = _mm256_fmadd_ps(x, _mm256_loadu_ps(r4 + d), a4);
            a5 = _mm256_fmadd_ps(x, _mm256_loadu_ps(r5 + d), a5);
            a6 = _mm256_fmadd_ps(x, _mm256_loadu_ps(r6 + d), a6);
            a7 = _mm256_fmadd_ps(x, _mm256_loadu_ps(r7 + d), a7);
        }
        _mm256_storeu_ps(s0 + c, hsum8x8(a0, a1, a2, a3, a4, a5, a6, a7));
    }
}

UB_AVX2 void ub_attn_scores_avx2(const float *const *q, int nq, const float *k, int64_t ks, int cb, int hd,
                                 float *s) {
    int i = 0;
    for (; i + 2 <= nq; i += 2) scores_2q(q[i], q[i + 1], k, ks, cb, hd, s + i * UB_ATTN_CB, s + (i + 1) * UB_ATTN_CB);
    if (i < nq) scores_1q(q[i], k, ks, cb, hd, s + i * UB_ATTN_CB);
}

/* exp of 8 floats: 2^n * P(r) with r = x - n ln2 (Cody-Waite split), degree-6 polynomial (~1 ulp);
 * inputs below -87.3 give 0 (so exp(-inf) = 0), inputs are never above 0 here (scores minus their max). */
UB_INLINE UB_AVX2 __m256 exp8(__m256 x) {
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

#define NV (UB_ATTN_CB / 8) /* vectors per chunk row */

UB_AVX2 int ub_attn_softmax_avx2(float *s, int nq, const float *const *mrow, int cb, float scale, float *m,
                                 float *l, float *corr) {
    const __m256 vscale = _mm256_set1_ps(scale), ninf = _mm256_set1_ps(-INFINITY);
    __m256i valid[NV]; /* lanes c < cb (only used for a partial chunk) */
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int j = 0; j < NV; j++)
        valid[j] = _mm256_cmpgt_epi32(_mm256_set1_epi32(cb - 8 * j), idx);
    int any = 0;
    for (int i = 0; i < nq; i++) {
        float *si = s + i * UB_ATTN_CB;
        __m256 x[NV];
        __m256 mx = ninf;
        for (int j = 0; j < NV; j++) {
            const __m256 mk = cb == UB_ATTN_CB ? _mm256_loadu_ps(mrow[i] + 8 * j)
                                               : _mm256_maskload_ps(mrow[i] + 8 * j, valid[j]);
            x[j] = _mm256_fmadd_ps(_mm256_loadu_ps(si + 8 * j), vscale, mk);
            if (cb != UB_ATTN_CB) x[j] = _mm256_blendv_ps(ninf, x[j], _mm256_castsi256_ps(valid[j]));
            mx = _mm256_max_ps(mx, x[j]);
        }
        const float cmax = hmax8(mx);
        if (cmax == -INFINITY) {
            for (int j = 0; j < NV; j++) _mm256_storeu_ps(si + 8 * j, _mm256_setzero_ps());
            corr[i] = 1.0f;
            continue;
        }
        any = 1;
        const float mn = cmax > m[i] ? cmax : m[i];
        corr[i] = mn == m[i] ? 1.0f : expf(m[i] - mn);
        const __m256 vm = _mm256_set1_ps(mn);
        __m256 sum = _mm256_setzero_ps();
        for (int j = 0; j < NV; j++) {
            const __m256 p = exp8(_mm256_sub_ps(x[j], vm));
            _mm256_storeu_ps(si + 8 * j, p);
            sum = _mm256_add_ps(sum, p);
        }
        l[i] = l[i] * corr[i] + hsum8(sum);
        m[i] = mn;
    }
    return any;
}

/* The pv kernels below keep every accumulator in a named register variable (arrays indexed in a loop end
 * up on the stack at -O2) and give the FMA units 8 independent chains where the query count allows.
 * Each handles columns [d, d + 8 * blocks) of its queries' accumulators; pi: row i of p. */
#define LD(a, d) _mm256_loadu_ps((a) + (d))
#define BC(pi, c) _mm256_broadcast_ss((pi) + (c))

/* 4 queries x 16 columns. */
UB_INLINE UB_AVX2 void pv_q4_w16(const float *p, const float *corr, const float *v, int64_t vs, int cb,
                                 float *const *acc, int d) {
    const float *p0 = p, *p1 = p + UB_ATTN_CB, *p2 = p + 2 * UB_ATTN_CB, *p3 = p + 3 * UB_ATTN_CB;
    const __m256 c0 = _mm256_set1_ps(corr[0]), c1 = _mm256_set1_ps(corr[1]);
    const __m256 c2 = _mm256_set1_ps(corr[2]), c3 = _mm256_set1_ps(corr[3]);
    __m256 a0 = _mm256_mul_ps(LD(acc[0], d), c0), b0 = _mm256_mul_ps(LD(acc[0], d + 8), c0);
    __m256 a1 = _mm256_mul_ps(LD(acc[1], d), c1), b1 = _mm256_mul_ps(LD(acc[1], d + 8), c1);
    __m256 a2 = _mm256_mul_ps(LD(acc[2], d), c2), b2 = _mm256_mul_ps(LD(acc[2], d + 8), c2);
    __m256 a3 = _mm256_mul_ps(LD(acc[3], d), c3), b3 = _mm256_mul_ps(LD(acc[3], d + 8), c3);
    const float *vr = v + d;
    for (int c = 0; c < cb; c++, vr += vs) {
        const __m256 x = _mm256_loadu_ps(vr), y = _mm256_loadu_ps(vr + 8);
        __m256 w = BC(p0, c);
        a0 = _mm256_fmadd_ps(w, x, a0); b0 = _mm256_fmadd_ps(w, y, b0);
        w = BC(p1, c);
        a1 = _mm256_fmadd_ps(w, x, a1); b1 = _mm256_fmadd_ps(w, y, b1);
        w = BC(p2, c);
        a2 = _mm256_fmadd_ps(w, x, a2); b2 = _mm256_fmadd_ps(w, y, b2);
        w = BC(p3, c);
        a3 = _mm256_fmadd_ps(w, x, a3); b3 = _mm256_fmadd_ps(w, y, b3);
    }
    _mm256_storeu_ps(acc[0] + d, a0); _mm256_storeu_ps(acc[0] + d + 8, b0);
    _mm256_storeu_ps(acc[1] + d, a1); _mm256_storeu_ps(acc[1] + d + 8, b1);
    _mm256_storeu_ps(acc[2] + d, a2); _mm256_storeu_ps(acc[2] + d + 8, b2);
    _mm256_storeu_ps(acc[3] + d, a3); _mm256_storeu_ps(acc[3] + d + 8, b3);
}

/* 4 queries x 8 columns. */
UB_INLINE UB_AVX2 void pv_q4_w8(const float *p, const float *corr, const float *v, int64_t vs, int cb,
                                float *const *acc, int d) {
    const float *p0 = p, *p1 = p + UB_ATTN_CB, *p2 = p + 2 * UB_ATTN_CB, *p3 = p + 3 * UB_ATTN_CB;
    __m256 a0 = _mm256_mul_ps(LD(acc[0], d), _mm256_set1_ps(corr[0]));
    __m256 a1 = _mm256_mul_ps(LD(acc[1], d), _mm256_set1_ps(corr[1]));
    __m256 a2 = _mm256_mul_ps(LD(acc[2], d), _mm256_set1_ps(corr[2]));
    __m256 a3 = _mm256_mul_ps(LD(acc[3], d), _mm256_set1_ps(corr[3]));
    const float *vr = v + d;
    for (int c = 0; c < cb; c++, vr += vs) {
        const __m256 x = _mm256_loadu_ps(vr);
        a0 = _mm256_fmadd_ps(BC(p0, c), x, a0);
        a1 = _mm256_fmadd_ps(BC(p1, c), x, a1);
        a2 = _mm256_fmadd_ps(BC(p2, c), x, a2);
        a3 = _mm256_fmadd_ps(BC(p3, c), x, a3);
    }
    _mm256_storeu_ps(acc[0] + d, a0); _mm256_storeu_ps(acc[1] + d, a1);
    _mm256_storeu_ps(acc[2] + d, a2); _mm256_storeu_ps(acc[3] + d, a3);
}

/* 2 queries x 32 columns. */
UB_INLINE UB_AVX2 void pv_q2_w32(const float *p, const float *corr, const float *v, int64_t vs, int cb,
                                 float *const *acc, int d) {
    const float *p0 = p, *p1 = p + UB_ATTN_CB;
    const __m256 c0 = _mm256_set1_ps(corr[0]), c1 = _mm256_set1_ps(corr[1]);
    __m256 a0 = _mm256_mul_ps(LD(acc[0], d), c0), a1 = _mm256_mul_ps(LD(acc[0], d + 8), c0);
    __m256 a2 = _mm256_mul_ps(LD(acc[0], d + 16), c0), a3 = _mm256_mul_ps(LD(acc[0], d + 24), c0);
    __m256 b0 = _mm256_mul_ps(LD(acc[1], d), c1), b1 = _mm256_mul_ps(LD(acc[1], d + 8), c1);
    __m256 b2 = _mm256_mul_ps(LD(acc[1], d + 16), c1), b3 = _mm256_mul_ps(LD(acc[1], d + 24), c1);
    const float *vr = v + d;
    for (int c = 0; c < cb; c++, vr += vs) {
        const __m256 w0 = BC(p0, c), w1 = BC(p1, c);
        __m256 x = _mm256_loadu_ps(vr);
        a0 = _mm256_fmadd_ps(w0, x, a0); b0 = _mm256_fmadd_ps(w1, x, b0);
        x = _mm256_loadu_ps(vr + 8);
        a1 = _mm256_fmadd_ps(w0, x, a1); b1 = _mm256_fmadd_ps(w1, x, b1);
        x = _mm256_loadu_ps(vr + 16);
        a2 = _mm256_fmadd_ps(w0, x, a2); b2 = _mm256_fmadd_ps(w1, x, b2);
        x = _mm256_loadu_ps(vr + 24);
        a3 = _mm256_fmadd_ps(w0, x, a3); b3 = _mm256_fmadd_ps(w1, x, b3);
    }
    _mm256_storeu_ps(acc[0] + d, a0); _mm256_storeu_ps(acc[0] + d + 8, a1);
    _mm256_storeu_ps(acc[0] + d + 16, a2); _mm256_storeu_ps(acc[0] + d + 24, a3);
    _mm256_storeu_ps(acc[1] + d, b0); _mm256_storeu_ps(acc[1] + d + 8, b1);
    _mm256_storeu_ps(acc[1] + d + 16, b2); _mm256_storeu_ps(acc[1] + d + 24, b3);
}

/* 2 queries x 8 columns. */
UB_INLINE UB_AVX2 void pv_q2_w8(const float *p, const float *corr, const float *v, int64_t vs, int cb,
                                float *const *acc, int d) {
    const float *p0 = p, *p1 = p + UB_ATTN_CB;
    __m256 a0 = _mm256_mul_ps(LD(acc[0], d), _mm256_set1_ps(corr[0]));
    __m256 b0 = _mm256_mul_ps(LD(acc[1], d), _mm256_set1_ps(corr[1]));
    const float *vr = v + d;
    for (int c = 0; c < cb; c++, vr += vs) {
        const __m256 x = _mm256_loadu_ps(vr);
        a0 = _mm256_fmadd_ps(BC(p0, c), x, a0);
        b0 = _mm256_fmadd_ps(BC(p1, c), x, b0);
    }
    _mm256_storeu_ps(acc[0] + d, a0); _mm256_storeu_ps(acc[1] + d, b0);
}

/* 1 query x 32 columns, even and odd cells in separate chains (8 chains). */
UB_INLINE UB_AVX2 void pv_q1_w32(const float *p0, float corr, const float *v, int64_t vs, int cb, float *acc,
                                 int d) {
    const __m256 c0 = _mm256_set1_ps(corr);
    __m256 a0 = _mm256_mul_ps(LD(acc, d), c0), a1 = _mm256_mul_ps(LD(acc, d + 8), c0);
    __m256 a2 = _mm256_mul_ps(LD(acc, d + 16), c0), a3 = _mm256_mul_ps(LD(acc, d + 24), c0);
    __m256 b0 = _mm256_setzero_ps(), b1 = b0, b2 = b0, b3 = b0;
    const float *vr = v + d;
    int c = 0;
    for (; c + 2 <= cb; c += 2, vr += 2 * vs) {
        const __m256 w0 = BC(p0, c), w1 = BC(p0, c + 1);
        const float *vn = vr + vs;
        a0 = _mm256_fmadd_ps(w0, LD(vr, 0), a0); b0 = _mm256_fmadd_ps(w1, LD(vn, 0), b0);
        a1 = _mm256_fmadd_ps(w0, LD(vr, 8), a1); b1 = _mm256_fmadd_ps(w1, LD(vn, 8), b1);
        a2 = _mm256_fmadd_ps(w0, LD(vr, 16), a2); b2 = _mm256_fmadd_ps(w1, LD(vn, 16), b2);
        a3 = _mm256_fmadd_ps(w0, LD(vr, 24), a3); b3 = _mm256_fmadd_ps(w1, LD(vn, 24), b3);
    }
    if (c < cb) {
        const __m256 w0 = BC(p0, c);
        a0 = _mm256_fmadd_ps(w0, LD(vr, 0), a0); a1 = _mm256_fmadd_ps(w0, LD(vr, 8), a1);
        a2 = _mm256_fmadd_ps(w0, LD(vr, 16), a2); a3 = _mm256_fmadd_ps(w0, LD(vr, 24), a3);
    }
    _mm256_storeu_ps(acc + d, _mm256_add_ps(a0, b0)); _mm256_storeu_ps(acc + d + 8, _mm256_add_ps(a1, b1));
    _mm256_storeu_ps(acc + d + 16, _mm256_add_ps(a2, b2)); _mm256_storeu_ps(acc + d + 24, _mm256_add_ps(a3, b3));
}

/* 1 query x 8 columns. */
UB_INLINE UB_AVX2 void pv_q1_w8(const float *p0, float corr, const float *v, int64_t vs, int cb, float *acc,
                                int d) {
    __m256 a0 = _mm256_mul_ps(LD(acc, d), _mm256_set1_ps(corr)), b0 = _mm256_setzero_ps();
    const float *vr = v + d;
    int c = 0;
    for (; c + 2 <= cb; c += 2, vr += 2 * vs) {
        a0 = _mm256_fmadd_ps(BC(p0, c), LD(vr, 0), a0);
        b0 = _mm256_fmadd_ps(BC(p0, c + 1), LD(vr + vs, 0), b0);
    }
    if (c < cb) a0 = _mm256_fmadd_ps(BC(p0, c), LD(vr, 0), a0);
    _mm256_storeu_ps(acc + d, _mm256_add_ps(a0, b0));
}

UB_INLINE UB_AVX2 void pv_q2(const float *p, const float *corr, const float *v, int64_t vs, int cb, int hd,
                             float *const *acc) {
    int d = 0;
    for (; d + 32 <= hd; d += 32) pv_q2_w32(p, corr, v, vs, cb, acc, d);
    for (; d < hd; d += 8) pv_q2_w8(p, corr, v, vs, cb, acc, d);
}

UB_INLINE UB_AVX2 void pv_q1(const float *p, float corr, const float *v, int64_t vs, int cb, int hd, float *acc) {
    int d = 0;
    for (; d + 32 <= hd; d += 32) pv_q1_w32(p, corr, v, vs, cb, acc, d);
    for (; d < hd; d += 8) pv_q1_w8(p, corr, v, vs, cb, acc, d);
}

UB_AVX2 void ub_attn_pv_avx2(const float *p, int nq, const float *corr, const float *v, int64_t vs, int cb,
                             int hd, float *const *acc) {
    if (nq == 4) {
        int d = 0;
        for (; d + 16 <= hd; d += 16) pv_q4_w16(p, corr, v, vs, cb, acc, d);
        if (d < hd) pv_q4_w8(p, corr, v, vs, cb, acc, d);
    } else if (nq >= 2) {
        pv_q2(p, corr, v, vs, cb, hd, acc);
        if (nq == 3) pv_q1(p + 2 * UB_ATTN_CB, corr[2], v, vs, cb, hd, acc[2]);
    } else {
        pv_q1(p, corr[0], v, vs, cb, hd, acc[0]);
    }
}

__attribute__((target("avx,f16c"))) void ub_attn_h2f_f16c(const uint16_t *src, int64_t ss, int cb, int hd,
                                                           float *dst) {
    for (int c = 0; c < cb; c++) {
        const uint16_t *r = src + c * ss;
        float *o = dst + (int64_t)c * hd;
        for (int d = 0; d < hd; d += 8)
            _mm256_storeu_ps(o + d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(r + d))));
    }
}

UB_AVX2 void ub_attn_scan_avx2(const float *row, int n, uint8_t *flags) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    int c = 0, ci = 0;
    for (; c + UB_ATTN_CB <= n; c += UB_ATTN_CB, ci++) {
        __m256 seen = _mm256_cmp_ps(_mm256_loadu_ps(row + c), ninf, _CMP_NEQ_UQ);
        for (int j = 1; j < NV; j++)
            seen = _mm256_or_ps(seen, _mm256_cmp_ps(_mm256_loadu_ps(row + c + 8 * j), ninf, _CMP_NEQ_UQ));
        if (_mm256_movemask_ps(seen)) flags[ci] |= 1;
    }
    for (; c < n; c++)
        if (row[c] != -INFINITY) flags[c / UB_ATTN_CB] |= 1;
}

#else /* not GCC/Clang on x86-64: generic loops only */

int ub_attn_cpu(void) { return 0; }
void ub_attn_scores_avx2(const float *const *q, int nq, const float *k, int64_t ks, int cb, int hd, float *s) {
    ub_attn_scores_generic(q, nq, k, ks, cb, hd, s);
}
int ub_attn_softmax_avx2(float *s, int nq, const float *const *mrow, int cb, float scale, float *m, float *l,
                         float *corr) {
    return ub_attn_softmax_generic(s, nq, mrow, cb, scale, m, l, corr);
}
void ub_attn_pv_avx2(const float *p, int nq, const float *corr, const float *v, int64_t vs, int cb, int hd,
                     float *const *acc) {
    ub_attn_pv_generic(p, nq, corr, v, vs, cb, hd, acc);
}
void ub_attn_h2f_f16c(const uint16_t *src, int64_t ss, int cb, int hd, float *dst) {
    ub_attn_h2f_generic(src, ss, cb, hd, dst);
}
void ub_attn_scan_avx2(const float *row, int n, uint8_t *flags) { ub_attn_scan_generic(row, n, flags); }

#endif
