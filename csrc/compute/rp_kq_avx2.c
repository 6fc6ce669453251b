/* The AVX2 panel kernels of Q4_K / Q6_K (layouts: rp_kquant.h), also what the avxvnni back-end runs on them.
 * Per output element the operations of the AVX2 dot kernels on the GGUF layout (mm_avx2.c body_q45k /
 * body_q6k: the same 8 int32 lanes of maddubs + madd by the sub-block scale, the same min / -32 terms, the same
 * f32 products, FMA / FNMA into the row's 8-lane accumulator in block order and the same horizontal sum), so
 * a repacked weight gives the GGUF layout's bits. The panel's 8 rows are taken one after the other. */
#include "rp_kquant.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
#include "mm_avx2_util.h"

/* y[r * ys + c], c < 8, r < nr: Q4_K panel p (nb block columns) . Q8_K rows a + r * as */
INL AVX2 void kq_q4k_body(int64_t nb, const uint8_t *p, const uint8_t *a, int64_t as, const int nr, float *y,
                          int64_t ys) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int c = 0; c < RP_KQ_P; c++) {
        __m256 acc[UB_MM_RT];
        UNR for (int r = 0; r < nr; r++) acc[r] = _mm256_setzero_ps();
        for (int64_t ib = 0; ib < nb; ib++) {
            const uint8_t *b = p + (ib * RP_KQ_P + c) * RP_Q4K_BYTES;
            const __m128i mn8 = _mm_loadl_epi64((const __m128i *)(b + 12));
            const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8)); /* each min twice */
            const float dw = h2f(b), dmw = h2f(b + 2);
            __m256i sumi[UB_MM_RT];
            UNR for (int r = 0; r < nr; r++) sumi[r] = _mm256_setzero_si256();
            UNR for (int ch = 0; ch < 4; ch++) { /* elements 64 ch .. 64 ch + 31 (lo) and + 32 .. + 63 (hi) */
                const uint8_t *g = b + 20 + 64 * (ch >> 1);
                const int sh = 4 * (ch & 1);
                const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(ld(g), sh), m4);
                const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(ld(g + 32), sh), m4);
                const __m256i s_lo = _mm256_set1_epi16(b[4 + 2 * ch]), s_hi = _mm256_set1_epi16(b[5 + 2 * ch]);
                UNR for (int r = 0; r < nr; r++) {
                    const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
                    sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(_mm256_maddubs_epi16(lo, ld(x->qs + 64 * ch)), s_lo));
                    sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(_mm256_maddubs_epi16(hi, ld(x->qs + 64 * ch + 32)), s_hi));
                }
            }
            UNR for (int r = 0; r < nr; r++) {
                const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
                const __m256i mv = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)x->bsums), mins);
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * x->d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
                acc[r] = _mm256_fnmadd_ps(_mm256_set1_ps(dmw * x->d), _mm256_cvtepi32_ps(mv), acc[r]);
            }
        }
        UNR for (int r = 0; r < nr; r++) y[r * ys + c] = hsum(acc[r]);
    }
}

/* the same for a Q6_K panel (e in [0, 63], value e - 32, the -32 folded in exactly via the bsums) */
INL AVX2 void kq_q6k_body(int64_t nb, const uint8_t *p, const uint8_t *a, int64_t as, const int nr, float *y,
                          int64_t ys) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
    for (int c = 0; c < RP_KQ_P; c++) {
        __m256 acc[UB_MM_RT];
        UNR for (int r = 0; r < nr; r++) acc[r] = _mm256_setzero_ps();
        for (int64_t ib = 0; ib < nb; ib++) {
            const uint8_t *b = p + (ib * RP_KQ_P + c) * RP_Q6K_BYTES;
            const int8_t *sc = (const int8_t *)(b + 2);
            const float dw = h2f(b);
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
            __m256i sumi[UB_MM_RT];
            UNR for (int r = 0; r < nr; r++) sumi[r] = _mm256_setzero_si256();
            UNR for (int m = 0; m < 8; m++) { /* elements 32 m .. 32 m + 31: sub-blocks 2m, 2m + 1 */
                const int o = 32 * (m & 3);
                const __m256i nib = _mm256_and_si256(_mm256_srli_epi16(ld(b + 18 + 64 * (m >> 2) + (o & 63)), (o & 64) ? 4 : 0), m4);
                const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(ld(b + 146 + 32 * (m & 1)), 2 * (m >> 1)), m2);
                const __m256i e = _mm256_or_si256(nib, _mm256_slli_epi16(hb, 4));
                const __m256i sv = _mm256_set_m128i(_mm_set1_epi16(sc[2 * m + 1]), _mm_set1_epi16(sc[2 * m]));
                UNR for (int r = 0; r < nr; r++) {
                    const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
                    sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(_mm256_maddubs_epi16(e, ld(x->qs + 32 * m)), sv));
                }
            }
            UNR for (int r = 0; r < nr; r++) {
                const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
                const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)x->bsums), sc16), 5);
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * x->d), _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[r], corr)), acc[r]);
            }
        }
        UNR for (int r = 0; r < nr; r++) y[r * ys + c] = hsum(acc[r]);
    }
}
/* y[c], c < 8: panel p (nb block columns, Q4_K or Q6_K by six) . one Q8_K row a, for B = 1. Per element the
 * bodies' operations above (bitwise the same result); only the loop order differs: the block column ib is the
 * outer loop and its 8 rows the inner one (8 accumulators), so the panel streams contiguously from memory, and
 * the block column 2 ahead is prefetched (the bodies' row-by-row sweep read a DRAM-resident panel with a
 * stride of one block column: Qwen2.5-0.5B's B = 1 step ran 27-29 ms with the panels, 20.5-22.5 ms in the
 * GGUF layout, Zen 3). */
