/* The k-quant panel layouts (Q4_K, Q6_K; rp_kquant.c) and their SIMD panel kernels (rp_kq_avx2.c,
 * rp_kq_avx512.c): internal, included by the repack code (rp_internal.h says what a layout is).
 *
 * A panel is RP_KQ_P = 8 consecutive weight rows; its block column ib holds the 8 rows' blocks ib one after
 * the other, row c at c * (block bytes), each block re-laid so the kernels decode nothing per block but the
 * nibbles:
 *
 * Q4_K block (RP_Q4K_BYTES = 148 bytes for 256 weights):
 *   [0..1] fp16 d, [2..3] fp16 dmin (as in the GGUF block); [4..11] u8 sc[8], [12..19] u8 mn[8]: the 6-bit
 *   sub-block scales and mins, decoded; [20..147] two 64-byte nibble groups: byte i of group g =
 *   e[128 g + i] | e[128 g + 64 + i] << 4, e the 4-bit values in element order (group & 0x0F is elements
 *   128g .. 128g + 63, (group >> 4) & 0x0F elements 128g + 64 .. 128g + 127).
 * Q6_K block (RP_Q6K_BYTES = 210 bytes, the GGUF block's size), e in [0, 63], value e - 32:
 *   [0..1] fp16 d; [2..17] int8 sc[16] (16-element sub-blocks, as in the GGUF block); [18..145] the low 4 bits
 *   of e in two nibble groups arranged as Q4_K's; [146..209] the high 2 bits: byte i = h(e[i]) |
 *   h(e[64 + i]) << 2 | h(e[128 + i]) << 4 | h(e[192 + i]) << 6.
 *
 * Results: unlike IQ4_NL's panels these keep each back-end's own k-quant results. The plain C panel kernel
 * performs the generic dot kernel's operations (mm_generic.c kdot), the AVX2 one the AVX2 dot kernel's
 * (mm_avx2.c body_q45k / body_q6k), the AVX-512 one the same as the AVX2 one (so avx2 = avxvnni = avx512
 * bitwise, as on the GGUF layout): a weight gives the same bits repacked or not, on every back-end. */
#ifndef UB_RP_KQUANT_H
#define UB_RP_KQUANT_H

#include "rp_internal.h"

#define RP_KQ_P 8
#define RP_Q4K_BYTES 148
#define RP_Q6K_BYTES 210

extern const ub_rp_layout ub_rp_q4k, ub_rp_q6k;
/* The k-quant panel kernels of a SIMD back-end (NULL for another type or without the instructions). */
ub_rp_panel_fn ub_rp_kq_avx2(int32_t type);
ub_rp_panel_fn ub_rp_kq_avx512(int32_t type);

#endif
