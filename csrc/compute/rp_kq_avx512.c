/* The AVX-512 panel kernels of Q4_K / Q6_K (layouts: rp_kquant.h): register tiles of 2 panel rows x nr
 * activation rows (nr 4..6: 12 zmm integer + 12 ymm float accumulators; 4 x 2..3; nr = 1 row by row, kq_row1),
 * each 64-element chunk's weights one zmm (a masked nibble group; Q6_K: | its 2 high bits by one ternary-logic op), the sub-block scales put in
 * place by one vpermw from the block's pre-decoded scales, maddubs + vpdpwssd per chunk and row, the
 * activation chunk loaded once for both panel rows.
 *
 * Per output element the operations of the AVX2 dot kernel (mm_avx2.c body_q45k / body_q6k): the block's 8
 * int32 lanes, lane i the exact sum over the sub-blocks of scale * (the 4 products of elements 4i..4i+3 of each
 * 32-element piece) (two pieces per zmm, the halves added at the block's end: integers, so the same lanes),
 * the same min / -32 terms, the same f32 products dw * dx (and dmin * dx) and FMA / FNMA into the row's one
 * 8-lane accumulator, blocks in order, the same horizontal sum. So a row gives the same bits for any nr, in
 * any tile, with any thread split, and the same as avx2 / avxvnni (tests/compute/test_backends.py). */
#include "rp_kquant.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
#include <immintrin.h>
#include <string.h>

#define KQ_TGT "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
#define KQ_INL static inline __attribute__((always_inline, target(KQ_TGT)))
#define KQ_UNR _Pragma("GCC unroll 8")
#define KQ_GC 4 /* the widest tile of kq_tile (nr = 2, 3) */

KQ_INL float kq_h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}
KQ_INL float kq_hsum(__m256 a) { /* the AVX2 kernels' horizontal sum, same order */
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* y[r * ys + c] for c0 <= c < c0 + gc, r < nr: panel rows c of panel p (nb block columns) . Q8_K rows
 * a + r * as. six: 0 Q4_K (block bytes 148), 1 Q6_K (210). */
KQ_INL void kq_tile(int64_t nb, const uint8_t *p, int c0, const int gc, const uint8_t *a, int64_t as, const int nr,
                    float *y, int64_t ys, const int six) {
    const int bb = six ? RP_Q6K_BYTES : RP_Q4K_BYTES;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    /* the scale index of each 16-bit lane of chunk 0: Q4_K: piece 0 | piece 1 (256-bit halves); Q6_K: the
     * 128-bit quarter j takes sub-block j. Chunk ch adds 2 ch (Q4_K) or 4 ch (Q6_K). */
    const long long h1 = 0x0001000100010001LL, h2 = 2 * h1, h3 = 3 * h1;
    const __m512i sel = six ? _mm512_set_epi64(h3, h3, h2, h2, h1, h1, 0, 0) : _mm512_set_epi64(h1, h1, h1, h1, 0, 0, 0, 0);
    __m256 acc[KQ_GC][UB_MM_RT];
    KQ_UNR for (int c = 0; c < gc; c++) KQ_UNR for (int r = 0; r < nr; r++) acc[c][r] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        if (nr <= 3) /* decode-sized calls stream the panels from DRAM: fetch this tile's blocks 2 columns ahead
                      * (past the panel's end that is the next panel's start; a prefetch never faults) */
            for (int l = 0; l < gc * bb; l += 64)
                _mm_prefetch((const char *)(p + ((ib + 2) * RP_KQ_P + c0) * bb + l), _MM_HINT_T0);
        const uint8_t *blk[KQ_GC];
        __m512i sumi[KQ_GC][UB_MM_RT], scz[KQ_GC];
        KQ_UNR for (int c = 0; c < gc; c++) {
            blk[c] = p + (ib * RP_KQ_P + c0 + c) * bb;
            scz[c] = six ? _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk[c] + 2))))
                         : _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(blk[c] + 4))));
            KQ_UNR for (int r = 0; r < nr; r++) sumi[c][r] = _mm512_setzero_si512();
        }
        KQ_UNR for (int ch = 0; ch < 4; ch++) { /* elements 64 ch .. 64 ch + 63 */
            __m512i q[KQ_GC], sv[KQ_GC];
            KQ_UNR for (int c = 0; c < gc; c++) {
                const __m512i g = _mm512_loadu_si512((const void *)(blk[c] + (six ? 18 : 20) + 64 * (ch >> 1)));
                const __m512i lo = _mm512_and_si512((ch & 1) ? _mm512_srli_epi16(g, 4) : g, m4);
                if (six) { /* the bit pair ch of each high-bit byte moved to bits 4..5 (16-bit shifts keep it in its byte) */
                    const __m512i hb = _mm512_loadu_si512((const void *)(blk[c] + 146));
                    const __m512i hi = ch == 3 ? _mm512_srli_epi16(hb, 2) : _mm512_slli_epi16(hb, 4 - 2 * ch);
                    q[c] = _mm512_ternarylogic_epi32(lo, hi, m30, 0xF8); /* lo | (hi & 0x30) */
                } else {
                    q[c] = lo;
                }
                sv[c] = _mm512_permutexvar_epi16(_mm512_add_epi16(sel, _mm512_set1_epi16((short)((six ? 4 : 2) * ch))), scz[c]);
            }
            KQ_UNR for (int r = 0; r < nr; r++) {
                const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
                const __m512i xv = _mm512_loadu_si512((const void *)(x->qs + 64 * ch));
                KQ_UNR for (int c = 0; c < gc; c++)
                    sumi[c][r] = _mm512_dpwssd_epi32(sumi[c][r], _mm512_maddubs_epi16(q[c], xv), sv[c]);
            }
        }
        KQ_UNR for (int c = 0; c < gc; c++) {
            const __m256 dwv = _mm256_set1_ps(kq_h2f(blk[c]));
            __m256 dmv = dwv;
            __m256i mins = _mm256_setzero_si256();
            if (!six) {
                const __m128i mn8 = _mm_loadl_epi64((const __m128i *)(blk[c] + 12));
                mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8)); /* each min twice */
                dmv = _mm256_set1_ps(kq_h2f(blk[c] + 2));
            }
            KQ_UNR for (int r = 0; r < nr; r++) {
                const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
                const __m256 dx = _mm256_broadcast_ss(&x->d);
                const __m256i bs = _mm256_loadu_si256((const __m256i *)x->bsums);
                __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(sumi[c][r]), _mm512_extracti64x4_epi64(sumi[c][r], 1));
                if (six) s8 = _mm256_sub_epi32(s8, _mm256_slli_epi32(_mm256_madd_epi16(bs, _mm512_castsi512_si256(scz[c])), 5));
                acc[c][r] = _mm256_fmadd_ps(_mm256_mul_ps(dwv, dx), _mm256_cvtepi32_ps(s8), acc[c][r]);
                if (!six) acc[c][r] = _mm256_fnmadd_ps(_mm256_mul_ps(dmv, dx), _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, mins)), acc[c][r]);
            }
        }
    }
    KQ_UNR for (int c = 0; c < gc; c++) KQ_UNR for (int r = 0; r < nr; r++) y[r * ys + c0 + c] = kq_hsum(acc[c][r]);
}

