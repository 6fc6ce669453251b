/* The IQ4_XS panel layout (rp_iq4xs.c) and its SIMD panel kernels (rp_xs_avx2.c, rp_xs_avx512.c): internal,
 * included by the repack code (rp_internal.h says what a layout is).
 *
 * A panel is RP_XS_P = 16 consecutive weight rows; block column ib (RP_XS_BB = 2240 bytes, 140 per row for the
 * file's 136, a multiple of 64 so every 64-byte load stays in one cache line) holds the 16 rows' super-blocks
 * ib (256 weights each, 8 sub-blocks of 32):
 *   bytes 0..2047:    the nibbles, sub-block s at 256 s laid out as one IQ4_NL block column (rp_iq4nl.c): four
 *                     64-byte quarters h; byte o of quarter h belongs to row c = o / 4 and holds element
 *                     32 s + 8 h + o % 4 in its low nibble, element 32 s + 8 h + 4 + o % 4 in its high nibble;
 *   bytes 2048..2079: the 16 f16 super-block scales d, row c at 2048 + 2 c;
 *   bytes 2080..2207: the sub-block scales decoded to int8 (6-bit scale - 32), sub-block s row c at 2080 + 16 s + c;
 *   bytes 2208..2239: zero.
 *
 * The operations per output element (every back-end): per super-block 8 lanes, lane j (0..7) the exact int32
 * sum over the sub-blocks s of sc[s] * (elements 32 s + 4 j .. 32 s + 4 j + 3 of value . x), and lane
 * accumulator j = fma(d_w * d_x, (float)lane j, acc j) from 0, super-blocks in order; y = ub_hsum8(acc)
 * (((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))). These are the IQ4_XS dot kernels' operations on every
 * back-end (mm_iq_avx2.c body_iq4_xs, the AVX-512 GEMM tile, the plain C dot_iq4_xs) and ggml-cpu's x86
 * vec_dot_iq4_xs_q8_K's, so panels and GGUF layout give the same bits, and llama.cpp's. */
#ifndef UB_RP_IQ4XS_H
#define UB_RP_IQ4XS_H

#include "rp_internal.h"

#define RP_XS_P 16
#define RP_XS_BB 2240
#define RP_XS_D 2048  /* offset of the f16 scales */
#define RP_XS_SC 2080 /* offset of the int8 sub-block scales */

extern const ub_rp_layout ub_rp_iq4xs;
/* The IQ4_XS panel kernel of a SIMD back-end (NULL for another type or without the instructions). */
ub_rp_panel_fn ub_rp_xs_avx2(int32_t type);
ub_rp_panel_fn ub_rp_xs_avx512(int32_t type);

#endif
