/* Internal contracts of the i-quant / ternary / MXFP4 weight types (not exported to Python): their lookup
 * tables (mm_iq_tables.c) and the per-back-end kernel lookups (mm_iq_generic.c, mm_iq_avx2.c).
 *
 * The tables are not written out in ubatch's source: the non-linear IQ4_NL values and the IQ2 / IQ3 / IQ1
 * grids come from the gguf package's own compact representation (gguf.quants), passed in once by
 * ubatch.compute.iq_tables through ub_mm_set_iq_tables before the first use of a type that needs them (the
 * types' table entries say so; matmul / get_rows refuse them until then). The sign table of the IQ2 / IQ3
 * types and the MXFP4 (e2m1) values are computed here from their definitions. */
#ifndef UB_MM_IQ_H
#define UB_MM_IQ_H

#include <stdint.h>

#include "mm_internal.h"

/* The grids: entry i holds the grid point's bytes, element j in byte j (little-endian). IQ2 grids: bytes in
 * {8, 25, 43}; IQ3: {4, 12, ..., 62} / {1, 3, ..., 15}; IQ1: {-1, 0, 1} as int8. */
extern int8_t ub_iq4nl_kv[16];
extern uint64_t ub_iq2xxs_grid[256], ub_iq2xs_grid[512], ub_iq2s_grid[1024], ub_iq1s_grid[2048];
extern uint32_t ub_iq3xxs_grid[256], ub_iq3s_grid[512];
/* ksigns: 7 sign bits -> 8 (the eighth makes the count of set bits even); MXFP4 e2m1 codes -> twice the value */
extern const uint8_t ub_iq_ksigns[128];
extern const int8_t ub_mxfp4_kv[16];
/* NVFP4's unsigned e4m3 scale bytes -> value / 2 (the e2m1 values being doubled), exact; 0x00 / 0x7F -> 0 */
extern const float ub_ue4m3_half[256];
/* 1 once ub_mm_set_iq_tables succeeded */
int ub_mm_iq_ready(void);

/* e8m0 exponent byte -> 2^(e - 128) (the MXFP4 block scale, halved as the doubled e2m1 values want) */
static inline float ub_e8m0_half(uint8_t e) {
    union { uint32_t u; float f; } v;
    v.u = e < 2 ? (uint32_t)0x00200000u << e : (uint32_t)(e - 1) << 23;
    return v.f;
}

/* The horizontal sum of 8 float lanes in the order of the AVX2 kernels' hsum (and ggml-cpu's hsum_float_8):
 * ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)). a: 8 floats, read only. */
static inline float ub_hsum8(const float *a) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/* The table entry of one of these types (plain C kernels), or NULL. */
const ub_mm_type *ub_mm_find_iq(int32_t type);
/* The table entry of NVFP4, Q1_0 or Q2_0 (mm_fp4_bits.c, plain C kernels), or NULL. */
const ub_mm_type *ub_mm_find_fp4_bits(int32_t type);
/* Their AVX2 dot kernels (NVFP4 / Q1_0 / Q2_0 included), or NULL (then the generic one runs). */
ub_mm_dot_fn ub_mm_dot_iq_avx2(int32_t type);

#endif
