/* The AVX-512 GEMM tile of Q8_0 (against Q8_0 activations, B >= 4): QT_GC weight rows x every whole tile of
 * QT_GR activation rows of a call, over activation rows prepared once per call (qt_prep). Included by
 * mm_avx512.c after mm_vnni.h (its VN / VN_INL attributes and helpers); the driver (matmul.c) runs it through
 * ub_mm_gemm.fnr / .prep.
 *
 * Per element exactly the Q8_0 dot kernel's operations (mm_vnni.h vn_body, = mm_avx2.c's): per block the 8
 * exact int32 lanes (by the offset trick: u = w ^ 0x80, vpdpbusd(-128 * lanesum(x), u, x)), the f32 product
 * dw * dx, one FMA of the converted lanes into the row's even-block or odd-block 8-lane chain (blocks in
 * order within each chain), hsum(even + odd) at the end. So it gives bitwise the dot kernel's (and the decode
 * tile's, and vn_gemm_body's) results; only the instruction stream differs from vn_gemm_body's 4 x 4 zmm tile:
 *   - 8-lane (ymm) accumulators, the even chain's blocks run first, then the odd chain's (each chain in block
 *     order; they are independent until the final add), so each FMA takes its scale as a broadcast from
 *     memory ({1to8}): no per-element multiply, no 256-bit inserts of the scale or of the two blocks;
 *   - the products dw * dx come from a table made 16 at a time per tile element and 32-block segment, from
 *     the weight scales converted once per call (qt_dw) and the activation scales of the prepared rows;
 *   - -128 * lanesum(x), the codes and dx of each activation row are made once per call (qt_prep), not per
 *     tile; the QT_GC weight rows stay in L1 while the row tiles sweep them;
 *   - the weight rows UB_MM_TILE_PF bytes ahead are prefetched, a share before each row tile (mm_internal.h),
 *     and the output lines of the tile after next.
 * Why (docs/kernels.md "The Q8_0 GEMM tile"): vn_gemm_body ran ~90-100 GFLOP/s per core on every shape
 * (4864 x 896 as the lm head 262144 x 640): of its ~175 instructions per block pair and tile, 64 are the
 * arithmetic; the rest built the scale and weight/activation vectors (inserts, broadcasts, f16 converts). */
#define QT_GC 4
#ifndef QT_GR
#define QT_GR 4
#endif
#define QT_SEG 32 /* blocks per segment of the scale table (even) */
#define QT_DWMAX 256 /* blocks (K = 8192) up to which a call converts its weight scales once */

/* A prepared activation row (qt_prep; made once per call and row by the driver, read by every tile): the
 * nb blocks' -128 * lanesum(x) as 8 int32 (32 bytes each, at 0), then the nb block scales dx as floats padded
 * with 0 to a multiple of 16 (at 32 nb), then the nb blocks' 32 codes (at 32 nb + 4 nb16). */
static int64_t qt_prep_bytes(int64_t nb) { return 64 * nb + 4 * ((nb + 15) / 16 * 16); }

/* xq: one quantised row (nb ub_act_q8_0 blocks, read only) -> out: qt_prep_bytes(nb) bytes (caller-owned). */
VN void qt_prep(int64_t nb, const uint8_t *xq, uint8_t *out) {
    const ub_act_q8_0 *x = (const ub_act_q8_0 *)xq;
    const int64_t nb16 = (nb + 15) / 16 * 16;
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    float *d = (float *)(out + 32 * nb);
    uint8_t *q = out + 32 * nb + 4 * nb16;
    for (int64_t ib = 0; ib < nb; ib++) {
        const __m256i v = vn_ld(x[ib].qs);
        _mm256_storeu_si256((__m256i *)(out + 32 * ib),
                            _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), flip, v)));
        _mm256_storeu_si256((__m256i *)(q + 32 * ib), v);
        d[ib] = x[ib].d;
    }
    for (int64_t ib = nb; ib < nb16; ib++) d[ib] = 0.0f;
}

/* dw[c][i] = the f16 scale of block i of weight row c at w + c * ws (Q8_0, read only), i < nb, as floats;
 * entries up to the next multiple of 16 are 0. */
VN_INL void qt_dw(const uint8_t *w, int64_t ws, int64_t nb, float (*dw)[QT_DWMAX]) {
    VN_UNR for (int c = 0; c < QT_GC; c++) {
        const uint8_t *b = w + c * ws;
        int64_t i = 0;
        for (; i + 8 <= nb; i += 8) {
            const __m128i h = _mm_set_epi64x((long long)vn_d4(b + (i + 4) * 34, 34), (long long)vn_d4(b + i * 34, 34));
            _mm256_storeu_ps(dw[c] + i, _mm256_cvtph_ps(h));
        }
        for (; i < nb; i++) dw[c][i] = vn_h2f(b + i * 34);
        for (; i % 16; i++) dw[c][i] = 0.0f;
    }
}

/* The scale table of one segment: sc[c][r][i] = dw[c][i] * dx(row r, block s0 + i) for i < len rounded up to
 * 16 (the dot kernel's f32 product; 0 past len). dw: the segment's weight scales (QT_GC rows, stride QT_DWMAX);
 * a: QT_GR prepared rows as bytes apart, their dx at byte dxo (read only). */
