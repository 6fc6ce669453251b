/* The IQ4_XS panel layout (rp_iq4xs.h): pack / unpack of one block column and the plain C panel kernel
 * (per element the operations rp_iq4xs.h gives: the IQ4_XS dot kernels' 8-lane order). */
#include <math.h>
#include <string.h>

#include "ub_compute.h"
#include "mm_iq.h"
#include "rp_iq4xs.h"

#define P RP_XS_P
#define GB 136 /* GGUF block: f16 d, u16 scales_h, u8 scales_l[4], qs[128] */

/* element e (0..255) of a GGUF IQ4_XS block b: its nibble */
static int nib_gguf(const uint8_t *b, int e) {
    const uint8_t v = b[8 + 16 * (e / 32) + e % 16];
    return (e % 32) < 16 ? v & 15 : v >> 4;
}

/* the 6-bit scale of sub-block s of GGUF block b */
static int scale_gguf(const uint8_t *b, int s) {
    const int sh = b[2] | (b[3] << 8);
    return ((b[4 + s / 2] >> (4 * (s % 2))) & 15) | (((sh >> (2 * s)) & 3) << 4);
}

/* byte offset in a block column of the nibble byte holding element e of row c (low nibble: e % 8 < 4) */
static int nib_off(int c, int e) { return 256 * (e / 32) + 64 * ((e % 32) / 8) + 4 * c + e % 4; }

/* rows: 16 GGUF rows (row c at rows + c * row_bytes, read only); dst: block column ib (2240 bytes, written) */
static void pack_iq4xs(const uint8_t *rows, int64_t row_bytes, int64_t ib, uint8_t *dst) {
    memset(dst, 0, RP_XS_BB);
    for (int c = 0; c < P; c++) {
        const uint8_t *b = rows + c * row_bytes + ib * GB;
        dst[RP_XS_D + 2 * c] = b[0];
        dst[RP_XS_D + 2 * c + 1] = b[1];
        for (int s = 0; s < 8; s++) dst[RP_XS_SC + 16 * s + c] = (uint8_t)(int8_t)(scale_gguf(b, s) - 32);
        for (int e = 0; e < 256; e++) dst[nib_off(c, e)] |= (uint8_t)(nib_gguf(b, e) << ((e % 8) < 4 ? 0 : 4));
    }
}

/* src: one block column (read only); blk: row c's GGUF block (136 bytes, written) */
static void unpack_iq4xs(const uint8_t *src, int c, uint8_t *blk) {
    memset(blk, 0, GB);
    blk[0] = src[RP_XS_D + 2 * c];
    blk[1] = src[RP_XS_D + 2 * c + 1];
    int sh = 0;
    for (int s = 0; s < 8; s++) {
        const int l = (int8_t)src[RP_XS_SC + 16 * s + c] + 32;
        blk[4 + s / 2] |= (uint8_t)((l & 15) << (4 * (s % 2)));
        sh |= (l >> 4) << (2 * s);
    }
    blk[2] = (uint8_t)sh;
    blk[3] = (uint8_t)(sh >> 8);
    for (int e = 0; e < 256; e++) {
        const uint8_t v = src[nib_off(c, e)];
        const int q = (e % 8) < 4 ? v & 15 : v >> 4;
        blk[8 + 16 * (e / 32) + e % 16] |= (uint8_t)((e % 32) < 16 ? q : q << 4);
    }
}

/* The plain C panel kernel (rp_internal.h's contract): p: nb block columns; a: nr Q8_K rows; y[r * ys + c]. */
static void panel_iq4xs_generic(int64_t nb, const uint8_t *p, const uint8_t *a, int64_t as, int nr, float *y,
                                int64_t ys) {
    float acc[UB_MM_RT][P][8];
    memset(acc, 0, sizeof acc);
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = p + ib * RP_XS_BB;
        int8_t q[P][256];
        for (int c = 0; c < P; c++)
            for (int e = 0; e < 256; e++) {
                const uint8_t v = b[nib_off(c, e)];
                q[c][e] = ub_iq4nl_kv[(e % 8) < 4 ? v & 15 : v >> 4];
            }
        for (int r = 0; r < nr; r++) {
            const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
            for (int c = 0; c < P; c++) {
                const float dw = ub_h2f((uint16_t)(b[RP_XS_D + 2 * c] | (b[RP_XS_D + 2 * c + 1] << 8)));
                const float d = dw * x->d;
                for (int j = 0; j < 8; j++) {
                    int32_t lane = 0;
                    for (int s = 0; s < 8; s++) {
                        int32_t t = 0;
                        for (int e = 32 * s + 4 * j; e < 32 * s + 4 * j + 4; e++) t += q[c][e] * x->qs[e];
                        lane += (int8_t)b[RP_XS_SC + 16 * s + c] * t;
                    }
                    acc[r][c][j] = fmaf(d, (float)lane, acc[r][c][j]);
                }
            }
        }
    }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < P; c++) y[r * ys + c] = ub_hsum8(acc[r][c]);
}

const ub_rp_layout ub_rp_iq4xs = {UB_T_IQ4_XS, P, RP_XS_BB, pack_iq4xs, unpack_iq4xs, panel_iq4xs_generic};