/* y[c], c < 8: the 8 rows of panel p (nb block columns) . one Q8_K row a (nr = 1, decode). The rows' blocks
 * are read one after the other in memory order, each row's 4 chunks summed before the next row's, the
 * activation's 4 chunks, d and bsums loaded once per block column: few live registers (the 8 x 1 tile of
 * kq_tile spilled its integer sums and accumulators to the stack: Q6_K 896 x 4864 from L3 ~27 -> ~29.5 GB/s,
 * 1.08-1.14x; Q4_K ~1.02x). Per element the operations of kq_tile. */
KQ_INL void kq_row1(int64_t nb, const uint8_t *p, const uint8_t *a, float *y, const int six) {
    const int bb = six ? RP_Q6K_BYTES : RP_Q4K_BYTES;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const long long h1 = 0x0001000100010001LL, h2 = 2 * h1, h3 = 3 * h1;
    const __m512i sel = six ? _mm512_set_epi64(h3, h3, h2, h2, h1, h1, 0, 0) : _mm512_set_epi64(h1, h1, h1, h1, 0, 0, 0, 0);
    __m512i selc[4];
    KQ_UNR for (int ch = 0; ch < 4; ch++) selc[ch] = _mm512_add_epi16(sel, _mm512_set1_epi16((short)((six ? 4 : 2) * ch)));
    __m256 acc[RP_KQ_P];
    KQ_UNR for (int c = 0; c < RP_KQ_P; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        for (int l = 0; l < RP_KQ_P * bb; l += 64) _mm_prefetch((const char *)(p + (ib + 2) * RP_KQ_P * bb + l), _MM_HINT_T0);
        const ub_act_q8_k *x = (const ub_act_q8_k *)a + ib;
        __m512i xv[4];
        KQ_UNR for (int ch = 0; ch < 4; ch++) xv[ch] = _mm512_loadu_si512((const void *)(x->qs + 64 * ch));
        const __m256 dx = _mm256_broadcast_ss(&x->d);
        const __m256i bs = _mm256_loadu_si256((const __m256i *)x->bsums);
        for (int c = 0; c < RP_KQ_P; c++) {
            const uint8_t *blk = p + (ib * RP_KQ_P + c) * bb;
            const __m512i scz = six ? _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 2))))
                                    : _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(blk + 4))));
            __m512i sumi = _mm512_setzero_si512();
            KQ_UNR for (int ch = 0; ch < 4; ch++) {
                const __m512i g = _mm512_loadu_si512((const void *)(blk + (six ? 18 : 20) + 64 * (ch >> 1)));
                const __m512i lo = _mm512_and_si512((ch & 1) ? _mm512_srli_epi16(g, 4) : g, m4);
                __m512i q = lo;
                if (six) {
                    const __m512i hb = _mm512_loadu_si512((const void *)(blk + 146));
                    const __m512i hi = ch == 3 ? _mm512_srli_epi16(hb, 2) : _mm512_slli_epi16(hb, 4 - 2 * ch);
                    q = _mm512_ternarylogic_epi32(lo, hi, m30, 0xF8);
                }
                sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(q, xv[ch]), _mm512_permutexvar_epi16(selc[ch], scz));
            }
            const __m256 dwv = _mm256_set1_ps(kq_h2f(blk));
            __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(sumi), _mm512_extracti64x4_epi64(sumi, 1));
            if (six) {
                s8 = _mm256_sub_epi32(s8, _mm256_slli_epi32(_mm256_madd_epi16(bs, _mm512_castsi512_si256(scz)), 5));
                acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(dwv, dx), _mm256_cvtepi32_ps(s8), acc[c]);
            } else {
                const __m128i mn8 = _mm_loadl_epi64((const __m128i *)(blk + 12));
                const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8));
                const __m256 dmv = _mm256_set1_ps(kq_h2f(blk + 2));
                acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(dwv, dx), _mm256_cvtepi32_ps(s8), acc[c]);
                acc[c] = _mm256_fnmadd_ps(_mm256_mul_ps(dmv, dx), _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, mins)), acc[c]);
            }
        }
    }
    KQ_UNR for (int c = 0; c < RP_KQ_P; c++) y[c] = kq_hsum(acc[c]);
}

