/* The Q5_0 panel layout (rp_q5_0.c) and its SIMD panel kernels (rp_q5_avx2.c, rp_q5_avx512.c): internal,
 * included by the repack code (rp_internal.h says what a layout is).
 *
 * A panel is RP_Q5_P = 16 consecutive weight rows; block column ib (RP_Q5_BB = 352 bytes = 16 x the file's 22:
 * 5 bits per weight, nothing added) holds the 16 rows' blocks ib (32 weights, value v = e - 16, e the 5-bit
 * code: the low nibble and the fifth bit):
 *   bytes 0..255:   the low nibbles as an IQ4_NL block column's (rp_iq4nl.c): four 64-byte quarters h; byte o
 *                   of quarter h belongs to row c = o / 4 and holds element 8 h + o % 4 in its low nibble,
 *                   element 8 h + 4 + o % 4 in its high nibble;
 *   bytes 256..319: the fifth bits as a byte plane: byte o (row c = o / 4) has in bit g the fifth bit of
 *                   element 4 g + o % 4 (g = 0..7), so group g's 64 bytes of e (the 4 elements 4g..4g+3 of
 *                   every row, lane c = row c) are nibbles | ((plane shifted by 4 - g) & 0x10): a shift and
 *                   an and per group, on 512 or 256 bits (half s of every 64-byte piece: rows 8s .. 8s + 7);
 *   bytes 320..351: the 16 f16 scales d, row c at 320 + 2 c.
 *
 * The operations per output element (every back-end): per block the exact int32 isum = sum of v * x over the
 * 32 elements (the SIMD kernels: vpdpbusd / maddubs of e against x, less 16 * sum(x)), then
 * acc = acc + (d_w * d_x) * (float)isum (a product, a product, an add: no fma) from acc = 0, blocks in order,
 * y = acc. These are the plain C Q5_0 dot kernel's operations (mm_generic.c DOT_Q8_0_PAIRED), so the panels
 * give the generic back-end's GGUF bits on every back-end (the SIMD dot kernels on the GGUF layout keep their
 * 8-lane sums and differ in the last bits, as for IQ4_NL / IQ4_XS: a panel column is always computed by the
 * panel kernels and a tail column by the dot kernels, so each element has one fixed sequence). */
#ifndef UB_RP_Q5_0_H
#define UB_RP_Q5_0_H

#include "rp_internal.h"

#define RP_Q5_P 16
#define RP_Q5_BB 352
#define RP_Q5_H 256 /* offset of the fifth-bit plane */
#define RP_Q5_D 320 /* offset of the f16 scales */

extern const ub_rp_layout ub_rp_q5_0;
/* The Q5_0 panel kernel of a SIMD back-end (NULL for another type or without the instructions). */
ub_rp_panel_fn ub_rp_q5_avx2(int32_t type);
ub_rp_panel_fn ub_rp_q5_avx512(int32_t type);

#endif
