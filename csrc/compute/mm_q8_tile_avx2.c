/* The AVX2 GEMM tile of Q8_0 (against Q8_0 activations, B >= Q2_GR): Q2_GC weight rows x every whole tile of
 * Q2_GR activation rows of a call, over activation rows prepared once per call (q2_prep). The avx2 back-end's
 * only GEMM tile; the driver (matmul.c) runs it through ub_mm_gemm.fnr / .prep (as the avx512 one of
 * mm_q8_tile.h, whose structure it follows).
 *
 * Per element exactly the AVX2 Q8_0 dot kernel's operations (mm_avx2.c body_q32, kind 2): per block the 8
 * exact int32 lanes madd(maddubs(|w|, sign(x, w)), 1), converted to float, one FMA with the f32 product
 * dw * dx into the row's even-block or odd-block 8-lane chain (blocks in order within each chain), then
 * hsum(even + odd). Only the instruction stream differs:
 *   - the even chain's blocks of a 32-block segment run first, then the odd chain's (the chains are
 *     independent until the final add), so one set of Q2_GC x Q2_GR accumulators lives in registers;
 *   - the products dw * dx come from a table made 8 at a time (vmulps) per tile element and segment, from
 *     the weight scales converted once per call (nb <= Q2_DWMAX; else per segment) and the activation scales,
 *     contiguous in the prepared rows: each FMA takes its scale as a broadcast load, no vmulps per block;
 *   - each weight block is loaded and made |w| once for the tile's Q2_GR rows, each activation block once
 *     for its Q2_GC columns; the Q2_GC weight rows stay in L1 while the row tiles sweep them;
 *   - the weight rows UB_MM_TILE_PF bytes ahead are prefetched, a share before each row tile (mm_internal.h),
 *     and the output lines of the tile after next.
 * Why (docs/kernels.md "Batched path"): the dot kernel's vpmaddubsw, vpmaddwd, vmulps and vfmadd231ps per
 * (block, row) all issue on the same two pipes of Zen 3 (2 cycles per 32 MACs at best); without the vmulps
 * 3 of them remain. */
#include <string.h>

#include "mm_internal.h"
#include "ub_matmul.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
#include "mm_avx2_util.h"

#define Q2_GC 2
#define Q2_GR 4
#define Q2_SEG 32     /* blocks per segment of the scale table (even, a multiple of 8) */
#define Q2_DWMAX 256  /* blocks (K = 8192) up to which a call converts its weight scales once */

static int64_t q2_nb8(int64_t nb) { return (nb + 7) / 8 * 8; }

/* A prepared activation row (q2_prep; made once per call and row by the driver, read by every tile): the nb
 * block scales dx as floats padded with 0 to a multiple of 8 (at 0), then the nb blocks' 32 codes (at
 * 4 nb8); the whole rounded up to a multiple of 64 bytes. */
static int64_t q2_prep_bytes(int64_t nb) { return (4 * q2_nb8(nb) + 32 * nb + 63) / 64 * 64; }

/* xq: one quantised row (nb ub_act_q8_0 blocks, read only) -> out: q2_prep_bytes(nb) bytes (caller-owned). */
static AVX2 void q2_prep(int64_t nb, const uint8_t *xq, uint8_t *out) {
    const ub_act_q8_0 *x = (const ub_act_q8_0 *)xq;
    const int64_t nb8 = q2_nb8(nb);
    float *d = (float *)out;
    uint8_t *q = out + 4 * nb8;
    for (int64_t ib = 0; ib < nb; ib++) {
        d[ib] = x[ib].d;
        _mm256_storeu_si256((__m256i *)(q + 32 * ib), ld(x[ib].qs));
    }
    for (int64_t ib = nb; ib < nb8; ib++) d[ib] = 0.0f;
}

/* dw[c][i] = the f16 scale of block i of weight row c at w + c * ws (Q8_0, read only), i < nb, as floats
 * (exact); entries up to the next multiple of 8 are 0. */
INL AVX2 void q2_dw(const uint8_t *w, int64_t ws, int64_t nb, const int gc, float (*dw)[Q2_DWMAX]) {
    UNR for (int c = 0; c < gc; c++) {
        const uint8_t *b = w + c * ws;
        int64_t i = 0;
        for (; i + 8 <= nb; i += 8) {
            uint16_t h[8];
            for (int j = 0; j < 8; j++) memcpy(&h[j], b + (i + j) * 34, 2);
            _mm256_storeu_ps(dw[c] + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h)));
        }
        for (; i < nb; i++) dw[c][i] = h2f(b + i * 34);
        for (; i % 8; i++) dw[c][i] = 0.0f;
    }
}

/* The scale table of one segment: sc[c * gr + r][i] = dw[c][i] * dx(row r, block s0 + i) for i < len
 * rounded up to 8 (the dot kernel's f32 product; 0 past len). dw: the segment's weight scales (gc rows,
 * stride Q2_DWMAX); a: gr prepared rows as bytes apart, dx at their start (read only). */
INL AVX2 void q2_scales(const float (*dw)[Q2_DWMAX], const uint8_t *a, int64_t as, int64_t s0, int len, const int gc,
                        const int gr, float (*sc)[Q2_SEG]) {
    const int nv = (len + 7) / 8;
    UNR for (int c = 0; c < gc; c++)
        for (int v = 0; v < nv; v++) {
            const __m256 d = _mm256_loadu_ps(dw[c] + 8 * v);
            UNR for (int r = 0; r < gr; r++)
                _mm256_store_ps(sc[c * gr + r] + 8 * v, _mm256_mul_ps(d, _mm256_loadu_ps((const float *)(a + r * as) + s0 + 8 * v)));
        }
}

