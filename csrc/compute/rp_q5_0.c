/* The Q5_0 panel layout (rp_q5_0.h): pack / unpack of one block column and the plain C panel kernel (per
 * element the operations rp_q5_0.h gives: the generic Q5_0 dot kernel's). */
#include <string.h>

#include "ub_compute.h"
#include "rp_q5_0.h"

#define P RP_Q5_P
#define GB 22 /* GGUF block: f16 d, u32 qh (bit j: fifth bit of element j), qs[16] */

/* element e (0..31) of GGUF Q5_0 block b: its 5-bit code */
static int code_gguf(const uint8_t *b, int e) {
    const uint32_t h = (uint32_t)b[2] | (uint32_t)b[3] << 8 | (uint32_t)b[4] << 16 | (uint32_t)b[5] << 24;
    const int lo = e < 16 ? b[6 + e] & 15 : b[6 + e - 16] >> 4;
    return lo | (int)((h >> e) & 1u) << 4;
}

/* byte offset in a block column of the nibble byte holding element e of row c (low nibble: e % 8 < 4) */
static int nib_off(int c, int e) { return 64 * (e / 8) + 4 * c + e % 4; }

/* element e of row c of block column b (read only): its 5-bit code */
static int code_panel(const uint8_t *b, int c, int e) {
    const uint8_t v = b[nib_off(c, e)];
    const int lo = (e % 8) < 4 ? v & 15 : v >> 4;
    return lo | ((b[RP_Q5_H + 4 * c + e % 4] >> (e / 4)) & 1) << 4;
}

/* rows: 16 GGUF rows (row c at rows + c * row_bytes, read only); dst: block column ib (352 bytes, written) */
static void pack_q5_0(const uint8_t *rows, int64_t row_bytes, int64_t ib, uint8_t *dst) {
    memset(dst, 0, RP_Q5_BB);
    for (int c = 0; c < P; c++) {
        const uint8_t *b = rows + c * row_bytes + ib * GB;
        dst[RP_Q5_D + 2 * c] = b[0];
        dst[RP_Q5_D + 2 * c + 1] = b[1];
        for (int e = 0; e < 32; e++) {
            const int q = code_gguf(b, e);
            dst[nib_off(c, e)] |= (uint8_t)((q & 15) << ((e % 8) < 4 ? 0 : 4));
            dst[RP_Q5_H + 4 * c + e % 4] |= (uint8_t)((q >> 4) << (e / 4));
        }
    }
}

/* src: one block column (read only); blk: row c's GGUF block (22 bytes, written) */
static void unpack_q5_0(const uint8_t *src, int c, uint8_t *blk) {
    memset(blk, 0, GB);
    blk[0] = src[RP_Q5_D + 2 * c];
    blk[1] = src[RP_Q5_D + 2 * c + 1];
    uint32_t h = 0;
    for (int e = 0; e < 32; e++) {
        const int q = code_panel(src, c, e);
        h |= (uint32_t)(q >> 4) << e;
        blk[6 + e % 16] |= (uint8_t)((q & 15) << (e < 16 ? 0 : 4));
    }
    for (int i = 0; i < 4; i++) blk[2 + i] = (uint8_t)(h >> (8 * i));
}

/* The plain C panel kernel (rp_internal.h's contract): p: nb block columns; a: nr Q8_0 rows. */
static void panel_q5_0_generic(int64_t nb, const uint8_t *p, const uint8_t *a, int64_t as, int nr, float *y,
                               int64_t ys) {
    float acc[UB_MM_RT][P];
    memset(acc, 0, sizeof acc);
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = p + ib * RP_Q5_BB;
        int8_t q[P][32];
        for (int c = 0; c < P; c++)
            for (int e = 0; e < 32; e++) q[c][e] = (int8_t)(code_panel(b, c, e) - 16);
        for (int r = 0; r < nr; r++) {
            const ub_act_q8_0 *x = (const ub_act_q8_0 *)(a + r * as) + ib;
            for (int c = 0; c < P; c++) {
                int32_t isum = 0;
                for (int e = 0; e < 32; e++) isum += q[c][e] * x->qs[e];
                const float dw = ub_h2f((uint16_t)(b[RP_Q5_D + 2 * c] | (b[RP_Q5_D + 2 * c + 1] << 8)));
                acc[r][c] += (dw * x->d) * (float)isum;
            }
        }
    }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < P; c++) y[r * ys + c] = acc[r][c];
}

const ub_rp_layout ub_rp_q5_0 = {UB_T_Q5_0, P, RP_Q5_BB, pack_q5_0, unpack_q5_0, panel_q5_0_generic};
