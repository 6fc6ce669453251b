/* The SIMD table GeGLU (act_simd.c): internal to layer.c. */
#ifndef UB_ACT_SIMD_H
#define UB_ACT_SIMD_H

#include <stdint.h>

/* y[i] = gelu(g[i]) * u[i] from the f16 table for i below the returned count (a multiple of 8; 0 on the
 * generic back-end), bitwise layer.c's ub_gelu_table_mul loop. table: float[65536], read only; g, u, y:
 * float[n], caller-owned (y may alias g or u); backend: a UB_MM_* value. */
int64_t ub_gelu_table_mul_simd(const float *table, const float *g, const float *u, float *y, int64_t n, int backend);

#endif
