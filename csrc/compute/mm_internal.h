/* Internal contracts of the matmul kernels (not exported to Python): the activation block layouts, the
 * dot-kernel signature and the per-type table. */
#ifndef UB_MM_INTERNAL_H
#define UB_MM_INTERNAL_H

#include <stdint.h>

#define UB_MM_RT 6 /* activation rows per dot-kernel call (the row tile: one weight load serves them all) */

/* How far ahead (bytes) a Q8_0 GEMM tile over prepared rows (mm_q8_tile.h, mm_q8_tile_avx2.c) prefetches
 * the weight rows it will read, and the helper that issues them. */
#define UB_MM_TILE_PF 16384

/* Share t of nt (t < nt) of the prefetches of the tb bytes at w + UB_MM_TILE_PF (w: the tile's weight rows,
 * read only; a hint, never a fault): a tile issues share t before its row tile t, so the tb / 64 prefetches
 * are spread over the tile instead of one burst at its start (that burst waited on the L1 miss buffers and
 * left DRAM latency unhidden: Gemma 3's 262144 x 640 lm head at n = 16, 1 thread, 57-65 ms in a burst,
 * 42-46 ms spread; Zen 4). */
static inline void ub_mm_tile_prefetch(const uint8_t *w, int64_t tb, int64_t t, int64_t nt) {
    const int64_t p0 = (tb * t / nt) & ~(int64_t)63, p1 = t + 1 == nt ? tb : (tb * (t + 1) / nt) & ~(int64_t)63;
    for (int64_t p = p0; p < p1; p += 64) __builtin_prefetch(w + UB_MM_TILE_PF + p, 0, 3);
}

/* Defines the dot kernel NAME (declared DECL, e.g. `static AVX2`; signature as ub_mm_dot_fn below) by calling
 * BODY(nb, w, a, as, NR, y, ys) with NR a compile-time constant 1..UB_MM_RT, so that each row count gets its
 * own unrolled body (an always-inline BODY). Reads and writes only what BODY does. */
#define UB_DOT_BY_ROWS(DECL, NAME, BODY)                                                                    \
    DECL void NAME(int64_t nb, const uint8_t *w, const uint8_t *a, int64_t as, int nr, float *y, int64_t ys) { \
        switch (nr) {                                                                                       \
        case 1: BODY(nb, w, a, as, 1, y, ys); break;                                                        \
        case 2: BODY(nb, w, a, as, 2, y, ys); break;                                                        \
        case 3: BODY(nb, w, a, as, 3, y, ys); break;                                                        \
        case 4: BODY(nb, w, a, as, 4, y, ys); break;                                                        \
        case 5: BODY(nb, w, a, as, 5, y, ys); break;                                                        \
        default: BODY(nb, w, a, as, 6, y, ys); break;                                                       \
        }                                                                                                   \
    }

/* Quantised activation blocks (ubatch's own layout; the numbers are ggml-cpu's). d and s are the
 * fp16-rounded values, stored decoded as float. */
typedef struct { float d; int8_t qs[32]; } ub_act_q8_0;              /* d = fp16(max|x| / 127) */
typedef struct { float d; float s; int8_t qs[32]; } ub_act_q8_1;    /* s = fp16(d_exact * sum qs) */
typedef struct { float d; int8_t qs[256]; int16_t bsums[16]; } ub_act_q8_k; /* d = f32, bsums per 16 */

enum { UB_ACT_F32, UB_ACT_F16, UB_ACT_BF16, UB_ACT_Q8_0, UB_ACT_Q8_1, UB_ACT_Q8_K };

/* A dot kernel: y[r * ys] = dot(weight row w, activation row r) for r < nr (1 <= nr <= UB_MM_RT).
 *   nb: blocks per row (elements for F32/F16/BF16); w: one weight row (nb blocks, read only);
 *   a: nr quantised activation rows, row r at a + r * as bytes (read only); y: output, stride ys floats.
 * Contract that makes matmul batch-invariant: the value written for row r is computed by the same
 * sequence of operations whatever nr is and whatever the other rows hold (one accumulator per row). */
typedef void (*ub_mm_dot_fn)(int64_t nb, const uint8_t *w, const uint8_t *a, int64_t as, int nr, float *y,
                             int64_t ys);
/* A GEMM tile: y[r * ys + c] = dot(weight row c at w + c * ws, activation row r at a + r * as) for
 * r < gr, c < gc (the back-end's tile: exactly gr rows and gc columns). Same contract as a dot kernel: each
 * element is bitwise what the type's dot kernel of that back-end gives for that row alone. */