/* the 8 rows of a panel for nr >= 2 activation rows (nr = 1: kq_row1): 2 tiles of 4 for 2..3 rows, 4 of 2
 * beyond (the accumulators of 2 x 6 fill the registers). Each element's operations are the same in every
 * tile shape: only loads are shared. */
KQ_INL void kq_panel(int64_t nb, const uint8_t *p, const uint8_t *a, int64_t as, const int nr, float *y, int64_t ys,
                     const int six) {
    const int gc = nr <= 3 ? 4 : 2;
    for (int c0 = 0; c0 < RP_KQ_P; c0 += gc) kq_tile(nb, p, c0, gc, a, as, nr, y, ys, six);
}

#define KQ_DISPATCH(NAME, SIX)                                                                               \
    static __attribute__((target(KQ_TGT))) void NAME(int64_t nb, const uint8_t *p, const uint8_t *a,       \
                                                      int64_t as, int nr, float *y, int64_t ys) {           \
        switch (nr) {                                                                                        \
        case 1: kq_row1(nb, p, a, y, SIX); break;                                                            \
        case 2: kq_panel(nb, p, a, as, 2, y, ys, SIX); break;                                                \
        case 3: kq_panel(nb, p, a, as, 3, y, ys, SIX); break;                                                \
        case 4: kq_panel(nb, p, a, as, 4, y, ys, SIX); break;                                                \
        case 5: kq_panel(nb, p, a, as, 5, y, ys, SIX); break;                                                \
        default: kq_panel(nb, p, a, as, 6, y, ys, SIX); break;                                               \
        }                                                                                                    \
    }
KQ_DISPATCH(kq_panel_q4k_avx512, 0)
KQ_DISPATCH(kq_panel_q6k_avx512, 1)

ub_rp_panel_fn ub_rp_kq_avx512(int32_t type) {
    return type == UB_T_Q4_K ? kq_panel_q4k_avx512 : type == UB_T_Q6_K ? kq_panel_q6k_avx512 : 0;
}
#else
ub_rp_panel_fn ub_rp_kq_avx512(int32_t type) {
    (void)type;
    return 0;
}
#endif
