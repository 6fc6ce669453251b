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
} ub_av_kernels;

/* Fill *kern: the AVX2 loops when avx2 is set and the row length is a multiple of 8, else plain C. */
void ub_av_select(ub_av_kernels *kern, int avx2, int32_t hd_k, int32_t hd_v);

#endif
