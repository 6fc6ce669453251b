/* The AVX-512 IQ4_XS panel kernel (F/BW/VL + AVX512_VNNI; layout rp_iq4xs.h): the 16 rows of a panel in the
 * 16 int32 lanes of a zmm, as rp_avx512.c's IQ4_NL kernel. Per super-block, lane j (0..7) and sub-block s: the
 * nibble group of elements 4 j .. 4 j + 3 of the 16 rows (one 64-byte quarter masked or shifted) as unsigned
 * bytes value + 128 by one vpshufb, one vpdpbusd against the activation's 4-byte group broadcast started from
 * -128 * (the group's sum), times the rows' int8 scales (vpmulld) summed into lane j: the exact int32 lanes of
 * rp_iq4xs.h (the same integers as the plain C and AVX2 kernels'); then acc j = fma(d_w * d_x, lane j, acc j) on
 * 16 lanes and the 8-lane sum at the end. (Against the maddubs + vpdpwssd form with the sign moved onto the
 * activation: 2.5 instead of 4.5 shared operations per group, the same 3 per activation row; 1 thread, CPU time,
 * 896 x 4864: n = 1 1.12-1.16x, n = 32 1.03-1.06x.) Every row's operations are the same for any nr (1..6 rows,
 * one body), so any tile, thread split and back-end give the same bits. Decode-sized calls (nr <= 3, the panel
 * from DRAM) prefetch 2 block columns ahead. Chosen at run time via rp_avx512.c's lookup. */
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

/* y[r * ys + c], c < 16, r < nr: panel p (nb block columns of 2240 bytes) . Q8_K rows a + r * as (read only).
 * Unsigned bytes u = value + 128 (one vpshufb of the nibbles through the values ^ 0x80) against the activation's
 * 4-byte group broadcast, vpdpbusd started from -128 * (the group's sum, corr below), give the exact int32 dot
 * of the group of 16 rows; times the rows' scales (vpmulld) into lane j: rp_iq4xs.h's exact int32 lanes. */
XS_INL void xs_body(int64_t nb, const uint8_t *p, const uint8_t *a, int64_t as, const int nr, float *y, int64_t ys) {
    const __m512i kvu = _mm512_broadcast_i32x4(
        _mm_xor_si128(_mm_loadu_si128((const __m128i *)ub_iq4nl_kv), _mm_set1_epi8((char)0x80)));
    const __m512i m4 = _mm512_set1_epi8(0x0F), u128 = _mm512_set1_epi8((char)0x80);
    __m512 acc[UB_MM_RT][8];
    XS_UNR for (int r = 0; r < nr; r++) XS_UNR for (int j = 0; j < 8; j++) acc[r][j] = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = p + ib * RP_XS_BB;
        if (nr <= 3)
            for (int l = 0; l < RP_XS_BB; l += 64) _mm_prefetch((const char *)(b + 2 * RP_XS_BB + l), _MM_HINT_T0);
        /* corr[r][8 s + j] = -128 * (sum of the activation's elements 32 s + 4 j .. + 3) */
        int32_t corr[UB_MM_RT][64] __attribute__((aligned(64)));
        XS_UNR for (int r = 0; r < nr; r++) {
            const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
            XS_UNR for (int g = 0; g < 4; g++) {
                const __m512i t = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u128, _mm512_loadu_si512((const void *)(x->qs + 64 * g)));
                _mm512_store_si512((void *)(corr[r] + 16 * g), _mm512_sub_epi32(_mm512_setzero_si512(), t));
            }
        }
        __m512i sc[8]; /* sub-block s: the 16 rows' scales as int32 */
        XS_UNR for (int s = 0; s < 8; s++) sc[s] = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(b + RP_XS_SC + 16 * s)));
        const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(b + RP_XS_D)));
        __m512 d[UB_MM_RT];
        XS_UNR for (int r = 0; r < nr; r++) d[r] = _mm512_mul_ps(dw, _mm512_set1_ps(((const ub_act_q8_k *)(a + r * as) + ib)->d));
        for (int j = 0; j < 8; j++) { /* lane j: elements 4 j .. 4 j + 3 of every sub-block */
            __m512i lane[UB_MM_RT];
            XS_UNR for (int r = 0; r < nr; r++) lane[r] = _mm512_setzero_si512();
            XS_UNR for (int s = 0; s < 8; s++) {
                const __m512i raw = _mm512_load_si512((const void *)(b + 256 * s + 64 * (j >> 1)));
                const __m512i u = _mm512_shuffle_epi8(kvu, _mm512_and_si512(j & 1 ? _mm512_srli_epi16(raw, 4) : raw, m4));
                XS_UNR for (int r = 0; r < nr; r++) {
                    const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
                    const __m512i t = _mm512_dpbusd_epi32(_mm512_set1_epi32(corr[r][8 * s + j]), u, xs_bc32(x->qs + 32 * s + 4 * j));
                    lane[r] = _mm512_add_epi32(lane[r], _mm512_mullo_epi32(t, sc[s]));
                }
            }
            XS_UNR for (int r = 0; r < nr; r++) acc[r][j] = _mm512_fmadd_ps(d[r], _mm512_cvtepi32_ps(lane[r]), acc[r][j]);
        }
    }
    XS_UNR for (int r = 0; r < nr; r++) {
        const __m512 t = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(acc[r][0], acc[r][4]), _mm512_add_ps(acc[r][2], acc[r][6])),
                                       _mm512_add_ps(_mm512_add_ps(acc[r][1], acc[r][5]), _mm512_add_ps(acc[r][3], acc[r][7])));
        _mm512_storeu_ps(y + r * ys, t);
    }
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
