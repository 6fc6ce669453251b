/* The AVX-512 IQ4_XS panel kernel (F/BW/VL + AVX512_VNNI; layout rp_iq4xs.h): the 16 rows of a panel in the
 * 16 int32 lanes of a zmm, as rp_avx512.c's IQ4_NL kernel. Per super-block, lane j (0..7), sub-block s and
 * activation row, the nibble group of elements 4 j .. 4 j + 3 of the 16 rows (one 64-byte quarter masked or
 * shifted) against the activation's 4-byte group broadcast gives the exact int32 group dot times the rows' scale,
 * summed into lane j: the exact int32 lanes of rp_iq4xs.h (the same integers as the plain C and AVX2 kernels');
 * then acc j = fma(d_w * d_x, lane j, acc j) on 16 lanes and the 8-lane sum at the end. Two forms of the integer
 * step (the same integers, so the same bits): decode-sized tiles (nr <= 3) xs_body, the offset trick (2.5 shared
 * instructions per group instead of 4.5), wider tiles xs_body_s, the sign form. Every row's operations are the
 * same for any nr, tile, thread split and back-end. Decode-sized calls (the panel from DRAM) prefetch 2 block
 * columns ahead. Chosen at run time via rp_avx512.c's lookup. */
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

/* d[r] = the 16 rows' f16 d of block column b times activation row r's d of super-block ib, r < nr */
XS_INL void xs_dprod(const uint8_t *b, const uint8_t *a, int64_t as, int64_t ib, const int nr, __m512 *d) {
    const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(b + RP_XS_D)));
    XS_UNR for (int r = 0; r < nr; r++) d[r] = _mm512_mul_ps(dw, _mm512_set1_ps(((const ub_act_q8_k *)(a + r * as) + ib)->d));
}

/* y[r * ys + c] = hsum_float_8's order over the 8 lane accumulators acc[r][0..7] of rows c < 16, r < nr */
XS_INL void xs_store(__m512 (*acc)[8], const int nr, float *y, int64_t ys) {
    XS_UNR for (int r = 0; r < nr; r++) {
        const __m512 t = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(acc[r][0], acc[r][4]), _mm512_add_ps(acc[r][2], acc[r][6])),
                                       _mm512_add_ps(_mm512_add_ps(acc[r][1], acc[r][5]), _mm512_add_ps(acc[r][3], acc[r][7])));
        _mm512_storeu_ps(y + r * ys, t);
    }
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
        if (nr <= 3) /* past the panel's end this is the next panel's start; a prefetch never faults */
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
        __m512 d[UB_MM_RT];
        xs_dprod(b, a, as, ib, nr, d);
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
    xs_store(acc, nr, y, ys);
}

/* The same y as xs_body for the wider row tiles (nr >= 4: its per-row work is the same 3 instructions, the
 * shared part is amortised and this form runs a little faster there): |value| by one vpshufb through the
 * |values|, value < 0 <=> nibble < 8 read from bit 3 or 7 of the raw byte (vptestnmb), the activation's 4-byte
 * group negated there (|x| <= 127, so maddubs pairs stay below 2^15), vpdpwssd by the rows' scales as int16 pairs
 * (sc, sc): the same exact int32 lanes, so the same bits. */
