/* The AVX2 IQ4_XS panel kernel (AVX2 + FMA + F16C; layout rp_iq4xs.h), also what the avxvnni back-end runs on
 * these panels. Each 32-byte half of a 64-byte nibble quarter is rows 0..7 or 8..15 (one ymm of 8 int32 lanes).
 * Per half, lane j (0..7) and sub-block s: maddubs(|value|, sign(x, value)) of the group of elements
 * 4 j .. 4 j + 3 (pairs below 2^15: |value|, |x| <= 127), madd by the rows' scales as int16 pairs: the exact
 * int32 lanes of rp_iq4xs.h; then acc j = fma(d_w * d_x, lane j, acc j) and the 8-lane sum at the end. The same
 * integers and float steps as the plain C and AVX-512 kernels: the same bits. Rows are taken in groups of up to
 * 3, each group streaming the panel once; decode-sized calls prefetch 2 block columns ahead. */
#include "rp_iq4xs.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
#include "mm_avx2_util.h"
#include "mm_iq.h"

INL AVX2 __m256i xs_bc32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* y[r * ys + c], c < 16, r < g (g <= 3): panel p (nb block columns of 2240 bytes) . Q8_K rows a + r * as */
INL AVX2 void xs_body(int64_t nb, const uint8_t *p, const uint8_t *a, int64_t as, const int g, const int pf,
                      float *y, int64_t ys) {
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)ub_iq4nl_kv));
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[2][3][8];
    UNR for (int hf = 0; hf < 2; hf++) UNR for (int r = 0; r < g; r++) UNR for (int j = 0; j < 8; j++) acc[hf][r][j] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = p + ib * RP_XS_BB;
        if (pf)
            for (int l = 0; l < RP_XS_BB; l += 64) _mm_prefetch((const char *)(b + 2 * RP_XS_BB + l), _MM_HINT_T0);
        for (int hf = 0; hf < 2; hf++) { /* rows 8 hf .. 8 hf + 7 */
            __m256i sc2[8]; /* sub-block s: the 8 rows' scales as int16 pairs (sc, sc) */
            UNR for (int s = 0; s < 8; s++) {
                const __m128i v = _mm_loadl_epi64((const __m128i *)(b + RP_XS_SC + 16 * s + 8 * hf));
                sc2[s] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(v, v));
            }
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + RP_XS_D + 16 * hf)));
            __m256 d[3];
            UNR for (int r = 0; r < g; r++) d[r] = _mm256_mul_ps(dw, _mm256_set1_ps(((const ub_act_q8_k *)(a + r * as) + ib)->d));
            for (int j = 0; j < 8; j++) { /* lane j: elements 4 j .. 4 j + 3 of every sub-block */
                __m256i lane[3];
                UNR for (int r = 0; r < g; r++) lane[r] = _mm256_setzero_si256();
                UNR for (int s = 0; s < 8; s++) {
                    const __m256i raw = ld(b + 256 * s + 64 * (j >> 1) + 32 * hf);
                    const __m256i q = _mm256_shuffle_epi8(kv, _mm256_and_si256(j & 1 ? _mm256_srli_epi16(raw, 4) : raw, m4));
                    const __m256i qa = _mm256_sign_epi8(q, q);
                    UNR for (int r = 0; r < g; r++) {
                        const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
                        const __m256i xv = xs_bc32(x->qs + 32 * s + 4 * j);
                        lane[r] = _mm256_add_epi32(lane[r], _mm256_madd_epi16(_mm256_maddubs_epi16(qa, _mm256_sign_epi8(xv, q)), sc2[s]));
                    }
                }
                UNR for (int r = 0; r < g; r++) acc[hf][r][j] = _mm256_fmadd_ps(d[r], _mm256_cvtepi32_ps(lane[r]), acc[hf][r][j]);
            }
        }
    }
    UNR for (int hf = 0; hf < 2; hf++) UNR for (int r = 0; r < g; r++) {
        __m256 (*t)[8] = acc[hf];
        const __m256 v = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(t[r][0], t[r][4]), _mm256_add_ps(t[r][2], t[r][6])),
                                       _mm256_add_ps(_mm256_add_ps(t[r][1], t[r][5]), _mm256_add_ps(t[r][3], t[r][7])));
        _mm256_storeu_ps(y + r * ys + 8 * hf, v);
    }
}

/* rp_internal.h's panel kernel contract: rows in groups of 3, then the rest */
static AVX2 void rp_panel_iq4xs_avx2(int64_t nb, const uint8_t *p, const uint8_t *a, int64_t as, int nr, float *y,
                                     int64_t ys) {
    const int pf = nr <= 3;
    for (int r0 = 0; r0 < nr; r0 += 3) {
        const int g = nr - r0 < 3 ? nr - r0 : 3;
        const uint8_t *ar = a + r0 * as;
        float *yr = y + r0 * ys;
        if (g == 3) xs_body(nb, p, ar, as, 3, pf, yr, ys);
        else if (g == 2) xs_body(nb, p, ar, as, 2, pf, yr, ys);
        else xs_body(nb, p, ar, as, 1, pf, yr, ys);
    }
}

ub_rp_panel_fn ub_rp_xs_avx2(int32_t type) { return type == UB_T_IQ4_XS ? rp_panel_iq4xs_avx2 : 0; }
#else
ub_rp_panel_fn ub_rp_xs_avx2(int32_t type) {
    (void)type;
    return 0;
}
#endif
