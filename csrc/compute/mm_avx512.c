/* The AVX-512 back-end (F/BW/VL + AVX512_VNNI: Ice Lake and later Xeons, Sapphire Rapids, Zen 4/5): the
 * kernels of mm_vnni.h compiled for it (EVEX vpdpbusd, opmask bit expansion, the 32-block GEMM tiles), and
 * the GEMM tiles of the k-quants and IQ4_XS below. Chosen at run time (matmul.c; the CPU check is mm_cpu.c). */
#include "mm_internal.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
#define VN_TGT "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
#define VN_DPBUSD(c, u, s) _mm256_dpbusd_epi32((c), (u), (s))
#define VN_DPWSSD(c, p, s) _mm256_dpwssd_epi32((c), (p), (s))
#define VN_AVX512 1
#define VN_SUFFIX(x) x##_avx512
#include "mm_vnni.h"
#include "mm_q8_tile.h"
/* the driver steps the Q8_0 tile, the decode tile and the GEMM lookup's tile by one gc / gr */
typedef char qt_shape_is_the_lookups[(QT_GC == VN_GC && QT_GR == VN_GR && QT_GC == VN_VC) ? 1 : -1];

/* ---- AVX-512 GEMM tiles of the k-quants Q4_K / Q5_K / Q6_K (against Q8_K): VK_GC weight rows x VK_GR
 * activation rows. Per element the operations of the AVX2 dot kernel (mm_avx2.c body_q45k / body_q6k): the
 * block's 8 int32 lanes (sums of maddubs pairs times the sub-block scales, vpdpwssd fusing madd and add;
 * exact, so computing two 32-element chunks per zmm and adding the halves gives the same integers), then the same f32 products dw * dx and
 * dmin * dx and the same FMA / FNMA into the row's 8-lane accumulator, blocks in order, the same hsum. */
#define VK_GC 2
#define VK_GR 6

VN_INL __m512i vk_join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

