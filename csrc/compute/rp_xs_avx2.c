/* The AVX2 IQ4_XS panel kernel (AVX2 + FMA + F16C; layout rp_iq4xs.h), also what the avxvnni back-end runs on
 * these panels. Each 32-byte half of a 64-byte nibble quarter is rows 0..7 or 8..15 (one ymm of 8 int32 lanes).
 * Per sub-block and half: maddubs(|value|, sign(x, value)) + madd by ones over the 4 quarters (pairs below 2^15:
 * |value|, |x| <= 127) give the 8 rows' exact int32 sub-block sums; times their int8 scales (vpmulld) into the
 * super-block's exact isum; then the float step of rp_iq4xs.h (acc + (d_w * d_x) * isum: no fma). The same
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
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256 acc[2][3];
    UNR for (int r = 0; r < g; r++) acc[0][r] = acc[1][r] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = p + ib * RP_XS_BB;
        if (pf)
            for (int l = 0; l < RP_XS_BB; l += 64) _mm_prefetch((const char *)(b + 2 * RP_XS_BB + l), _MM_HINT_T0);
        for (int hf = 0; hf < 2; hf++) { /* rows 8 hf .. 8 hf + 7 */
            __m256i tot[3];
            UNR for (int r = 0; r < g; r++) tot[r] = _mm256_setzero_si256();
            for (int s = 0; s < 8; s++) {
                __m256i isum[3];
                UNR for (int r = 0; r < g; r++) isum[r] = _mm256_setzero_si256();
                UNR for (int h = 0; h < 4; h++) {
                    const __m256i raw = ld(b + 256 * s + 64 * h + 32 * hf);
                    const __m256i wl = _mm256_shuffle_epi8(kv, _mm256_and_si256(raw, m4));
                    const __m256i wh = _mm256_shuffle_epi8(kv, _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4));
                    const __m256i al = _mm256_sign_epi8(wl, wl), ah = _mm256_sign_epi8(wh, wh);
                    UNR for (int r = 0; r < g; r++) {
                        const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
                        const __m256i xl = xs_bc32(x->qs + 32 * s + 8 * h), xh = xs_bc32(x->qs + 32 * s + 8 * h + 4);
                        const __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(al, _mm256_sign_epi8(xl, wl)), ones);
                        const __m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(ah, _mm256_sign_epi8(xh, wh)), ones);
                        isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(pl, ph));
                    }
                }
                const __m256i sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b + RP_XS_SC + 16 * s + 8 * hf)));
                UNR for (int r = 0; r < g; r++) tot[r] = _mm256_add_epi32(tot[r], _mm256_mullo_epi32(isum[r], sc));
            }
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + RP_XS_D + 16 * hf)));
            UNR for (int r = 0; r < g; r++) {
                const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
                acc[hf][r] = _mm256_add_ps(acc[hf][r], _mm256_mul_ps(_mm256_mul_ps(dw, _mm256_set1_ps(x->d)), _mm256_cvtepi32_ps(tot[r])));
            }
        }
    }
    UNR for (int r = 0; r < g; r++) {
        _mm256_storeu_ps(y + r * ys, acc[0][r]);
        _mm256_storeu_ps(y + r * ys + 8, acc[1][r]);
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
