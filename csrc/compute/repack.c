/* The repacked weights (ub_repack.h, rp_internal.h): creation (one call per tensor: the panels are packed
 * from the GGUF rows, the tail rows copied, and on request the source pages dropped), the round trip back
 * to GGUF bytes, the checks the matmul driver applies to a UB_MM_REPACKED argument, and the choice of panel
 * kernel per back-end. */
#define _DEFAULT_SOURCE /* madvise */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ub_common.h"
#include "ub_matmul.h"
#include "rp_internal.h"
#include "rp_kquant.h"
#include "rp_iq4xs.h"
#include "rp_q5_0.h"

/* The layouts, one per repacked type. */
static const ub_rp_layout *const g_layouts[] = {&ub_rp_iq4nl, &ub_rp_q4k, &ub_rp_q6k, &ub_rp_iq4xs, &ub_rp_q5_0};

static const ub_rp_layout *layout_of(int32_t type) {
    for (size_t i = 0; i < sizeof g_layouts / sizeof g_layouts[0]; i++)
        if (g_layouts[i]->type == type) return g_layouts[i];
    return 0;
}

int32_t ub_rp_panel_rows(int32_t type) {
    const ub_rp_layout *L = layout_of(type);
    return L ? L->rows : 0;
}

/* w: w_bytes bytes (read only). Drops the whole pages inside [w, w + w_bytes); returns the bytes dropped. */
static int64_t drop_pages(const uint8_t *w, int64_t w_bytes) {
    const long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0) return 0;
    const uintptr_t a = ((uintptr_t)w + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
    const uintptr_t e = ((uintptr_t)w + (uintptr_t)w_bytes) & ~((uintptr_t)pg - 1);
    if (e <= a) return 0;
    /* MADV_RANDOM first: the range becomes a mapping of its own without fault-around or read-ahead, so a fault
     * on a neighbouring tensor's pages no longer maps the dropped pages back in (Linux maps a whole window of
     * cached pages around a faulting address, clamped to the mapping it is in) */
    (void)madvise((void *)a, (size_t)(e - a), MADV_RANDOM);
    if (madvise((void *)a, (size_t)(e - a), MADV_DONTNEED) != 0) return 0;
    return (int64_t)(e - a);
}

/* w: n_rows x n_cols GGUF rows of `type` (w_bytes bytes, read only). The result is owned by the caller. */
ub_rp *ub_rp_new(const uint8_t *w, int64_t w_bytes, int32_t type, int64_t n_rows, int64_t n_cols, int32_t drop) {
    const ub_rp_layout *L = layout_of(type);
    const ub_mm_type *t = ub_mm_find(type);
    if (!L || !t || !ub_mm_type_ready(t) || !w || n_cols <= 0 || n_cols % t->blck || n_rows < L->rows ||
        n_rows > ((int64_t)1 << 40) || n_cols > ((int64_t)1 << 40))
        return 0;
    const int64_t nb = n_cols / t->blck, row_bytes = nb * t->bytes;
    if (row_bytes > ((int64_t)1 << 40) / n_rows || w_bytes != row_bytes * n_rows) return 0;
    ub_rp *rp = calloc(1, sizeof *rp);
    if (!rp) return 0;
    const int64_t n_prow = n_rows - n_rows % L->rows, n_pan = n_prow / L->rows;
    const int64_t pan_bytes = n_pan * nb * L->block_bytes, tail_bytes = (n_rows - n_prow) * row_bytes;
    const size_t alloc = ((size_t)(pan_bytes + tail_bytes) + 63) & ~(size_t)63;
    void *mem = 0;
    if (posix_memalign(&mem, 64, alloc ? alloc : 64) != 0) mem = 0;
    rp->panels = mem;
    if (!rp->panels) {
        free(rp);
        return 0;
    }
    rp->magic = UB_RP_MAGIC;
    rp->L = L;
    rp->n_rows = n_rows;
    rp->n_cols = n_cols;
    rp->nb = nb;
    rp->row_bytes = row_bytes;
    rp->n_prow = n_prow;
    rp->tail = rp->panels + pan_bytes;
    rp->bytes = pan_bytes + tail_bytes;
    for (int64_t q = 0; q < n_pan; q++) {
        const uint8_t *rows = w + q * L->rows * row_bytes;
        uint8_t *dst = rp->panels + q * nb * L->block_bytes;
        for (int64_t ib = 0; ib < nb; ib++) L->pack(rows, row_bytes, ib, dst + ib * L->block_bytes);
    }
    if (tail_bytes) memcpy(rp->tail, w + n_prow * row_bytes, (size_t)tail_bytes);
    rp->dropped = drop ? drop_pages(w, w_bytes) : 0;
    return rp;
}

