/* Template of the cell-list attention's blocked inner loops, included once per back-end by attn_tile_kernels.c
 * with AT_TGT (target attribute string), AT_SFX(name) (the suffix), AT_HB (query heads per score block) and
 * AT_512 (1: the P.V accumulators are 512-bit) defined. Contracts: attn_vis_kernels.h (ub_av_kernels).
 *
 * Every score and every output element is computed by exactly the operations of the one-head, one-cell loops
 * of attn_vis_kernels.c (dots_v / axpys_v), so results are bitwise those of that kernel:
 *   score(h, c) = one 8-lane FMA accumulator over d in steps of 8 (lane j: elements j, j+8, ...), then the
 *                 fixed tree ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)) - here done for 4 cells at once;
 *   out_h[d]    = fma(p(h, c), v_c[d], out_h[d]) for the cells in list order, from 0 - here kept in registers
 *                 over all the cells (lane-independent, so the vector width does not matter).
 * What the blocking changes is only which loads serve which FMAs: a K row load serves AT_HB heads, a query
 * load serves 4 cells, a V row load serves up to 4 heads, and the output is stored once per row. */

#define AT_INL static inline __attribute__((always_inline, target(AT_TGT)))

/* [s0, s1, s2, s3]: the fixed 8-lane sum tree of accumulators a0..a3 (see above). */
AT_INL __m128 AT_SFX(hsum4)(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const __m256 t01 = _mm256_add_ps(_mm256_permute2f128_ps(a0, a1, 0x20), _mm256_permute2f128_ps(a0, a1, 0x31));
    const __m256 t23 = _mm256_add_ps(_mm256_permute2f128_ps(a2, a3, 0x20), _mm256_permute2f128_ps(a2, a3, 0x31));
    /* t01 = [a0: S0 S1 S2 S3 | a1: S0 S1 S2 S3] with S_j = l_j + l_{j+4}; t23 likewise for a2 | a3 */
    const __m256 u = _mm256_add_ps(_mm256_shuffle_ps(t01, t23, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm256_shuffle_ps(t01, t23, _MM_SHUFFLE(3, 2, 3, 2)));
    /* u = [a0: S0+S2, S1+S3, a2: S0+S2, S1+S3 | a1: .., a3: ..] */
    const __m256 w = _mm256_add_ps(_mm256_shuffle_ps(u, u, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm256_shuffle_ps(u, u, _MM_SHUFFLE(3, 1, 3, 1)));
    /* w = [a0, a2, a0, a2 | a1, a3, a1, a3] */
    return _mm_unpacklo_ps(_mm256_castps256_ps128(w), _mm256_extractf128_ps(w, 1));
}
/* The same tree for one accumulator. */
AT_INL float AT_SFX(hsum1)(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

#define AT_LDK(ptr, d) (F16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)(ptr) + (d)))) \
                            : _mm256_loadu_ps((const float *)(ptr) + (d)))

/* NH (<= AT_HB) heads: q NH rows of n floats (row stride n); scores s[h * ss + c] for the nc cells of
 * list cl, K row of cell c at kb + cl[c] * kst bytes. n % 8 == 0. */
AT_INL void AT_SFX(scores_nh)(const float *q, int32_t n, const uint8_t *kb, int64_t kst, const int32_t *cl,
                              int32_t nc, float *s, int64_t ss, const int NH, const int F16) {
    int32_t c = 0;
    for (; c + 4 <= nc; c += 4) {
        const uint8_t *k0 = kb + cl[c] * kst, *k1 = kb + cl[c + 1] * kst, *k2 = kb + cl[c + 2] * kst,
                      *k3 = kb + cl[c + 3] * kst;
        __m256 a[AT_HB][4];
        _Pragma("GCC unroll 4")
        for (int h = 0; h < NH; h++)
            _Pragma("GCC unroll 4")
            for (int j = 0; j < 4; j++) a[h][j] = _mm256_setzero_ps();
        for (int32_t d = 0; d < n; d += 8) {
            const __m256 x0 = AT_LDK(k0, d), x1 = AT_LDK(k1, d), x2 = AT_LDK(k2, d), x3 = AT_LDK(k3, d);
            _Pragma("GCC unroll 4")
            for (int h = 0; h < NH; h++) {
                const __m256 qv = _mm256_loadu_ps(q + (int64_t)h * n + d);
                a[h][0] = _mm256_fmadd_ps(qv, x0, a[h][0]);
                a[h][1] = _mm256_fmadd_ps(qv, x1, a[h][1]);
                a[h][2] = _mm256_fmadd_ps(qv, x2, a[h][2]);
                a[h][3] = _mm256_fmadd_ps(qv, x3, a[h][3]);
            }
        }
        _Pragma("GCC unroll 4")
        for (int h = 0; h < NH; h++) _mm_storeu_ps(s + h * ss + c, AT_SFX(hsum4)(a[h][0], a[h][1], a[h][2], a[h][3]));
    }
    for (; c < nc; c++) {
        const uint8_t *k0 = kb + cl[c] * kst;
        __m256 a[AT_HB];
        _Pragma("GCC unroll 4")
        for (int h = 0; h < NH; h++) a[h] = _mm256_setzero_ps();
        for (int32_t d = 0; d < n; d += 8) {
            const __m256 x0 = AT_LDK(k0, d);
            _Pragma("GCC unroll 4")
            for (int h = 0; h < NH; h++) a[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (int64_t)h * n + d), x0, a[h]);
        }
        _Pragma("GCC unroll 4")
        for (int h = 0; h < NH; h++) s[h * ss + c] = AT_SFX(hsum1)(a[h]);
    }
}

/* scores for gq heads: q gq rows of n floats; s float[gq][nc] (row stride nc). */
AT_INL void AT_SFX(scores_v)(const float *q, int32_t gq, int32_t n, const uint8_t *kb, int64_t kst,
                             const int32_t *cl, int32_t nc, float *s, const int F16) {
    int32_t h = 0;
    for (; h + AT_HB <= gq; h += AT_HB) AT_SFX(scores_nh)(q + (int64_t)h * n, n, kb, kst, cl, nc, s + (int64_t)h * nc, nc, AT_HB, F16);
    switch (gq - h) {
    case 1: AT_SFX(scores_nh)(q + (int64_t)h * n, n, kb, kst, cl, nc, s + (int64_t)h * nc, nc, 1, F16); break;
#if AT_HB > 2
    case 2: AT_SFX(scores_nh)(q + (int64_t)h * n, n, kb, kst, cl, nc, s + (int64_t)h * nc, nc, 2, F16); break;
    case 3: AT_SFX(scores_nh)(q + (int64_t)h * n, n, kb, kst, cl, nc, s + (int64_t)h * nc, nc, 3, F16); break;
#endif
    default: break;
    }
}
/* The ub_av_kernels entries (shapes there): f32 / f16 K rows; f32 / f16 V rows. */
static __attribute__((target(AT_TGT))) void AT_SFX(scores_f32)(const float *q, int32_t gq, int32_t n, const uint8_t *kb,
                                                                int64_t kst, const int32_t *cl, int32_t nc, float *s) {
    AT_SFX(scores_v)(q, gq, n, kb, kst, cl, nc, s, 0);
}
static __attribute__((target(AT_TGT))) void AT_SFX(scores_f16)(const float *q, int32_t gq, int32_t n, const uint8_t *kb,
                                                                int64_t kst, const int32_t *cl, int32_t nc, float *s) {
    AT_SFX(scores_v)(q, gq, n, kb, kst, cl, nc, s, 1);
}

/* s float[gq][nc]: raw scores -> probabilities in place, per head the scalar sequence of av_unit
 * (attention_vis.c): x = scale * (softcap > 0 ? softcap * tanhf(x / softcap) : x); mx = the max (vmaxps is
 * `a > b ? a : b`, the scalar rule; only which of +0 / -0 wins a tie may differ, and x - (+0) == x - (-0)
 * except for x = +-0, where expf gives 1 either way); e = expf(x - mx) (libm, one call per cell); a double sum in
 * cell order; p = e * (float)(1 / sum), rounded to f16 (F16C, round to nearest even: ub_f2h's rule) when f16
 * is set. Passes per block of 4 heads: max, exp, the 4 heads' sums side by side, normalise. */
static __attribute__((target(AT_TGT))) void AT_SFX(probs)(float *s, int32_t gq, int32_t nc, float scale,
                                                           float softcap, int32_t f16) {
    for (int32_t h0 = 0; h0 < gq; h0 += 4) {
        const int nh = gq - h0 < 4 ? (int)(gq - h0) : 4;
        float mx[4];
        double sum[4];
        float *r[4] = {s, s, s, s};
        for (int j = 0; j < nh; j++) {
            float *x = s + (int64_t)(h0 + j) * nc;
            float m = -INFINITY;
            int32_t c = 0;
            r[j] = x;
            if (softcap > 0.0f) {
                for (; c < nc; c++) {
                    float y = softcap * tanhf(x[c] / softcap);
                    y *= scale;
                    x[c] = y;
                    m = y > m ? y : m;
                }
            } else {
                const __m256 vs = _mm256_set1_ps(scale);
                __m256 vm = _mm256_set1_ps(-INFINITY);
                for (; c + 8 <= nc; c += 8) {
                    const __m256 y = _mm256_mul_ps(_mm256_loadu_ps(x + c), vs);
                    _mm256_storeu_ps(x + c, y);
                    vm = _mm256_max_ps(y, vm);
                }
                float lane[8];
                _mm256_storeu_ps(lane, vm);
                for (int l = 0; l < 8; l++) m = lane[l] > m ? lane[l] : m;
                for (; c < nc; c++) {
                    const float y = x[c] * scale;
                    x[c] = y;
                    m = y > m ? y : m;
                }
            }
            mx[j] = m;
        }
        for (int j = 0; j < nh; j++) { /* a loop of libm calls with nothing live in vector registers */
            float *x = r[j];
            const float m = mx[j];
            for (int32_t c = 0; c < nc; c++) x[c] = expf(x[c] - m);
        }
        { /* the double sums in cell order: four independent chains (a missing head repeats head 0, unused) */
            const float *e0 = r[0], *e1 = r[nh > 1 ? 1 : 0], *e2 = r[nh > 2 ? 2 : 0], *e3 = r[nh > 3 ? 3 : 0];
            double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
            for (int32_t c = 0; c < nc; c++) {
                s0 += (double)e0[c];
                s1 += (double)e1[c];
                s2 += (double)e2[c];
                s3 += (double)e3[c];
            }
            sum[0] = s0;
            sum[1] = s1;
            sum[2] = s2;
            sum[3] = s3;
        }
        for (int j = 0; j < nh; j++) {
            float *x = r[j];
            const float inv = (float)(1.0 / sum[j]);
            const __m256 vi = _mm256_set1_ps(inv);
            int32_t c = 0;
            for (; c + 8 <= nc; c += 8) {
                __m256 y = _mm256_mul_ps(_mm256_loadu_ps(x + c), vi);
                if (f16) y = _mm256_cvtph_ps(_mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
                _mm256_storeu_ps(x + c, y);
            }
            for (; c < nc; c++) {
                const float y = x[c] * inv;
                x[c] = f16 ? ub_h2f(ub_f2h(y)) : y;
            }
        }
    }
}

/* P.V: vector type of the accumulators */
#if AT_512
#define AT_VL 16
#define AT_VEC __m512
#define AT_LDV(ptr, d) (F16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)(ptr) + (d)))) \
                            : _mm512_loadu_ps((const float *)(ptr) + (d)))
#define AT_FMA _mm512_fmadd_ps
#define AT_SET1 _mm512_set1_ps
#define AT_ZERO _mm512_setzero_ps
#define AT_ST _mm512_storeu_ps
#else
#define AT_VL 8
#define AT_VEC __m256
#define AT_LDV AT_LDK
#define AT_FMA _mm256_fmadd_ps
#define AT_SET1 _mm256_set1_ps
#define AT_ZERO _mm256_setzero_ps
#define AT_ST _mm256_storeu_ps
#endif
#define AT_DW (AT_512 ? 4 : 2) /* vectors of d per block */

/* NH heads x NW vectors of d from d0: o_h[d] = sum over the nc cells, in order, of p[h * nc + c] * V_c[d]. */
AT_INL void AT_SFX(pv_blk)(float *o, int32_t n, const float *p, int32_t nc, const uint8_t *vb, int64_t vst,
                           const int32_t *cl, int32_t d0, const int NH, const int NW, const int F16) {
    AT_VEC a[4][AT_DW];
    _Pragma("GCC unroll 4")
    for (int h = 0; h < NH; h++)
        _Pragma("GCC unroll 4")
        for (int w = 0; w < NW; w++) a[h][w] = AT_ZERO();
    for (int32_t c = 0; c < nc; c++) {
        const uint8_t *vr = vb + cl[c] * vst;
        AT_VEC x[AT_DW];
        _Pragma("GCC unroll 4")
        for (int w = 0; w < NW; w++) x[w] = AT_LDV(vr, d0 + w * AT_VL);
        _Pragma("GCC unroll 4")
        for (int h = 0; h < NH; h++) {
            const AT_VEC pv = AT_SET1(p[(int64_t)h * nc + c]);
            _Pragma("GCC unroll 4")
            for (int w = 0; w < NW; w++) a[h][w] = AT_FMA(pv, x[w], a[h][w]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int h = 0; h < NH; h++)
        _Pragma("GCC unroll 4")
        for (int w = 0; w < NW; w++) AT_ST(o + (int64_t)h * n + d0 + w * AT_VL, a[h][w]);
}
#define AT_PV_W(NH)                                                                                              \
    do {                                                                                                         \
        int32_t d0 = 0;                                                                                          \
        for (; d0 + AT_DW * AT_VL <= n; d0 += AT_DW * AT_VL) AT_SFX(pv_blk)(oh, n, ph, nc, vb, vst, cl, d0, NH, AT_DW, F16); \
        switch ((n - d0) / AT_VL) {                                                                              \
        case 1: AT_SFX(pv_blk)(oh, n, ph, nc, vb, vst, cl, d0, NH, 1, F16); break;                               \
        case 2: if (AT_DW > 2) AT_SFX(pv_blk)(oh, n, ph, nc, vb, vst, cl, d0, NH, 2, F16); break;                \
        case 3: if (AT_DW > 3) AT_SFX(pv_blk)(oh, n, ph, nc, vb, vst, cl, d0, NH, 3, F16); break;                \
        default: break;                                                                                          \
        }                                                                                                        \
    } while (0)

/* o float[gq][n] (written, every element), p float[gq][nc]; n % AT_VL == 0. */
AT_INL void AT_SFX(pv_v)(float *o, int32_t gq, int32_t n, const float *p, int32_t nc, const uint8_t *vb, int64_t vst,
                         const int32_t *cl, const int F16) {
    int32_t h = 0;
    for (; h < gq; h += 4) {
        float *oh = o + (int64_t)h * n;
        const float *ph = p + (int64_t)h * nc;
        switch (gq - h >= 4 ? 4 : gq - h) {
        case 4: AT_PV_W(4); break;
        case 3: AT_PV_W(3); break;
        case 2: AT_PV_W(2); break;
        default: AT_PV_W(1); break;
        }
    }
}
static __attribute__((target(AT_TGT))) void AT_SFX(pv_f32)(float *o, int32_t gq, int32_t n, const float *p, int32_t nc,
                                                            const uint8_t *vb, int64_t vst, const int32_t *cl) {
    AT_SFX(pv_v)(o, gq, n, p, nc, vb, vst, cl, 0);
}
static __attribute__((target(AT_TGT))) void AT_SFX(pv_f16)(float *o, int32_t gq, int32_t n, const float *p, int32_t nc,
                                                            const uint8_t *vb, int64_t vst, const int32_t *cl) {
    AT_SFX(pv_v)(o, gq, n, p, nc, vb, vst, cl, 1);
}

#undef AT_PV_W
#undef AT_DW
#undef AT_VL
#undef AT_VEC
#undef AT_LDV
#undef AT_FMA
#undef AT_SET1
#undef AT_ZERO
#undef AT_ST
#undef AT_LDK
#undef AT_INL