INL AVX2 void kq_row1(int64_t nb, const uint8_t *p, const uint8_t *a, float *y, const int six) {
    const int bb = six ? RP_Q6K_BYTES : RP_Q4K_BYTES;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
    __m256 acc[RP_KQ_P];
    UNR for (int c = 0; c < RP_KQ_P; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        /* past the panel's end this is the next panel's start (a prefetch never faults) */
        for (int l = 0; l < RP_KQ_P * bb; l += 64) _mm_prefetch((const char *)(p + (ib + 2) * RP_KQ_P * bb + l), _MM_HINT_T0);
        const ub_act_q8_k *x = (const ub_act_q8_k *)a + ib;
        const __m256i bs = _mm256_loadu_si256((const __m256i *)x->bsums);
        for (int c = 0; c < RP_KQ_P; c++) {
            const uint8_t *b = p + (ib * RP_KQ_P + c) * bb;
            __m256i sumi = _mm256_setzero_si256();
            if (!six) {
                const __m128i mn8 = _mm_loadl_epi64((const __m128i *)(b + 12));
                const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8));
                UNR for (int ch = 0; ch < 4; ch++) {
                    const uint8_t *g = b + 20 + 64 * (ch >> 1);
                    const int sh = 4 * (ch & 1);
                    const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(ld(g), sh), m4);
                    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(ld(g + 32), sh), m4);
                    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(lo, ld(x->qs + 64 * ch)), _mm256_set1_epi16(b[4 + 2 * ch])));
                    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(hi, ld(x->qs + 64 * ch + 32)), _mm256_set1_epi16(b[5 + 2 * ch])));
                }
                const __m256i mv = _mm256_madd_epi16(bs, mins);
                acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(h2f(b) * x->d), _mm256_cvtepi32_ps(sumi), acc[c]);
                acc[c] = _mm256_fnmadd_ps(_mm256_set1_ps(h2f(b + 2) * x->d), _mm256_cvtepi32_ps(mv), acc[c]);
            } else {
                const int8_t *sc = (const int8_t *)(b + 2);
                const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
                UNR for (int m = 0; m < 8; m++) {
                    const int o = 32 * (m & 3);
                    const __m256i nib = _mm256_and_si256(_mm256_srli_epi16(ld(b + 18 + 64 * (m >> 2) + (o & 63)), (o & 64) ? 4 : 0), m4);
                    const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(ld(b + 146 + 32 * (m & 1)), 2 * (m >> 1)), m2);
                    const __m256i e = _mm256_or_si256(nib, _mm256_slli_epi16(hb, 4));
                    const __m256i sv = _mm256_set_m128i(_mm_set1_epi16(sc[2 * m + 1]), _mm_set1_epi16(sc[2 * m]));
                    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(e, ld(x->qs + 32 * m)), sv));
                }
                const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5);
                acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(h2f(b) * x->d), _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi, corr)), acc[c]);
            }
        }
    }
    UNR for (int c = 0; c < RP_KQ_P; c++) y[c] = hsum(acc[c]);
}

/* the panel kernels: kq_row1 for one activation row (nr a constant in each case of the dispatch), the bodies
 * for 2..6 */
#define KQ_Q4K(nb, w, a, as, nr, y, ys) ((nr) == 1 ? kq_row1(nb, w, a, y, 0) : kq_q4k_body(nb, w, a, as, nr, y, ys))
#define KQ_Q6K(nb, w, a, as, nr, y, ys) ((nr) == 1 ? kq_row1(nb, w, a, y, 1) : kq_q6k_body(nb, w, a, as, nr, y, ys))
DISPATCH(kq_panel_q4k, KQ_Q4K)
DISPATCH(kq_panel_q6k, KQ_Q6K)

ub_rp_panel_fn ub_rp_kq_avx2(int32_t type) {
    return type == UB_T_Q4_K ? kq_panel_q4k : type == UB_T_Q6_K ? kq_panel_q6k : 0;
}
#else
ub_rp_panel_fn ub_rp_kq_avx2(int32_t type) {
    (void)type;
    return 0;
}
#endif
