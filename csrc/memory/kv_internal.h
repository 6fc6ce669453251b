/* Internal layout of the KV cache handle (not exported to Python). Shared by kv_cache.c (storage,
 * cell primitives, journal, snapshots), kv_seq_ops.c, kv_slot.c and kv_mask.c. */
#ifndef UB_KV_INTERNAL_H
#define UB_KV_INTERNAL_H

#include "ub_kv.h"
#include "kv_posmap.h"

/* Journal records: the state of a cell / stream before its first change inside the current
 * transaction (an epoch tag marks "already saved"). The position maps are not journaled: rollback
 * replays the saved cells into them (remove what the cells hold now, add what they held). */
typedef struct kv_jcell {
    int32_t g;                    /* global cell index: stream * size + cell */
    int32_t pos, shift, x, y;
    uint64_t seq[UB_SEQ_WORDS];
} kv_jcell;

typedef struct kv_jstream {
    int32_t st, head, used, used_max_p1, has_shift;
} kv_jstream;

struct ub_kv {
    int32_t n_stream, size, n_seq, swa_type, n_swa;
    int64_t n_cells;              /* n_stream * size */

    /* cells, global index g = stream * size + i */
    int32_t *pos;                 /* [n_cells]   -1 = empty */
    int32_t *shift;               /* [n_cells]   pending RoPE delta (0 when empty) */
    int32_t *ext;                 /* [n_cells*2] (x, y) of M-RoPE positions (0 when empty) */
    uint64_t *seq;                /* [n_cells*4] 256-bit sequence set */

    /* per stream */
    int32_t *head, *used, *used_max_p1, *has_shift;   /* [n_stream] */

    /* per-sequence position maps (kv_posmap.h): bounds in O(1), updates in O(log n) */
    kv_seqstat stat[UB_MAX_SEQ];
    kv_pool pool;
    int64_t n_pairs;              /* (cell, sequence) pairs stored = sum of stat[s].n >= pool.live */

    /* queued cross-stream copies (src, dst) pairs */
    int32_t *copies;
    int32_t n_copies, cap_copies;

    /* journal */
    int32_t txn;
    uint32_t epoch;
    uint32_t *cell_ep;            /* [n_cells] */
    uint32_t *stream_ep;          /* [n_stream] */
    kv_jcell *jc;
    int64_t n_jc, cap_jc;
    kv_jstream *js;               /* [n_stream] */
    int32_t n_js;
    int32_t j_n_copies;

    /* plan of the last prepare: slot i = ns groups of per cells;
     * plan_data[plan_off[i] ..] = strm[ns] then idxs[ns*per] */
    int32_t plan_n, plan_cap;
    int32_t *plan_ns, *plan_per;
    int64_t *plan_off;
    int32_t *plan_data;
    int64_t plan_len, plan_cap_data;

    /* scratch of the mask builder: cells of each seq (CSR) */
    int32_t *mlist;
    int64_t mlist_cap;

    char err[UB_ERR_LEN];
};

/* error message helper (printf-style); returns code */
int kv_fail(ub_kv *kv, int code, const char *fmt, ...);

/* journal */
int kv_journal_reserve(ub_kv *kv, int64_t n_more);   /* UB_OK or UB_E_NOMEM */
void kv_touch_cell(ub_kv *kv, int64_t g);
void kv_touch_stream(ub_kv *kv, int32_t st);

/* sequence bounds */
static inline const kv_seqstat *kv_stat(const ub_kv *kv, int32_t s) { return &kv->stat[s]; }
/* Makes room in the position maps for n_more (cell, sequence) pairs beyond those stored; call before
 * an operation that may add pairs. UB_OK or UB_E_NOMEM (message set, nothing changed). */
int kv_pairs_reserve(ub_kv *kv, int64_t n_more);
/* Turns every position map that is a gap-free run again into its dense form (end of each operation). */
void kv_densify_all(ub_kv *kv);
int32_t kv_seq_stream(const ub_kv *kv, int32_t s);
int kv_recompute_stats(ub_kv *kv);                  /* rebuild every map from the cells; UB_OK / UB_E_NOMEM */

/* cell primitives (st = stream, i = cell); all journal themselves */
void kv_cell_rm(ub_kv *kv, int32_t st, int32_t i);                 /* empty a non-empty cell */
int kv_cell_seq_rm(ub_kv *kv, int32_t st, int32_t i, int32_t s);   /* 1 if the cell became empty */
int kv_cell_seq_keep(ub_kv *kv, int32_t st, int32_t i, int32_t s); /* 1 if the cell became empty */
void kv_cell_seq_add(ub_kv *kv, int32_t st, int32_t i, int32_t s);
void kv_cell_pos_set(ub_kv *kv, int32_t st, int32_t i, int32_t p); /* cell must be empty */
int kv_cell_pos_add(ub_kv *kv, int32_t st, int32_t i, int32_t d);  /* 1 if the cell became empty */
void kv_cell_pos_div(ub_kv *kv, int32_t st, int32_t i, int32_t d);
void kv_stream_reset(ub_kv *kv, int32_t st);
void kv_set_head(ub_kv *kv, int32_t st, int32_t h);

static inline int kv_cell_empty(const ub_kv *kv, int64_t g) { return kv->pos[g] < 0; }

/* is_masked_swa(n_swa, type, p0, p1): 1 when cell position p0 lies outside the window of p1
 * (p1 is 64-bit: callers pass a sequence's max position + 1, which may be INT32_MAX + 1) */
static inline int kv_masked_swa(int32_t type, int32_t n_swa, int32_t p0, int64_t p1) {
    switch (type) {
    case UB_SWA_STANDARD: return (int64_t)p1 - p0 >= n_swa;
    case UB_SWA_CHUNKED: return p0 < (p1 / n_swa) * n_swa;
    case UB_SWA_SYMMETRIC: {
        int64_t half = n_swa / 2, d = (int64_t)p1 - p0;
        return d < -half || d > half;
    }
    default: return 0;
    }
}

#endif