/* the 8 sub-block scales and 8 mins of a Q4_K / Q5_K block (6-bit, packed in 12 bytes at s) */
VN_INL void vk_scale_min(const uint8_t *s, int16_t *sc, int16_t *mn16) { /* mn16[16]: each min twice */
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn16[2 * j] = mn16[2 * j + 1] = s[j + 4] & 63;
    }
    for (int j = 4; j < 8; j++) {
        sc[j] = (int16_t)((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
        mn16[2 * j] = mn16[2 * j + 1] = (int16_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

VN_INL void vk_gemm_q45k(int64_t nb, const uint8_t *w, int64_t ws, const uint8_t *a, int64_t as, float *y,
                         int64_t ys, const int five) {
    const int bytes = five ? 176 : 144;
    const __m512i m4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
    __m256 acc[VK_GC][VK_GR];
    float summ[VK_GC][VK_GR];
    VN_UNR for (int c = 0; c < VK_GC; c++) VN_UNR for (int r = 0; r < VK_GR; r++) {
        acc[c][r] = _mm256_setzero_ps();
        summ[c][r] = 0.0f;
    }
    for (int64_t ib = 0; ib < nb; ib++) {
        __m512i sumi[VK_GC][VK_GR];
        __m256i mins[VK_GC];
        __m256 dwv[VK_GC], dmv[VK_GC];
        float dmw[VK_GC];
        VN_UNR for (int c = 0; c < VK_GC; c++) {
            const uint8_t *b = w + c * ws + ib * bytes;
            int16_t sc[8], mn16[16];
            vk_scale_min(b + 4, sc, mn16);
            mins[c] = _mm256_loadu_si256((const __m256i *)mn16);
            dwv[c] = _mm256_set1_ps(vn_h2f(b));
            dmw[c] = vn_h2f(b + 2);
            dmv[c] = _mm256_set1_ps(dmw[c]);
            const uint8_t *qs = b + (five ? 48 : 16);
            const __m512i qh = five ? vk_join(vn_ld(b + 16), vn_ld(b + 16)) : _mm512_setzero_si512();
            VN_UNR for (int r = 0; r < VK_GR; r++) sumi[c][r] = _mm512_setzero_si512();
            for (int ch = 0; ch < 4; ch++) { /* elements 64 ch .. 64 ch + 63: the low nibbles, then the high */
                const __m256i raw = vn_ld(qs + 32 * ch);
                __m512i q = _mm512_and_si512(vk_join(raw, _mm256_srli_epi16(raw, 4)), m4);
                if (five) {
                    const __m512i hb = _mm512_and_si512(vk_join(_mm256_srli_epi16(_mm512_castsi512_si256(qh), 2 * ch),
                                                                _mm256_srli_epi16(_mm512_castsi512_si256(qh), 2 * ch + 1)), one);
                    q = _mm512_or_si512(q, _mm512_slli_epi16(hb, 4));
                }
                const __m512i sv = vk_join(_mm256_set1_epi16(sc[2 * ch]), _mm256_set1_epi16(sc[2 * ch + 1]));
                VN_UNR for (int r = 0; r < VK_GR; r++) {
                    const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
                    const __m512i xv = _mm512_loadu_si512((const void *)(x->qs + 64 * ch));
                    sumi[c][r] = _mm512_dpwssd_epi32(sumi[c][r], _mm512_maddubs_epi16(q, xv), sv); /* += madd(., sv) */
                }
            }
        }
        VN_UNR for (int r = 0; r < VK_GR; r++) {
            const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
            const __m256 dx = _mm256_broadcast_ss(&x->d);
            const __m256i bs = _mm256_loadu_si256((const __m256i *)x->bsums);
            VN_UNR for (int c = 0; c < VK_GC; c++) {
                const __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(sumi[c][r]), _mm512_extracti64x4_epi64(sumi[c][r], 1));
                acc[c][r] = _mm256_fmadd_ps(_mm256_mul_ps(dwv[c], dx), _mm256_cvtepi32_ps(s8), acc[c][r]);
                if (five) /* Q5_K: the mins as one exact int per block and a scalar FMA (mm_avx2.c body_q45k) */
                    summ[c][r] = fmaf(-(dmw[c] * x->d), (float)vn_hsum_i32(_mm256_madd_epi16(bs, mins[c])), summ[c][r]);
                else
                    acc[c][r] = _mm256_fnmadd_ps(_mm256_mul_ps(dmv[c], dx), _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, mins[c])), acc[c][r]);
            }
        }
    }
    VN_UNR for (int c = 0; c < VK_GC; c++) VN_UNR for (int r = 0; r < VK_GR; r++)
        y[r * ys + c] = five ? vn_hsum(acc[c][r]) + summ[c][r] : vn_hsum(acc[c][r]);
}

VN_INL void vk_gemm_q6k_body(int64_t nb, const uint8_t *w, int64_t ws, const uint8_t *a, int64_t as, float *y,
                             int64_t ys) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(0x03);
    __m256 acc[VK_GC][VK_GR];
    VN_UNR for (int c = 0; c < VK_GC; c++) VN_UNR for (int r = 0; r < VK_GR; r++) acc[c][r] = _mm256_setzero_ps();
    /* scale selectors: 128-bit quarter j of a zmm gets scale 4 p + j (p = 0, 1), as 16-bit lanes */
    const __m512i sel0 = _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i four = _mm512_set1_epi16(4);
    for (int64_t ib = 0; ib < nb; ib++) {
        __m512i sumi[VK_GC][VK_GR];
        __m256i sc16[VK_GC];
        __m256 dwv[VK_GC];
        VN_UNR for (int c = 0; c < VK_GC; c++) {
            const uint8_t *b = w + c * ws + ib * 210;
            sc16[c] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 192)));
            dwv[c] = _mm256_set1_ps(vn_h2f(b + 208));
            const __m512i scz = _mm512_castsi256_si512(sc16[c]);
            VN_UNR for (int r = 0; r < VK_GR; r++) sumi[c][r] = _mm512_setzero_si512();
            for (int h = 0; h < 2; h++) {
                const __m512i ql = vk_join(vn_ld(b + 64 * h), vn_ld(b + 64 * h + 32));
                const __m256i qh1 = vn_ld(b + 128 + 32 * h);
                const __m512i qh = vk_join(qh1, _mm256_srli_epi16(qh1, 2));
                /* elements 128 h + 0..63 (fields 0, 1), then 128 h + 64..127 (fields 2, 3) */
                const __m512i e01 = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_slli_epi16(_mm512_and_si512(qh, m3), 4));
                const __m512i e23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                                    _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 4), m3), 4));
                const __m512i base = _mm512_add_epi16(sel0, _mm512_set1_epi16((short)(8 * h)));
                const __m512i sv01 = _mm512_permutexvar_epi16(base, scz);
                const __m512i sv23 = _mm512_permutexvar_epi16(_mm512_add_epi16(base, four), scz);
                VN_UNR for (int r = 0; r < VK_GR; r++) {
                    const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
                    const __m512i x01 = _mm512_loadu_si512((const void *)(x->qs + 128 * h));
                    const __m512i x23 = _mm512_loadu_si512((const void *)(x->qs + 128 * h + 64));
                    sumi[c][r] = _mm512_dpwssd_epi32(sumi[c][r], _mm512_maddubs_epi16(e01, x01), sv01);
                    sumi[c][r] = _mm512_dpwssd_epi32(sumi[c][r], _mm512_maddubs_epi16(e23, x23), sv23);
                }
            }
        }
        VN_UNR for (int r = 0; r < VK_GR; r++) {
            const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
            const __m256 dx = _mm256_broadcast_ss(&x->d);
            const __m256i bs = _mm256_loadu_si256((const __m256i *)x->bsums);
            VN_UNR for (int c = 0; c < VK_GC; c++) {
                const __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(sumi[c][r]), _mm512_extracti64x4_epi64(sumi[c][r], 1));
                const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16[c]), 5);
                acc[c][r] = _mm256_fmadd_ps(_mm256_mul_ps(dwv[c], dx), _mm256_cvtepi32_ps(_mm256_sub_epi32(s8, corr)), acc[c][r]);
            }
        }
    }
    VN_UNR for (int c = 0; c < VK_GC; c++) VN_UNR for (int r = 0; r < VK_GR; r++) y[r * ys + c] = vn_hsum(acc[c][r]);
}

