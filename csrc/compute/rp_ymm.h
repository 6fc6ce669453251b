/* The 256-bit IQ4_NL panel kernel (layout in rp_iq4nl.c): ONE source compiled twice, by rp_avx2.c (AVX2:
 * maddubs(|value|, sign(x, value)) + madd by ones) and by rp_avxvnni.c (AVX-VNNI: vpdpbusd of value + 128
 * against x, less 128 * sum(x)): both form the same exact int32 sum of value * x per row and block, then
 * the float step of rp_iq4nl.c, so they give the AVX-512 kernel's (and the plain C kernel's) bits.
 * Each 32-byte half of a 64-byte nibble quarter is rows 0..7 or 8..15 (one ymm of 8 int32 lanes); rows are
 * taken in groups of up to 3 (16 ymm registers), each group streaming the panel (from cache) once.
 *
 * The including file defines RP_TGT (target attribute), RP_VNNI (1: vpdpbusd), RP_DPBUSD(c, u, s) when
 * RP_VNNI, and RP_NAME (the kernel's name). */
#include <immintrin.h>
#include <string.h>

#include "mm_iq.h"
#include "rp_internal.h"

#define RP_INL static inline __attribute__((always_inline, target(RP_TGT)))
#define RP_UNR _Pragma("GCC unroll 8")

RP_INL __m256i rp_bc32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* y[r * ys + c], c < 16, r < g: panel p (nb block columns of 288 bytes) . Q8_0 rows a + r * as */
RP_INL void rp_ymm_body(int64_t nb, const uint8_t *p, const uint8_t *a, int64_t as, const int g, float *y,
                        int64_t ys) {
    const __m128i kv128 = _mm_loadu_si128((const __m128i *)ub_iq4nl_kv);
#if RP_VNNI
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_xor_si128(kv128, _mm_set1_epi8((char)0x80)));
#else
    const __m256i kv = _mm256_broadcastsi128_si256(kv128), ones = _mm256_set1_epi16(1);
#endif
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[2][3];
    RP_UNR for (int r = 0; r < g; r++) acc[0][r] = acc[1][r] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = p + ib * 288;
#if !RP_VNNI
        /* one row (B = 1) streams the panels from memory: the block column 6 ahead, 1.7 KB (past the panel's
         * end the next panel's start; a prefetch never faults). 40 DRAM-resident 4864 x 896 matrices, 1 thread,
         * Zen 3: 13.7 -> 17.3 GB/s (2 columns ahead: 5 % faster, 8: 16.3) */
        if (g == 1)
            for (int l = 0; l < 288; l += 64) _mm_prefetch((const char *)(b + 6 * 288 + l), _MM_HINT_T0);
#endif
        __m256i init[3];
        RP_UNR for (int r = 0; r < g; r++) {
#if RP_VNNI
            const ub_act_q8_0 *x = (const ub_act_q8_0 *)(a + r * as) + ib;
            __m256i s = RP_DPBUSD(_mm256_setzero_si256(), _mm256_set1_epi8((char)0x80),
                                  _mm256_loadu_si256((const __m256i *)x->qs));
            s = _mm256_add_epi32(s, _mm256_permute2x128_si256(s, s, 1));
            s = _mm256_add_epi32(s, _mm256_shuffle_epi32(s, 0x4E));
            s = _mm256_add_epi32(s, _mm256_shuffle_epi32(s, 0xB1));
            init[r] = _mm256_sub_epi32(_mm256_setzero_si256(), s);
#else
            init[r] = _mm256_setzero_si256();
#endif
        }
        RP_UNR for (int s = 0; s < 2; s++) { /* rows 8s .. 8s + 7 */
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + 16 * s)));
            __m256i isum[3];
            RP_UNR for (int r = 0; r < g; r++) isum[r] = init[r];
            RP_UNR for (int h = 0; h < 4; h++) {
                const __m256i raw = _mm256_loadu_si256((const __m256i *)(b + 32 + 64 * h + 32 * s));
                const __m256i wl = _mm256_shuffle_epi8(kv, _mm256_and_si256(raw, m4));
                const __m256i wh = _mm256_shuffle_epi8(kv, _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4));
#if !RP_VNNI
                const __m256i al = _mm256_sign_epi8(wl, wl), ah = _mm256_sign_epi8(wh, wh);
#endif
                RP_UNR for (int r = 0; r < g; r++) {
                    const ub_act_q8_0 *x = (const ub_act_q8_0 *)(a + r * as) + ib;
                    const __m256i xl = rp_bc32(x->qs + 8 * h), xh = rp_bc32(x->qs + 8 * h + 4);
#if RP_VNNI
                    isum[r] = RP_DPBUSD(isum[r], wl, xl);
                    isum[r] = RP_DPBUSD(isum[r], wh, xh);
#else
                    const __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(al, _mm256_sign_epi8(xl, wl)), ones);
                    const __m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(ah, _mm256_sign_epi8(xh, wh)), ones);
                    isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(pl, ph));
#endif
                }
            }
            RP_UNR for (int r = 0; r < g; r++) {
                const ub_act_q8_0 *x = (const ub_act_q8_0 *)(a + r * as) + ib;
                acc[s][r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(x->d)), _mm256_cvtepi32_ps(isum[r]), acc[s][r]);
            }
        }
    }
    RP_UNR for (int r = 0; r < g; r++) {
        _mm256_storeu_ps(y + r * ys, acc[0][r]);
        _mm256_storeu_ps(y + r * ys + 8, acc[1][r]);
    }
}

/* rp_internal.h's panel kernel contract: rows in groups of 3, then the rest */
static __attribute__((target(RP_TGT))) void RP_NAME(int64_t nb, const uint8_t *p, const uint8_t *a, int64_t as,
                                                     int nr, float *y, int64_t ys) {
    for (int r0 = 0; r0 < nr; r0 += 3) {
        const int g = nr - r0 < 3 ? nr - r0 : 3;
        const uint8_t *ar = a + r0 * as;
        float *yr = y + r0 * ys;
        if (g == 3) rp_ymm_body(nb, p, ar, as, 3, yr, ys);
        else if (g == 2) rp_ymm_body(nb, p, ar, as, 2, yr, ys);
        else rp_ymm_body(nb, p, ar, as, 1, yr, ys);
    }
}
