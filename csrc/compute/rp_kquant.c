/* The Q4_K and Q6_K panel layouts (rp_kquant.h): pack / unpack of one block column and the plain C panel
 * kernels, whose operations per output element are the generic dot kernel's (mm_generic.c kdot: per block the
 * exact int32 isum = sum_s sc[s] * (sub-block s . x) and imin = sum_s mn[s] * bsum(s), then
 * acc += (d_w * d_x) * isum - (dmin_w * d_x) * imin (Q6_K: acc += (d_w * d_x) * isum, values e - 32), blocks in
 * order, one accumulator per element). */
#include <string.h>

#include "ub_compute.h"
#include "rp_kquant.h"

static float rd_h(const uint8_t *p) { return ub_h2f((uint16_t)(p[0] | (p[1] << 8))); }

/* ---- Q4_K ---- */

/* b: a GGUF Q4_K block (144 bytes, read); p: its panel block (148 bytes, written) */
static void q4k_to_panel(const uint8_t *b, uint8_t *p) {
    uint8_t e[256];
    const uint8_t *qs = b + 16, *s = b + 4;
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            e[64 * c + l] = qs[32 * c + l] & 15;
            e[64 * c + 32 + l] = qs[32 * c + l] >> 4;
        }
    memcpy(p, b, 4); /* fp16 d, dmin */
    for (int j = 0; j < 4; j++) {
        p[4 + j] = s[j] & 63;
        p[12 + j] = s[j + 4] & 63;
    }
    for (int j = 4; j < 8; j++) {
        p[4 + j] = (uint8_t)((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
        p[12 + j] = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
    for (int g = 0; g < 2; g++)
        for (int i = 0; i < 64; i++) p[20 + 64 * g + i] = (uint8_t)(e[128 * g + i] | (e[128 * g + 64 + i] << 4));
}

/* element i (0..255) of a Q4_K or Q6_K panel block's nibble groups at n: its low 4 bits */
static int nib_at(const uint8_t *n, int i) {
    const uint8_t v = n[64 * (i >> 7) + (i & 63)];
    return (i & 64) ? v >> 4 : v & 15;
}

/* p: a Q4_K panel block (read); b: the GGUF block (144 bytes, written) */
static void q4k_from_panel(const uint8_t *p, uint8_t *b) {
    memcpy(b, p, 4);
    uint8_t *s = b + 4;
    const uint8_t *sc = p + 4, *mn = p + 12;
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
    }
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            b[16 + 32 * c + l] = (uint8_t)(nib_at(p + 20, 64 * c + l) | (nib_at(p + 20, 64 * c + 32 + l) << 4));
}

/* rows: 8 GGUF rows (row c at rows + c * row_bytes, read only); dst: block column ib (8 x 148 bytes) */
static void pack_q4k(const uint8_t *rows, int64_t row_bytes, int64_t ib, uint8_t *dst) {
    for (int c = 0; c < RP_KQ_P; c++) q4k_to_panel(rows + c * row_bytes + ib * 144, dst + c * RP_Q4K_BYTES);
}
static void unpack_q4k(const uint8_t *src, int c, uint8_t *blk) { q4k_from_panel(src + c * RP_Q4K_BYTES, blk); }

/* ---- Q6_K ---- */

/* b: a GGUF Q6_K block (210 bytes, read); p: its panel block (210 bytes, written) */
static void q6k_to_panel(const uint8_t *b, uint8_t *p) {
    uint8_t e[256];
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
        uint8_t *o = e + 128 * h;
        for (int l = 0; l < 32; l++) {
            o[l] = (uint8_t)((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4));
            o[l + 32] = (uint8_t)((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4));
            o[l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            o[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
    }
    memcpy(p, b + 208, 2);
    memcpy(p + 2, b + 192, 16);
    for (int g = 0; g < 2; g++)
        for (int i = 0; i < 64; i++) p[18 + 64 * g + i] = (uint8_t)((e[128 * g + i] & 15) | ((e[128 * g + 64 + i] & 15) << 4));
    for (int i = 0; i < 64; i++)
        p[146 + i] = (uint8_t)((e[i] >> 4) | ((e[64 + i] >> 4) << 2) | ((e[128 + i] >> 4) << 4) | ((e[192 + i] >> 4) << 6));
}

/* element i of a Q6_K panel block p: e in [0, 63] */
static int q6k_e(const uint8_t *p, int i) { return nib_at(p + 18, i) | (((p[146 + (i & 63)] >> (2 * (i >> 6))) & 3) << 4); }

/* p: a Q6_K panel block (read); b: the GGUF block (210 bytes, written) */
static void q6k_from_panel(const uint8_t *p, uint8_t *b) {
    memset(b, 0, 192);
    for (int h = 0; h < 2; h++) {
        uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
        for (int l = 0; l < 32; l++) {
            const int e0 = q6k_e(p, 128 * h + l), e1 = q6k_e(p, 128 * h + l + 32);
            const int e2 = q6k_e(p, 128 * h + l + 64), e3 = q6k_e(p, 128 * h + l + 96);
            ql[l] = (uint8_t)((e0 & 15) | ((e2 & 15) << 4));
            ql[l + 32] = (uint8_t)((e1 & 15) | ((e3 & 15) << 4));
            qh[l] = (uint8_t)((e0 >> 4) | ((e1 >> 4) << 2) | ((e2 >> 4) << 4) | ((e3 >> 4) << 6));
        }
    }
    memcpy(b + 192, p + 2, 16);
    memcpy(b + 208, p, 2);
}

static void pack_q6k(const uint8_t *rows, int64_t row_bytes, int64_t ib, uint8_t *dst) {
    for (int c = 0; c < RP_KQ_P; c++) q6k_to_panel(rows + c * row_bytes + ib * 210, dst + c * RP_Q6K_BYTES);
}
static void unpack_q6k(const uint8_t *src, int c, uint8_t *blk) { q6k_from_panel(src + c * RP_Q6K_BYTES, blk); }

/* ---- the plain C panel kernels (rp_internal.h's contract; the generic dot kernel's operations) ---- */

static int32_t idot(const int8_t *q, const int8_t *x, int n) {
    int32_t s = 0;
    for (int j = 0; j < n; j++) s += (int32_t)q[j] * (int32_t)x[j];
    return s;
}

/* p: nb block columns of 8 Q4_K (six = 0) or Q6_K (six = 1) panel blocks; a: nr Q8_K rows (row r at a + r * as) */
static void panel_kq_generic(int64_t nb, const uint8_t *p, const uint8_t *a, int64_t as, int nr, float *y,
                             int64_t ys, const int six) {
    const int bb = six ? RP_Q6K_BYTES : RP_Q4K_BYTES;
    float acc[UB_MM_RT][RP_KQ_P];
    memset(acc, 0, sizeof acc);
    for (int64_t ib = 0; ib < nb; ib++)
        for (int c = 0; c < RP_KQ_P; c++) {
            const uint8_t *b = p + (ib * RP_KQ_P + c) * bb;
            int8_t q[256];
            for (int i = 0; i < 256; i++) q[i] = (int8_t)(six ? q6k_e(b, i) - 32 : nib_at(b + 20, i));
            const float dw = rd_h(b), dmw = six ? 0.0f : rd_h(b + 2);
            for (int r = 0; r < nr; r++) {
                const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
                int32_t isum = 0, imin = 0;
                if (six) {
                    for (int s = 0; s < 16; s++) isum += (int8_t)b[2 + s] * idot(q + 16 * s, x->qs + 16 * s, 16);
                    acc[r][c] += (dw * x->d) * (float)isum;
                } else {
                    for (int s = 0; s < 8; s++) isum += b[4 + s] * idot(q + 32 * s, x->qs + 32 * s, 32);
                    for (int s = 0; s < 8; s++) imin += b[12 + s] * (x->bsums[2 * s] + x->bsums[2 * s + 1]);
                    acc[r][c] += (dw * x->d) * (float)isum - (dmw * x->d) * (float)imin;
                }
            }
        }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < RP_KQ_P; c++) y[r * ys + c] = acc[r][c];
}
static void panel_q4k_generic(int64_t nb, const uint8_t *p, const uint8_t *a, int64_t as, int nr, float *y, int64_t ys) {
    panel_kq_generic(nb, p, a, as, nr, y, ys, 0);
}
static void panel_q6k_generic(int64_t nb, const uint8_t *p, const uint8_t *a, int64_t as, int nr, float *y, int64_t ys) {
    panel_kq_generic(nb, p, a, as, nr, y, ys, 1);
}

const ub_rp_layout ub_rp_q4k = {UB_T_Q4_K, RP_KQ_P, RP_KQ_P * RP_Q4K_BYTES, pack_q4k, unpack_q4k, panel_q4k_generic};
const ub_rp_layout ub_rp_q6k = {UB_T_Q6_K, RP_KQ_P, RP_KQ_P * RP_Q6K_BYTES, pack_q6k, unpack_q6k, panel_q6k_generic};