/* IQ4_XS (against Q8_K): per element the operations of mm_iq_avx2.c's body_iq4_xs — per superblock 8 int32
 * lanes, each the exact sum over the sub-blocks of (6-bit scale - 32) * (maddubs pairs of |w| and the sign-
 * flipped x, summed by the scale's madd: here vpdpwssd), two sub-blocks per zmm, the halves added at the end;
 * the same f32 product dw * dx and FMA into the row's 8-lane accumulator, the same hsum. (The IQ4_NL values
 * are never 0, and a 0 would give 0 either way: flipping x where w < 0 is sign_epi8(x, w).) */
VN_INL void vk_gemm_iq4xs(int64_t nb, const uint8_t *w, int64_t ws, const uint8_t *a, int64_t as, float *y,
                          int64_t ys) {
    const __m512i kv = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)ub_iq4nl_kv));
    __m256 acc[VK_GC][VK_GR];
    VN_UNR for (int c = 0; c < VK_GC; c++) VN_UNR for (int r = 0; r < VK_GR; r++) acc[c][r] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        __m512i sumi[VK_GC][VK_GR];
        __m256 dwv[VK_GC];
        VN_UNR for (int c = 0; c < VK_GC; c++) {
            const uint8_t *b = w + c * ws + ib * 136;
            uint16_t sh;
            memcpy(&sh, b + 2, 2);
            dwv[c] = _mm256_set1_ps(vn_h2f(b));
            VN_UNR for (int r = 0; r < VK_GR; r++) sumi[c][r] = _mm512_setzero_si512();
            for (int p = 0; p < 4; p++) { /* sub-blocks 2p (low half) and 2p + 1 (high half) */
                const int l0 = (b[4 + p] & 15) | (((sh >> (4 * p)) & 3) << 4);
                const int l1 = (b[4 + p] >> 4) | (((sh >> (4 * p + 2)) & 3) << 4);
                const __m512i q = _mm512_shuffle_epi8(kv, vk_join(vn_nib(b + 8 + 32 * p), vn_nib(b + 24 + 32 * p)));
                const __m512i qa = _mm512_abs_epi8(q);
                const __mmask64 neg = _mm512_movepi8_mask(q);
                const __m512i sv = vk_join(_mm256_set1_epi16((short)(l0 - 32)), _mm256_set1_epi16((short)(l1 - 32)));
                VN_UNR for (int r = 0; r < VK_GR; r++) {
                    const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
                    const __m512i xv = _mm512_loadu_si512((const void *)(x->qs + 64 * p));
                    const __m512i xs = _mm512_mask_sub_epi8(xv, neg, _mm512_setzero_si512(), xv);
                    sumi[c][r] = _mm512_dpwssd_epi32(sumi[c][r], _mm512_maddubs_epi16(qa, xs), sv);
                }
            }
        }
        VN_UNR for (int r = 0; r < VK_GR; r++) {
            const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
            const __m256 dx = _mm256_broadcast_ss(&x->d);
            VN_UNR for (int c = 0; c < VK_GC; c++) {
                const __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(sumi[c][r]), _mm512_extracti64x4_epi64(sumi[c][r], 1));
                acc[c][r] = _mm256_fmadd_ps(_mm256_mul_ps(dwv[c], dx), _mm256_cvtepi32_ps(s8), acc[c][r]);
            }
        }
    }
    VN_UNR for (int c = 0; c < VK_GC; c++) VN_UNR for (int r = 0; r < VK_GR; r++) y[r * ys + c] = vn_hsum(acc[c][r]);
}