void ub_rp_free(ub_rp *rp) {
    if (!rp) return;
    rp->magic = 0;
    free(rp->panels);
    free(rp);
}

int64_t ub_rp_bytes(const ub_rp *rp) { return rp ? rp->bytes : 0; }
int64_t ub_rp_dropped(const ub_rp *rp) { return rp ? rp->dropped : 0; }

/* The GGUF block ib of row j of rp into blk (the layout's block bytes; caller-owned). */
static void row_block(const ub_rp *rp, int64_t j, int64_t ib, uint8_t *blk, int32_t bytes) {
    if (j >= rp->n_prow) {
        memcpy(blk, rp->tail + (j - rp->n_prow) * rp->row_bytes + ib * bytes, (size_t)bytes);
        return;
    }
    const ub_rp_layout *L = rp->L;
    const int64_t q = j / L->rows;
    rp->L->unpack(rp->panels + (q * rp->nb + ib) * L->block_bytes, (int)(j % L->rows), blk);
}

/* out: uint8[out_bytes] (caller-owned, written). */
int ub_rp_unpack(const ub_rp *rp, uint8_t *out, int64_t out_bytes) {
    if (!rp || rp->magic != UB_RP_MAGIC || !out || out_bytes != rp->n_rows * rp->row_bytes) return UB_E_ARG;
    const int32_t bytes = (int32_t)(rp->row_bytes / rp->nb);
    for (int64_t j = 0; j < rp->n_rows; j++)
        for (int64_t ib = 0; ib < rp->nb; ib++) row_block(rp, j, ib, out + j * rp->row_bytes + ib * bytes, bytes);
    return UB_OK;
}

/* w: the pointer of a UB_MM_REPACKED argument (read only). */
const struct ub_rp *ub_rp_check(const uint8_t *w, int32_t type, int64_t n_rows, int64_t n_cols, int64_t w_bytes) {
    const ub_rp *rp = (const ub_rp *)w;
    if (!rp || !(type & UB_MM_REPACKED) || rp->magic != UB_RP_MAGIC) return 0;
    if (rp->L->type != (type & 0xFFFF) || rp->n_rows != n_rows || rp->n_cols != n_cols ||
        rp->n_rows * rp->row_bytes != w_bytes)
        return 0;
    return rp;
}

ub_rp_panel_fn ub_rp_panel_for(int be, const struct ub_rp *rp) {
    ub_rp_panel_fn f = 0;
    if (be == UB_MM_AVX512) f = ub_rp_panel_avx512(rp->L->type);
    else if (be == UB_MM_AVXVNNI) f = ub_rp_panel_avxvnni(rp->L->type);
    if (!f && be != UB_MM_GENERIC) f = ub_rp_panel_avx2(rp->L->type);
    return f ? f : rp->L->panel_generic;
}

/* out[r][:] = dequantised row ids[r] of the repacked weight rp (ids checked by the caller). */
int ub_rp_get_rows(const struct ub_rp *rp, const ub_mm_type *t, const int32_t *ids, int64_t m, float *out) {
    uint8_t blk[256];
    if (t->bytes > (int32_t)sizeof blk) return UB_E_ARG;
    for (int64_t r = 0; r < m; r++)
        for (int64_t ib = 0; ib < rp->nb; ib++) {
            row_block(rp, ids[r], ib, blk, t->bytes);
            t->deq(blk, out + r * rp->n_cols + ib * t->blck);
        }
    return UB_OK;
}
