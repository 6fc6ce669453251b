/* Internal contracts of the repacked weights (repack.c; not exported to Python): the ub_rp object, the
 * per-type panel layouts and the panel kernels the matmul driver runs.
 *
 * A layout groups P consecutive weight rows (a panel) and stores, for each block index ib of K, the P rows'
 * blocks ib as one "block column" of block_bytes bytes, interleaved the way its kernels load them. Panels
 * are stored one after the other, each as its nb block columns in K order, so a panel streams contiguously:
 *   panel p, block ib at panels + (p * nb + ib) * block_bytes.
 * Rows n_prow .. n_rows (n_prow = n_rows - n_rows % P) stay in GGUF layout in the tail buffer.
 *
 * Adding a layout (a type): a ub_rp_layout entry in repack.c (pack / unpack of one block column, the plain C
 * panel kernel) and the SIMD panel kernels in ub_rp_panel_<back-end>(type) lookups. The invariance contract
 * of a panel kernel: y[r * ys + c] for weight row c < P and activation row r < nr (1 <= nr <= UB_MM_RT) is
 * computed by the same operations whatever nr, whatever the other rows hold, and whichever back-end's
 * kernel runs among those that claim the same results (the tests check them bitwise). */
#ifndef UB_RP_INTERNAL_H
#define UB_RP_INTERNAL_H

#include <stdint.h>

#include "mm_internal.h"
#include "ub_matmul.h"
#include "ub_repack.h"

/* A panel kernel: y[r * ys + c] = dot(weight row c of the panel, activation row r) for c < P, r < nr.
 *   nb: block columns of the panel; p: the panel (nb * block_bytes bytes, read only); a: nr quantised
 *   activation rows (row r at a + r * as, read only, the type's activation kind); y: output (written). */
typedef void (*ub_rp_panel_fn)(int64_t nb, const uint8_t *p, const uint8_t *a, int64_t as, int nr, float *y,
                               int64_t ys);

typedef struct {
    int32_t type;        /* the GGUF weight type */
    int32_t rows;        /* P: rows per panel */
    int32_t block_bytes; /* bytes of one block column (P blocks) */
    /* one block column: rows = P GGUF rows (row c at rows + c * row_bytes, read only), their blocks ib ->
     * dst (block_bytes, written) */
    void (*pack)(const uint8_t *rows, int64_t row_bytes, int64_t ib, uint8_t *dst);
    /* the inverse for one row: block column src (read only), row c -> its GGUF block (written) */
    void (*unpack)(const uint8_t *src, int c, uint8_t *blk);
    ub_rp_panel_fn panel_generic;
} ub_rp_layout;

#define UB_RP_MAGIC 0x7562727061636b31ULL /* "ubrpack1" */

struct ub_rp {
    uint64_t magic;
    const ub_rp_layout *L;
    int64_t n_rows, n_cols, nb, row_bytes, n_prow; /* n_prow: rows held in panels (a multiple of P) */
    uint8_t *panels;                               /* n_prow / P panels (owned; one allocation with tail) */
    uint8_t *tail;                                 /* (n_rows - n_prow) GGUF rows (inside the same allocation) */
    int64_t bytes, dropped;
};

/* rp as a checked object: the ub_rp behind the weight pointer w of a UB_MM_REPACKED argument, or NULL when
 * its fields disagree with (type, n_rows, n_cols, w_bytes). */
const struct ub_rp *ub_rp_check(const uint8_t *w, int32_t type, int64_t n_rows, int64_t n_cols, int64_t w_bytes);
/* The panel kernel of rp's layout on back-end be (the back-end's own, else the next simpler one's). */
ub_rp_panel_fn ub_rp_panel_for(int be, const struct ub_rp *rp);
/* Per-back-end lookups (NULL when that back-end has none of its own for the type). */
ub_rp_panel_fn ub_rp_panel_avx2(int32_t type);
ub_rp_panel_fn ub_rp_panel_avxvnni(int32_t type);
ub_rp_panel_fn ub_rp_panel_avx512(int32_t type);
/* out[r][:] = dequantised row ids[r] of rp (type t; ids in [0, n_rows), checked by the caller); out:
 * float[m][n_cols] (written). Returns UB_OK or UB_E_ARG. */
int ub_rp_get_rows(const struct ub_rp *rp, const ub_mm_type *t, const int32_t *ids, int64_t m, float *out);
/* The IQ4_NL layout (rp_iq4nl.c). */
extern const ub_rp_layout ub_rp_iq4nl;

#endif