VN void vk_gemm_iq4_xs(int64_t nb, const uint8_t *w, int64_t ws, const uint8_t *a, int64_t as, float *y, int64_t ys) {
    vk_gemm_iq4xs(nb, w, ws, a, as, y, ys);
}
VN void vk_gemm_q4_k(int64_t nb, const uint8_t *w, int64_t ws, const uint8_t *a, int64_t as, float *y, int64_t ys) {
    vk_gemm_q45k(nb, w, ws, a, as, y, ys, 0);
}
VN void vk_gemm_q5_k(int64_t nb, const uint8_t *w, int64_t ws, const uint8_t *a, int64_t as, float *y, int64_t ys) {
    vk_gemm_q45k(nb, w, ws, a, as, y, ys, 1);
}
VN void vk_gemm_q6_k(int64_t nb, const uint8_t *w, int64_t ws, const uint8_t *a, int64_t as, float *y, int64_t ys) {
    vk_gemm_q6k_body(nb, w, ws, a, as, y, ys);
}

ub_mm_gemm ub_mm_gemm_avx512(int32_t type) {
    ub_mm_gemm g = {0};
    g.gc = VK_GC, g.gr = VK_GR;
    if (type == UB_T_Q4_K) g.fn = vk_gemm_q4_k;
    else if (type == UB_T_Q5_K) g.fn = vk_gemm_q5_k;
    else if (type == UB_T_Q6_K) g.fn = vk_gemm_q6_k;
    else if (type == UB_T_IQ4_XS) g.fn = vk_gemm_iq4_xs;
    else g = vn_gemm_lookup(type);
    if (type == UB_T_Q8_0) g.fn = 0, g.fnr = qt_gemm_q8_0, g.prep = qt_prep, g.prep_bytes = qt_prep_bytes; /* mm_q8_tile.h */
    return g;
}
#else
ub_mm_dot_fn ub_mm_dot_avx512(int32_t type) {
    (void)type;
    return 0;
}
ub_mm_gemm ub_mm_gemm_avx512(int32_t type) {
    (void)type;
    ub_mm_gemm g = {0};
    return g;
}
#endif
