/* The AVX-512 panel kernels (F/BW/VL + AVX512_VNNI): IQ4_NL panels of 16 rows (layout in rp_iq4nl.c), the
 * 16 rows of a panel in the 16 int32 lanes of a zmm. Per block: the 8 groups of 4 elements are 8 zmm of
 * unsigned bytes u = value + 128 (one vpshufb of the nibbles through the 16 values ^ 0x80), and
 * isum = sum_g vpdpbusd(u_g, x_g broadcast) - 128 * sum(x) is the exact int32 sum of value * x of each row;
 * then the float step of rp_iq4nl.c (acc = fma(d_w * d_x, isum, acc)) on 16 lanes. Chosen at run time
 * (matmul.c via ub_rp_panel_for). The Q4_K / Q6_K panel kernels are rp_kq_avx512.c's. */
#include "rp_kquant.h"
#include "rp_iq4xs.h"
#include "rp_q5_0.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
#include <immintrin.h>
#include <string.h>

#include "mm_iq.h"

#define RP_TGT "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
#define RP_INL static inline __attribute__((always_inline, target(RP_TGT)))
#define RP_UNR _Pragma("GCC unroll 8")

RP_INL int32_t rp_rd32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* 128 * sum(x[0..31]) in every lane of a zmm (exact) */
RP_INL __m512i rp_corr128(const int8_t *qs) {
    __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8((char)0x80),
                                    _mm256_loadu_si256((const __m256i *)qs));
    s = _mm256_add_epi32(s, _mm256_permute2x128_si256(s, s, 1));
    s = _mm256_add_epi32(s, _mm256_shuffle_epi32(s, 0x4E));
    s = _mm256_add_epi32(s, _mm256_shuffle_epi32(s, 0xB1));
    return _mm512_broadcastd_epi32(_mm256_castsi256_si128(s));
}

/* y[r * ys + c], c < 16, r < nr: panel p (nb block columns of 288 bytes) . Q8_0 rows a + r * as */
RP_INL void rp_iq4nl_body(int64_t nb, const uint8_t *p, const uint8_t *a, int64_t as, const int nr, float *y,
                          int64_t ys) {
    const __m512i kvu = _mm512_broadcast_i32x4(
        _mm_xor_si128(_mm_loadu_si128((const __m128i *)ub_iq4nl_kv), _mm_set1_epi8((char)0x80)));
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc[UB_MM_RT];
    RP_UNR for (int r = 0; r < nr; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = p + ib * 288;
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)b));
        __m512i u[8];
        RP_UNR for (int h = 0; h < 4; h++) {
            const __m512i raw = _mm512_loadu_si512((const void *)(b + 32 + 64 * h));
            u[2 * h] = _mm512_shuffle_epi8(kvu, _mm512_and_si512(raw, m4));
            u[2 * h + 1] = _mm512_shuffle_epi8(kvu, _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4));
        }
        RP_UNR for (int r = 0; r < nr; r++) {
            const ub_act_q8_0 *x = (const ub_act_q8_0 *)(a + r * as) + ib;
            __m512i s0 = _mm512_sub_epi32(_mm512_setzero_si512(), rp_corr128(x->qs)), s1 = _mm512_setzero_si512();
            RP_UNR for (int g = 0; g < 4; g++) {
                s0 = _mm512_dpbusd_epi32(s0, u[g], _mm512_set1_epi32(rp_rd32(x->qs + 4 * g)));
                s1 = _mm512_dpbusd_epi32(s1, u[g + 4], _mm512_set1_epi32(rp_rd32(x->qs + 4 * g + 16)));
            }
            const __m512 isum = _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1));
            acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(x->d)), isum, acc[r]);
        }
    }
    RP_UNR for (int r = 0; r < nr; r++) _mm512_storeu_ps(y + r * ys, acc[r]);
}

static __attribute__((target(RP_TGT))) void rp_panel_iq4nl(int64_t nb, const uint8_t *p, const uint8_t *a,
                                                            int64_t as, int nr, float *y, int64_t ys) {
    switch (nr) {
    case 1: rp_iq4nl_body(nb, p, a, as, 1, y, ys); break;
    case 2: rp_iq4nl_body(nb, p, a, as, 2, y, ys); break;
    case 3: rp_iq4nl_body(nb, p, a, as, 3, y, ys); break;
    case 4: rp_iq4nl_body(nb, p, a, as, 4, y, ys); break;
    case 5: rp_iq4nl_body(nb, p, a, as, 5, y, ys); break;
    default: rp_iq4nl_body(nb, p, a, as, 6, y, ys); break;
    }
}

ub_rp_panel_fn ub_rp_panel_avx512(int32_t type) {
    if (type == UB_T_Q5_0) return ub_rp_q5_avx512(type);
    if (type == UB_T_IQ4_NL) return rp_panel_iq4nl;
    return type == UB_T_IQ4_XS ? ub_rp_xs_avx512(type) : ub_rp_kq_avx512(type);
}
#else
ub_rp_panel_fn ub_rp_panel_avx512(int32_t type) {
    (void)type;
    return 0;
}
#endif
