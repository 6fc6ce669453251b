/* The AVX-512 IQ4_XS panel kernel (F/BW/VL + AVX512_VNNI; layout rp_iq4xs.h): the 16 rows of a panel in the
 * 16 int32 lanes of a zmm, as rp_avx512.c's IQ4_NL kernel. Per sub-block of 32: 8 zmm of unsigned bytes
 * u = value + 128 (one vpshufb of the nibbles through the 16 values ^ 0x80), and 8 vpdpbusd against the
 * activation's 4-byte groups broadcast, started from -128 * sum(x) (the two 16-element bsums of the Q8_K row):
 * the exact int32 sub-block sums of value * x of the 16 rows; times the 16 rows' int8 scales (vpmulld) into
 * the super-block's exact int32 isum. Then the float step of rp_iq4xs.h (acc + (d_w * d_x) * isum: no fma) on
 * 16 lanes. Every row's operations are the same for any nr (1..6 rows, one body), so any tile, thread split
 * and back-end give the same bits. Decode-sized calls (nr <= 3, the panel from DRAM) prefetch 2 block columns
 * ahead. Chosen at run time via rp_avx512.c's lookup. */
#include "rp_iq4xs.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
#include <immintrin.h>
#include <string.h>

#include "mm_iq.h"

#define XS_TGT "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
#define XS_INL static inline __attribute__((always_inline, target(XS_TGT)))
#define XS_UNR _Pragma("GCC unroll 8")

XS_INL __m512i xs_bc32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* y[r * ys + c], c < 16, r < nr: panel p (nb block columns of 2240 bytes) . Q8_K rows a + r * as */
XS_INL void xs_body(int64_t nb, const uint8_t *p, const uint8_t *a, int64_t as, const int nr, float *y, int64_t ys) {
    const __m512i kvu = _mm512_broadcast_i32x4(
        _mm_xor_si128(_mm_loadu_si128((const __m128i *)ub_iq4nl_kv), _mm_set1_epi8((char)0x80)));
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc[UB_MM_RT];
    XS_UNR for (int r = 0; r < nr; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = p + ib * RP_XS_BB;
        if (nr <= 3) /* past the panel's end this is the next panel's start; a prefetch never faults */
            for (int l = 0; l < RP_XS_BB; l += 64) _mm_prefetch((const char *)(b + 2 * RP_XS_BB + l), _MM_HINT_T0);
        __m512i tot[UB_MM_RT];
        XS_UNR for (int r = 0; r < nr; r++) tot[r] = _mm512_setzero_si512();
        for (int s = 0; s < 8; s++) {
            const uint8_t *n = b + 256 * s;
            __m512i u[8];
            XS_UNR for (int h = 0; h < 4; h++) {
                const __m512i raw = _mm512_load_si512((const void *)(n + 64 * h));
                u[2 * h] = _mm512_shuffle_epi8(kvu, _mm512_and_si512(raw, m4));
                u[2 * h + 1] = _mm512_shuffle_epi8(kvu, _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4));
            }
            const __m512i sc = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(b + RP_XS_SC + 16 * s)));
            XS_UNR for (int r = 0; r < nr; r++) {
                const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
                const int8_t *xs = x->qs + 32 * s;
                __m512i s0 = _mm512_set1_epi32(-128 * ((int32_t)x->bsums[2 * s] + (int32_t)x->bsums[2 * s + 1]));
                __m512i s1 = _mm512_setzero_si512();
                XS_UNR for (int g = 0; g < 4; g++) {
                    s0 = _mm512_dpbusd_epi32(s0, u[g], xs_bc32(xs + 4 * g));
                    s1 = _mm512_dpbusd_epi32(s1, u[g + 4], xs_bc32(xs + 16 + 4 * g));
                }
                tot[r] = _mm512_add_epi32(tot[r], _mm512_mullo_epi32(_mm512_add_epi32(s0, s1), sc));
            }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(b + RP_XS_D)));
        XS_UNR for (int r = 0; r < nr; r++) {
            const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
            acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_mul_ps(dw, _mm512_set1_ps(x->d)), _mm512_cvtepi32_ps(tot[r])));
        }
    }
    XS_UNR for (int r = 0; r < nr; r++) _mm512_storeu_ps(y + r * ys, acc[r]);
}

/* rp_internal.h's panel kernel contract (p: 64-byte aligned, as every block column is) */
static __attribute__((target(XS_TGT))) void rp_panel_iq4xs_avx512(int64_t nb, const uint8_t *p, const uint8_t *a,
                                                                  int64_t as, int nr, float *y, int64_t ys) {
    switch (nr) {
    case 1: xs_body(nb, p, a, as, 1, y, ys); break;
    case 2: xs_body(nb, p, a, as, 2, y, ys); break;
    case 3: xs_body(nb, p, a, as, 3, y, ys); break;
    case 4: xs_body(nb, p, a, as, 4, y, ys); break;
    case 5: xs_body(nb, p, a, as, 5, y, ys); break;
    default: xs_body(nb, p, a, as, 6, y, ys); break;
    }
}

ub_rp_panel_fn ub_rp_xs_avx512(int32_t type) { return type == UB_T_IQ4_XS ? rp_panel_iq4xs_avx512 : 0; }
#else
ub_rp_panel_fn ub_rp_xs_avx512(int32_t type) {
    (void)type;
    return 0;
}
#endif
