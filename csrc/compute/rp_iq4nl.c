/* The IQ4_NL panel layout (16 rows) and its plain C kernel.
 *
 * A block column (288 bytes = 16 GGUF blocks of 18) holds blocks ib of the panel's 16 rows:
 *   bytes 0..31:   the 16 f16 scales d, row c at 2c;
 *   bytes 32..287: the 512 nibbles, in four 64-byte quarters h = 0..3. Byte o of quarter h (o < 64) belongs to
 *                  row c = o / 4 and holds element 8h + o % 4 in its low nibble and element 8h + 4 + o % 4 in
 *                  its high nibble.
 * So one 64-byte load, masked (low nibbles) or shifted (high), gives a vector whose 32-bit lane c holds 4
 * consecutive elements 4g .. 4g + 3 of row c (group g = 2h or 2h + 1): a vpdpbusd against the activation's
 * group g broadcast to every lane adds the 4 products of all 16 rows at once (rp_avx512.c; the 256-bit
 * kernels take each 32-byte half: rows 0..7, then 8..15).
 *
 * The operations per output element (every back-end, this file included): per block the exact int32
 * isum = sum over the 32 elements of value * x, then acc = fma(d_w * d_x, (float)isum, acc) in block order
 * from acc = 0, y = acc. Hence every back-end's panel kernel gives these same bits. */
#include <math.h>
#include <string.h>

#include "ub_compute.h"
#include "mm_iq.h"
#include "rp_internal.h"

#define P 16
#define BB 288

/* GGUF IQ4_NL block (18 bytes: f16 d, qs[16]): element e's nibble */
static inline int nib_gguf(const uint8_t *b, int e) { return e < 16 ? b[2 + e] & 15 : b[2 + e - 16] >> 4; }

/* rows: 16 GGUF rows (row c at rows + c * row_bytes, read only); dst: one block column (288 bytes, written) */
static void pack_iq4nl(const uint8_t *rows, int64_t row_bytes, int64_t ib, uint8_t *dst) {
    for (int c = 0; c < P; c++) {
        const uint8_t *b = rows + c * row_bytes + ib * 18;
        dst[2 * c] = b[0];
        dst[2 * c + 1] = b[1];
        for (int h = 0; h < 4; h++)
            for (int t = 0; t < 4; t++)
                dst[32 + 64 * h + 4 * c + t] = (uint8_t)(nib_gguf(b, 8 * h + t) | (nib_gguf(b, 8 * h + 4 + t) << 4));
    }
}

/* src: one block column (read only); blk: row c's GGUF block (18 bytes, written) */
static void unpack_iq4nl(const uint8_t *src, int c, uint8_t *blk) {
    uint8_t q[32];
    for (int h = 0; h < 4; h++)
        for (int t = 0; t < 4; t++) {
            const uint8_t v = src[32 + 64 * h + 4 * c + t];
            q[8 * h + t] = v & 15;
            q[8 * h + 4 + t] = v >> 4;
        }
    blk[0] = src[2 * c];
    blk[1] = src[2 * c + 1];
    for (int e = 0; e < 16; e++) blk[2 + e] = (uint8_t)(q[e] | (q[e + 16] << 4));
}

/* The plain C panel kernel (rp_internal.h's contract): p: nb block columns; a: nr Q8_0 rows. */
static void panel_iq4nl_generic(int64_t nb, const uint8_t *p, const uint8_t *a, int64_t as, int nr, float *y,
                                int64_t ys) {
    float acc[UB_MM_RT][P];
    memset(acc, 0, sizeof acc);
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = p + ib * BB;
        int8_t q[P][32];
        float dw[P];
        for (int c = 0; c < P; c++) dw[c] = ub_h2f((uint16_t)(b[2 * c] | (b[2 * c + 1] << 8)));
        for (int h = 0; h < 4; h++)
            for (int c = 0; c < P; c++)
                for (int t = 0; t < 4; t++) {
                    const uint8_t v = b[32 + 64 * h + 4 * c + t];
                    q[c][8 * h + t] = ub_iq4nl_kv[v & 15];
                    q[c][8 * h + 4 + t] = ub_iq4nl_kv[v >> 4];
                }
        for (int r = 0; r < nr; r++) {
            const ub_act_q8_0 *x = (const ub_act_q8_0 *)(a + r * as) + ib;
            for (int c = 0; c < P; c++) {
                int32_t isum = 0;
                for (int e = 0; e < 32; e++) isum += q[c][e] * x->qs[e];
                acc[r][c] = fmaf(dw[c] * x->d, (float)isum, acc[r][c]);
            }
        }
    }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < P; c++) y[r * ys + c] = acc[r][c];
}

const ub_rp_layout ub_rp_iq4nl = {UB_T_IQ4_NL, P, BB, pack_iq4nl, unpack_iq4nl, panel_iq4nl_generic};