typedef void (*ub_mm_gemm_fn)(int64_t nb, const uint8_t *w, int64_t ws, const uint8_t *a, int64_t as, float *y,
                              int64_t ys);
/* An activation row preparer: one quantised row (nb blocks at xq, read only) -> out (prep_bytes(nb) bytes,
 * caller-owned), the layout a GEMM tile with a prep reads instead of the quantised rows. */
typedef void (*ub_mm_prep_fn)(int64_t nb, const uint8_t *xq, uint8_t *out);
typedef struct {
    ub_mm_gemm_fn fn;
    int gc, gr;         /* columns (weight rows) and activation rows of a tile */
    ub_mm_gemm_fn fn1;  /* or NULL: a tile of gc columns x 1 row, for the rows fewer than gr (decode B = 1) */
    /* or NULL: a tile over prepared rows (prep / prep_bytes set, fn NULL): y[r * ys + c] for r < nr (a
     * multiple of gr), c < gc, from rows made by prep (row r at a + r * as, as = prep_bytes(nb), a multiple of
     * 64); same contract per element as fn */
    void (*fnr)(int64_t nb, const uint8_t *w, int64_t ws, const uint8_t *a, int64_t as, int64_t nr, float *y, int64_t ys);
    ub_mm_prep_fn prep;
    int64_t (*prep_bytes)(int64_t nb);
} ub_mm_gemm;
/* Activation row quantiser: x: float[k] -> out (act row bytes). */
typedef void (*ub_mm_quant_fn)(const float *x, int64_t k, uint8_t *out);
/* Block dequantiser: one block -> float[blck]. */
typedef void (*ub_mm_deq_fn)(const uint8_t *b, float *y);

typedef struct {
    int32_t type, blck, bytes; /* weight type, elements and bytes per block */
    int32_t act;               /* UB_ACT_* the activations become */
    ub_mm_dot_fn dot_generic;
    ub_mm_deq_fn deq;
    int32_t tables;            /* 1: needs the lookup tables of mm_iq.h (ub_mm_set_iq_tables) */
} ub_mm_type;

/* The table entry of `type`, or NULL. */
const ub_mm_type *ub_mm_find(int32_t type);
/* 1 when type t can run now (its lookup tables, if it needs any, are set). */
int ub_mm_type_ready(const ub_mm_type *t);
/* Bytes of one activation row of k elements for act kind `act`; k must be a multiple of its block. */
int64_t ub_mm_act_row_bytes(int32_t act, int64_t k);
/* Quantisers (generic; the AVX2 ones produce the same bytes). */
void ub_mm_quant_row_generic(int32_t act, const float *x, int64_t k, uint8_t *out);
void ub_mm_quant_row_avx2(int32_t act, const float *x, int64_t k, uint8_t *out);
/* The dot kernel of a weight type on a SIMD back-end, or NULL when that back-end has none of its own (the
 * driver then takes the next simpler back-end's: avx512 -> avx2, avxvnni -> avx2, avx2 -> generic). */
ub_mm_dot_fn ub_mm_dot_avx2(int32_t type);
ub_mm_dot_fn ub_mm_dot_avxvnni(int32_t type);
ub_mm_dot_fn ub_mm_dot_avx512(int32_t type);
/* The SIMD dot kernels of NVFP4, Q1_0, Q2_0 (mm_fp4_simd.h: AVX2 build, AVX-512 build), or NULL. */
ub_mm_dot_fn ub_mm_dot_fp4_avx2(int32_t type);
ub_mm_dot_fn ub_mm_dot_fp4_avx512(int32_t type);
/* The GEMM tile of a weight type on a back-end ({NULL, 0, 0} when it has none: the dot kernels do it all). */
ub_mm_gemm ub_mm_gemm_avx2(int32_t type); /* Q8_0 only: mm_q8_tile_avx2.c */
ub_mm_gemm ub_mm_gemm_avxvnni(int32_t type);
ub_mm_gemm ub_mm_gemm_avx512(int32_t type);
/* The decode tiles (fn1 only) of NVFP4, Q1_0, Q2_0 (mm_fp4_simd.h: the AVX2 build for the avx2 and avxvnni
 * back-ends, the AVX-512 build), {NULL, 0, 0} for the other types or without SIMD support in the build. */
ub_mm_gemm ub_mm_gemm_fp4_avx2(int32_t type);
ub_mm_gemm ub_mm_gemm_fp4_avx512(int32_t type);

#endif
