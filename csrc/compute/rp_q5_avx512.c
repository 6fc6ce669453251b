/* The AVX-512 Q5_0 panel kernel (F/BW/VL + AVX512_VNNI; layout rp_q5_0.h): the 16 rows of a panel in the 16
 * int32 lanes of a zmm. Per block: 8 zmm of the unsigned 5-bit codes e (group g = elements 4g..4g+3 of every
 * row: the nibbles masked or shifted, | the fifth-bit plane shifted to bit 4), and 8 vpdpbusd against the
 * activation's 4-byte groups broadcast, started from -16 * sum(x): the 16 rows' exact int32 sums of
 * (e - 16) * x. Then the float step of rp_q5_0.h (acc + (d_w * d_x) * isum: no fma) on 16 lanes. Every row's
 * operations are the same for any nr (1..6 rows, one body), so any tile, thread split and back-end give the
 * same bits. Decode-sized calls (nr <= 3, the panel from DRAM) prefetch 2 block columns ahead. Chosen at run
 * time via rp_avx512.c's lookup. */
#include "rp_q5_0.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
#include <immintrin.h>
#include <string.h>

#define Q5_TGT "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
#define Q5_INL static inline __attribute__((always_inline, target(Q5_TGT)))
#define Q5_UNR _Pragma("GCC unroll 8")

Q5_INL __m512i q5_bc32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* -16 * sum(x[0..31]) in every lane of a zmm (exact); x: 32 int8 (read only) */
Q5_INL __m512i q5_corr(const int8_t *x) {
    __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(16), _mm256_loadu_si256((const __m256i *)x));
    s = _mm256_add_epi32(s, _mm256_permute2x128_si256(s, s, 1));
    s = _mm256_add_epi32(s, _mm256_shuffle_epi32(s, 0x4E));
    s = _mm256_add_epi32(s, _mm256_shuffle_epi32(s, 0xB1));
    return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_broadcastd_epi32(_mm256_castsi256_si128(s)));
}

/* the fifth bits of group g (0x10 or 0) from the plane hp */
Q5_INL __m512i q5_hi(__m512i hp, const int g) {
    const __m512i b4 = _mm512_set1_epi8(0x10);
    if (g < 4) return _mm512_and_si512(_mm512_slli_epi16(hp, 4 - g), b4);
    if (g == 4) return _mm512_and_si512(hp, b4);
    return _mm512_and_si512(_mm512_srli_epi16(hp, g - 4), b4);
}

/* y[r * ys + c], c < 16, r < nr: panel p (nb block columns of 352 bytes, read only) . Q8_0 rows a + r * as */
Q5_INL void q5_body(int64_t nb, const uint8_t *p, const uint8_t *a, int64_t as, const int nr, float *y, int64_t ys) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc[UB_MM_RT];
    Q5_UNR for (int r = 0; r < nr; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = p + ib * RP_Q5_BB;
        if (nr <= 3) /* past the panel's end this is the next panel's start; a prefetch never faults */
            for (int l = 0; l < RP_Q5_BB; l += 64) _mm_prefetch((const char *)(b + 2 * RP_Q5_BB + l), _MM_HINT_T0);
        const __m512i hp = _mm512_loadu_si512((const void *)(b + RP_Q5_H));
        __m512i u[8];
        Q5_UNR for (int h = 0; h < 4; h++) {
            const __m512i raw = _mm512_loadu_si512((const void *)(b + 64 * h));
            u[2 * h] = _mm512_or_si512(_mm512_and_si512(raw, m4), q5_hi(hp, 2 * h));
            u[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(raw, 4), m4), q5_hi(hp, 2 * h + 1));
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + RP_Q5_D)));
        Q5_UNR for (int r = 0; r < nr; r++) {
            const ub_act_q8_0 *x = (const ub_act_q8_0 *)(a + r * as) + ib;
            __m512i s0 = q5_corr(x->qs), s1 = _mm512_setzero_si512();
            Q5_UNR for (int g = 0; g < 4; g++) {
                s0 = _mm512_dpbusd_epi32(s0, u[g], q5_bc32(x->qs + 4 * g));
                s1 = _mm512_dpbusd_epi32(s1, u[g + 4], q5_bc32(x->qs + 16 + 4 * g));
            }
            const __m512 isum = _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1));
            acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_mul_ps(dw, _mm512_set1_ps(x->d)), isum));
        }
    }
    Q5_UNR for (int r = 0; r < nr; r++) _mm512_storeu_ps(y + r * ys, acc[r]);
}

/* rp_internal.h's panel kernel contract */
static __attribute__((target(Q5_TGT))) void rp_panel_q5_0_avx512(int64_t nb, const uint8_t *p, const uint8_t *a,
                                                                 int64_t as, int nr, float *y, int64_t ys) {
    switch (nr) {
    case 1: q5_body(nb, p, a, as, 1, y, ys); break;
    case 2: q5_body(nb, p, a, as, 2, y, ys); break;
    case 3: q5_body(nb, p, a, as, 3, y, ys); break;
    case 4: q5_body(nb, p, a, as, 4, y, ys); break;
    case 5: q5_body(nb, p, a, as, 5, y, ys); break;
    default: q5_body(nb, p, a, as, 6, y, ys); break;
    }
}

ub_rp_panel_fn ub_rp_q5_avx512(int32_t type) { return type == UB_T_Q5_0 ? rp_panel_q5_0_avx512 : 0; }
#else
ub_rp_panel_fn ub_rp_q5_avx512(int32_t type) {
    (void)type;
    return 0;
}
#endif