/* One chain of a segment: blocks s0 + h, s0 + h + 2, ... < s0 + len (h = 0: the even-block chain, 1: the odd)
 * into acc[c * gr + r] (8 lanes each, read and written back); w, ws, a, as as q2_gemm's, qo the codes'
 * offset in a prepared row, sc the segment's table. */
INL AVX2 void q2_chain(const uint8_t *w, int64_t ws, const uint8_t *a, int64_t as, int64_t qo, int64_t s0, int len,
                       int h, const int gc, const int gr, const float (*sc)[Q2_SEG], __m256 *acc) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 t[Q2_GC * Q2_GR];
    UNR for (int e = 0; e < gc * gr; e++) t[e] = acc[e];
    for (int i = h; i < len; i += 2) {
        const int64_t ib = s0 + i;
        __m256i x[Q2_GR];
        UNR for (int r = 0; r < gr; r++) x[r] = ld(a + r * as + qo + 32 * ib);
        UNR for (int c = 0; c < gc; c++) {
            const __m256i wv = ld(w + c * ws + ib * 34 + 2), aw = _mm256_sign_epi8(wv, wv);
            UNR for (int r = 0; r < gr; r++) {
                const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(x[r], wv)), ones);
                t[c * gr + r] = _mm256_fmadd_ps(_mm256_broadcast_ss(&sc[c * gr + r][i]), _mm256_cvtepi32_ps(p), t[c * gr + r]);
            }
        }
    }
    UNR for (int e = 0; e < gc * gr; e++) acc[e] = t[e];
}

/* y[r * ys + c] for r < nr (a multiple of gr), c < gc: weight row c at w + c * ws (nb Q8_0 blocks) .
 * activation row r, prepared (q2_prep) at a + r * as; all read only but y. Row tiles of gr sweep the gc
 * weight rows (which stay in L1); their scales are converted once per call when nb <= Q2_DWMAX. */
INL AVX2 void q2_gemm(int64_t nb, const uint8_t *w, int64_t ws, const uint8_t *a, int64_t as, int64_t nr, float *y,
                      int64_t ys, const int gc, const int gr) {
    float dw[Q2_GC][Q2_DWMAX] __attribute__((aligned(32)));
    float sc[Q2_GC * Q2_GR][Q2_SEG] __attribute__((aligned(32)));
    /* the output lines of the tile after next (a hint: never a fault) */
    for (int64_t r = 0; r < nr; r++) __builtin_prefetch(y + r * ys + 2 * gc, 1, 3);
    const int once = nb <= Q2_DWMAX;
    const int64_t qo = 4 * q2_nb8(nb);
    if (once) q2_dw(w, ws, nb, gc, dw);
    for (int64_t r0 = 0; r0 + gr <= nr; r0 += gr) {
        const uint8_t *ar = a + r0 * as;
        ub_mm_tile_prefetch(w, gc * ws, r0 / gr, nr / gr); /* the weights UB_MM_TILE_PF ahead */
        __m256 acc0[Q2_GC * Q2_GR], acc1[Q2_GC * Q2_GR];
        UNR for (int e = 0; e < gc * gr; e++) acc0[e] = acc1[e] = _mm256_setzero_ps();
        for (int64_t s0 = 0; s0 < nb; s0 += Q2_SEG) {
            const int len = nb - s0 < Q2_SEG ? (int)(nb - s0) : Q2_SEG;
            if (!once) q2_dw(w + s0 * 34, ws, len, gc, dw);
            q2_scales((const float (*)[Q2_DWMAX])(once ? &dw[0][s0] : &dw[0][0]), ar, as, s0, len, gc, gr, sc);
            q2_chain(w, ws, ar, as, qo, s0, len, 0, gc, gr, (const float (*)[Q2_SEG])sc, acc0);
            q2_chain(w, ws, ar, as, qo, s0, len, 1, gc, gr, (const float (*)[Q2_SEG])sc, acc1);
        }
        UNR for (int c = 0; c < gc; c++) UNR for (int r = 0; r < gr; r++)
            y[(r0 + r) * ys + c] = hsum(_mm256_add_ps(acc0[c * gr + r], acc1[c * gr + r]));
    }
}

/* The 2 x 4 tile (faster than 1 x 6 and 1 x 4 on Zen 3: 71 vs 68 / 69 GFLOP/s at 4864 x 896, n = 32); args as
 * q2_gemm's. */
static AVX2 void q2_gemm_24(int64_t nb, const uint8_t *w, int64_t ws, const uint8_t *a, int64_t as, int64_t nr,
                            float *y, int64_t ys) {
    q2_gemm(nb, w, ws, a, as, nr, y, ys, Q2_GC, Q2_GR);
}

ub_mm_gemm ub_mm_gemm_avx2(int32_t type) {
    ub_mm_gemm g = {0};
    if (type == UB_T_Q8_0)
        g.gc = Q2_GC, g.gr = Q2_GR, g.fnr = q2_gemm_24, g.prep = q2_prep, g.prep_bytes = q2_prep_bytes;
    return g;
}
#else
ub_mm_gemm ub_mm_gemm_avx2(int32_t type) {
    (void)type;
    ub_mm_gemm g = {0};
    return g;
}
#endif