XS_INL void xs_body_s(int64_t nb, const uint8_t *p, const uint8_t *a, int64_t as, const int nr, float *y, int64_t ys) {
    const __m512i kabs = _mm512_broadcast_i32x4(_mm_abs_epi8(_mm_loadu_si128((const __m128i *)ub_iq4nl_kv)));
    const __m512i m4 = _mm512_set1_epi8(0x0F), lo16 = _mm512_set1_epi32(0xFFFF);
    const __m512i lb = _mm512_set1_epi8(0x08), hb = _mm512_set1_epi8((char)0x80);
    __m512 acc[UB_MM_RT][8];
    XS_UNR for (int r = 0; r < nr; r++) XS_UNR for (int j = 0; j < 8; j++) acc[r][j] = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = p + ib * RP_XS_BB;
        __m512 d[UB_MM_RT];
        xs_dprod(b, a, as, ib, nr, d);
        __m512i sc2[8]; /* sub-block s: the 16 rows' scales as int16 pairs (sc, sc) */
        XS_UNR for (int s = 0; s < 8; s++) {
            const __m512i v = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(b + RP_XS_SC + 16 * s)));
            sc2[s] = _mm512_or_si512(_mm512_and_si512(v, lo16), _mm512_slli_epi32(v, 16));
        }
        for (int j = 0; j < 8; j++) { /* lane j: elements 4 j .. 4 j + 3 of every sub-block */
            __m512i lane[UB_MM_RT];
            XS_UNR for (int r = 0; r < nr; r++) lane[r] = _mm512_setzero_si512();
            XS_UNR for (int s = 0; s < 8; s++) {
                const __m512i raw = _mm512_load_si512((const void *)(b + 256 * s + 64 * (j >> 1)));
                /* |value| by one vpshufb of the nibble through the |values|; value < 0 <=> nibble < 8, read
                 * straight from bit 3 (low nibble) or bit 7 (high nibble) of the raw byte */
                const __m512i qa = _mm512_shuffle_epi8(kabs, _mm512_and_si512(j & 1 ? _mm512_srli_epi16(raw, 4) : raw, m4));
                const __mmask64 neg = _mm512_testn_epi8_mask(raw, j & 1 ? hb : lb);
                XS_UNR for (int r = 0; r < nr; r++) {
                    const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
                    const __m512i xv = xs_bc32(x->qs + 32 * s + 4 * j);
                    const __m512i xs = _mm512_mask_sub_epi8(xv, neg, _mm512_setzero_si512(), xv);
                    lane[r] = _mm512_dpwssd_epi32(lane[r], _mm512_maddubs_epi16(qa, xs), sc2[s]);
                }
            }
            XS_UNR for (int r = 0; r < nr; r++) acc[r][j] = _mm512_fmadd_ps(d[r], _mm512_cvtepi32_ps(lane[r]), acc[r][j]);
        }
    }
    xs_store(acc, nr, y, ys);
}

/* one out-of-line function per body and row count (each its own frame and register allocation) */
#define XS_FN(name, body, n)                                                                                      \
    static __attribute__((noinline, target(XS_TGT))) void name(int64_t nb, const uint8_t *p, const uint8_t *a,   \
                                                               int64_t as, float *y, int64_t ys) {             \
        body(nb, p, a, as, n, y, ys);                                                                            \
    }
XS_FN(xs_u1, xs_body, 1)
XS_FN(xs_u2, xs_body, 2)
XS_FN(xs_u3, xs_body, 3)
XS_FN(xs_s4, xs_body_s, 4)
XS_FN(xs_s5, xs_body_s, 5)
XS_FN(xs_s6, xs_body_s, 6)

/* rp_internal.h's panel kernel contract (p: 64-byte aligned, as every block column is): nr <= 3 (decode) by the
 * offset trick, 4..6 by the sign form */
static __attribute__((target(XS_TGT))) void rp_panel_iq4xs_avx512(int64_t nb, const uint8_t *p, const uint8_t *a,
                                                                  int64_t as, int nr, float *y, int64_t ys) {
    switch (nr) {
    case 1: xs_u1(nb, p, a, as, y, ys); break;
    case 2: xs_u2(nb, p, a, as, y, ys); break;
    case 3: xs_u3(nb, p, a, as, y, ys); break;
    case 4: xs_s4(nb, p, a, as, y, ys); break;
    case 5: xs_s5(nb, p, a, as, y, ys); break;
    default: xs_s6(nb, p, a, as, y, ys); break;
    }
}

ub_rp_panel_fn ub_rp_xs_avx512(int32_t type) { return type == UB_T_IQ4_XS ? rp_panel_iq4xs_avx512 : 0; }
#else
ub_rp_panel_fn ub_rp_xs_avx512(int32_t type) {
    (void)type;
    return 0;
}
#endif
