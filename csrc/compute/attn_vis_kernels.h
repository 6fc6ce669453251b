/* Inner loops of the visible-cell attention (internal): dot products of a query with a K row and
 * o += p * V row, for f32 and f16 K/V. Each has one fixed operation order per back-end. */
#ifndef UB_ATTN_VIS_KERNELS_H
#define UB_ATTN_VIS_KERNELS_H

#include <stdint.h>

/* For the gq query heads sharing one kv head (GQA), one K or V row serves them all:
 *   dots:  s[h * ss] = q_h . k for h < gq (q: gq rows of n floats; k: n floats or halves)
 *   axpys: o_h[d] += p[h * ps] * v[d] for h < gq, d < n (o: gq rows of n floats)
 * The operations for one head are those of a single-head loop, whatever gq is. */
typedef struct {
    void (*dots_f32)(const float *q, int32_t gq, int32_t n, const float *k, float *s, int64_t ss);
    void (*dots_f16)(const float *q, int32_t gq, int32_t n, const uint16_t *k, float *s, int64_t ss);
    void (*axpys_f32)(float *o, int32_t gq, int32_t n, const float *p, int64_t ps, const float *v);
    void (*axpys_f16)(float *o, int32_t gq, int32_t n, const float *p, int64_t ps, const uint16_t *v);
    /* Blocked over the whole cell list (attn_tile_kernels.c; NULL: use the per-cell entries above), bitwise
     * the per-cell results. cl int32[nc]: the cells; the K / V row of cell c is at kb / vb + cl[c] * kst / vst
     * bytes (f32 or f16 elements).
     *   scores: s[h * nc + c] = q_h . K_c for h < gq, c < nc (q: gq rows of n floats; s: float[gq][nc])
     *   pv:     o_h[d] = sum over c in list order of p[h * nc + c] * V_c[d] (o: float[gq][n], fully written) */
    void (*scores_f32)(const float *q, int32_t gq, int32_t n, const uint8_t *kb, int64_t kst, const int32_t *cl,
                       int32_t nc, float *s);
    void (*scores_f16)(const float *q, int32_t gq, int32_t n, const uint8_t *kb, int64_t kst, const int32_t *cl,
                       int32_t nc, float *s);
    void (*pv_f32)(float *o, int32_t gq, int32_t n, const float *p, int32_t nc, const uint8_t *vb, int64_t vst,
                   const int32_t *cl);
    void (*pv_f16)(float *o, int32_t gq, int32_t n, const float *p, int32_t nc, const uint8_t *vb, int64_t vst,
                   const int32_t *cl);
    /* s float[gq][nc]: raw scores -> probabilities in place (soft-cap, scale, max, expf, double sum in cell
     * order, normalise, f16-round when f16 is set), bitwise av_unit's scalar loop; NULL: that loop. */
    void (*probs)(float *s, int32_t gq, int32_t nc, float scale, float softcap, int32_t f16);
} ub_av_kernels;

/* Fill *kern: the AVX2 loops when avx2 is set and the row length is a multiple of 8, else plain C. */
void ub_av_select(ub_av_kernels *kern, int avx2, int32_t hd_k, int32_t hd_v);
/* Fill the blocked entries for back-end `backend` (UB_MM_*): NULL on generic or when the row length does not
 * suit the vector width (then the per-cell entries serve). */
void ub_av_select_tiles(ub_av_kernels *kern, int backend, int32_t hd_k, int32_t hd_v);

#endif