VN_INL void qt_scales(const float (*dw)[QT_DWMAX], const uint8_t *a, int64_t as, int64_t dxo, int64_t s0, int len,
                      float sc[QT_GC][QT_GR][QT_SEG]) {
    const int nv = (len + 15) / 16;
    VN_UNR for (int c = 0; c < QT_GC; c++)
        for (int v = 0; v < nv; v++) {
            const __m512 d = _mm512_loadu_ps(dw[c] + 16 * v);
            VN_UNR for (int r = 0; r < QT_GR; r++)
                _mm512_store_ps(sc[c][r] + 16 * v, _mm512_mul_ps(d, _mm512_loadu_ps((const float *)(a + r * as + dxo) + s0 + 16 * v)));
        }
}

/* One chain of a segment: blocks s0 + h, s0 + h + 2, ... < s0 + len (h = 0: the even-block chain, 1: the odd)
 * into acc[c][r] (8 lanes each, read and written back); w, ws, a, as as qt_gemm_q8_0's, sc the table. */
VN_INL void qt_chain(const uint8_t *w, int64_t ws, const uint8_t *a, int64_t as, int64_t nb, int64_t s0, int len,
                     int h, float sc[QT_GC][QT_GR][QT_SEG], __m256 acc[QT_GC][QT_GR]) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    const int64_t qo = 32 * nb + 4 * ((nb + 15) / 16 * 16);
    __m256 t[QT_GC][QT_GR];
    VN_UNR for (int c = 0; c < QT_GC; c++) VN_UNR for (int r = 0; r < QT_GR; r++) t[c][r] = acc[c][r];
    for (int i = h; i < len; i += 2) {
        const int64_t ib = s0 + i;
        __m256i x[QT_GR], corr[QT_GR];
        VN_UNR for (int r = 0; r < QT_GR; r++) {
            corr[r] = vn_ld(a + r * as + 32 * ib);
            x[r] = vn_ld(a + r * as + qo + 32 * ib);
        }
        VN_UNR for (int c = 0; c < QT_GC; c++) {
            const __m256i u = _mm256_xor_si256(vn_ld(w + c * ws + ib * 34 + 2), flip);
            VN_UNR for (int r = 0; r < QT_GR; r++)
                t[c][r] = _mm256_fmadd_ps(_mm256_set1_ps(sc[c][r][i]), _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(corr[r], u, x[r])), t[c][r]);
        }
    }
    VN_UNR for (int c = 0; c < QT_GC; c++) VN_UNR for (int r = 0; r < QT_GR; r++) acc[c][r] = t[c][r];
}

/* y[r * ys + c] for r < nr (a multiple of QT_GR), c < QT_GC: weight row c at w + c * ws (nb Q8_0 blocks) .
 * activation row r, prepared (qt_prep) at a + r * as; all read only but y. Row tiles of QT_GR sweep the
 * QT_GC weight rows (which stay in L1); their scales are converted once per call when nb <= QT_DWMAX. */
VN void qt_gemm_q8_0(int64_t nb, const uint8_t *w, int64_t ws, const uint8_t *a, int64_t as, int64_t nr, float *y,
                     int64_t ys) {
    float dw[QT_GC][QT_DWMAX] __attribute__((aligned(64)));
    float sc[QT_GC][QT_GR][QT_SEG] __attribute__((aligned(64)));
    /* the output lines of the tile after next (a hint: never a fault) */
    for (int64_t r = 0; r < nr; r++) __builtin_prefetch(y + r * ys + 2 * QT_GC, 1, 3);
    const int once = nb <= QT_DWMAX;
    if (once) qt_dw(w, ws, nb, dw);
    for (int64_t r0 = 0; r0 + QT_GR <= nr; r0 += QT_GR) {
        const uint8_t *ar = a + r0 * as;
        ub_mm_tile_prefetch(w, QT_GC * ws, r0 / QT_GR, nr / QT_GR); /* the weights UB_MM_TILE_PF ahead */
        __m256 acc0[QT_GC][QT_GR], acc1[QT_GC][QT_GR];
        VN_UNR for (int c = 0; c < QT_GC; c++) VN_UNR for (int r = 0; r < QT_GR; r++) acc0[c][r] = acc1[c][r] = _mm256_setzero_ps();
        for (int64_t s0 = 0; s0 < nb; s0 += QT_SEG) {
            const int len = nb - s0 < QT_SEG ? (int)(nb - s0) : QT_SEG;
            if (!once) qt_dw(w + s0 * 34, ws, len, dw);
            qt_scales((const float (*)[QT_DWMAX])(once ? &dw[0][s0] : &dw[0][0]), ar, as, 32 * nb, s0, len, sc);
            qt_chain(w, ws, ar, as, nb, s0, len, 0, sc, acc0);
            qt_chain(w, ws, ar, as, nb, s0, len, 1, sc, acc1);
        }
        VN_UNR for (int c = 0; c < QT_GC; c++) VN_UNR for (int r = 0; r < QT_GR; r++)
            y[(r0 + r) * ys + c] = vn_hsum(_mm256_add_ps(acc0[c][r], acc1[c][r]));
    }
}
