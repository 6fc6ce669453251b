/* Inner loops of the visible-cell attention (internal): dot products of a query with a K row and
 * o += p * V row, for f32 and f16 K/V. Each has one fixed operation order per back-end. */
#ifndef UB_ATTN_VIS_KERNELS_H
#define UB_ATTN_VIS_KERNELS_H

#include <stdint.h>

typedef struct {
    float (*dot_f32)(const float *q, const float *k, int32_t n);    /* q, k: float[n] */
    float (*dot_f16)(const float *q, const uint16_t *k, int32_t n); /* k: half[n] */
    void (*axpy_f32)(float *o, float p, const float *v, int32_t n); /* o[d] += p * v[d] */
    void (*axpy_f16)(float *o, float p, const uint16_t *v, int32_t n);
} ub_av_kernels;

/* Fill *kern: the AVX2 loops when avx2 is set and the row length is a multiple of 8, else plain C. */
void ub_av_select(ub_av_kernels *kern, int avx2, int32_t hd_k, int32_t hd_v);

#endif
