/* The vector loops of ub_silu_mul (ops.c): silu_simd.c. */
#ifndef UB_SILU_SIMD_H
#define UB_SILU_SIMD_H

#include <stdint.h>

/* g, u, y: float[n] (caller-owned; y may alias g or u). Computes y[i] = silu(g[i]) * u[i] bitwise as the
 * scalar loop of ops.c for the first n - n % W elements (W the vector width of back-end be) and returns
 * how many it did: 0 on the generic back-end or a build without SIMD (the caller does the rest). */
int64_t ub_silu_mul_simd(int be, const float *g, const float *u, float *y, int64_t n);

#endif
