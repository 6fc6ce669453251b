/* Whole-state snapshots of the KV cache: copy, restore, compare. Used by tests ("a failed operation
 * leaves the cache bit-identical") and by rollback across several operations. */
#include <stdlib.h>
#include <string.h>

#include "kv_internal.h"

struct ub_kv_snap {
    int32_t n_stream, size;
    int64_t n_cells;
    int32_t *pos, *shift, *ext;        /* [n_cells], [n_cells], [n_cells*2] */
    uint64_t *seq;                     /* [n_cells*4] */
    int32_t *head, *used, *used_max_p1, *has_shift;   /* [n_stream] */
    int32_t smin[UB_MAX_SEQ], smax[UB_MAX_SEQ], sn[UB_MAX_SEQ];
    int32_t *copies;                   /* [2*n_copies] */
    int32_t n_copies;
};

void ub_kv_snap_free(ub_kv_snap *s) {
    if (!s) return;
    free(s->pos); free(s->shift); free(s->ext); free(s->seq);
    free(s->head); free(s->used); free(s->used_max_p1); free(s->has_shift); free(s->copies);
    free(s);
}

/* Returns a new snapshot (caller frees with ub_kv_snap_free), NULL on OOM. */
ub_kv_snap *ub_kv_snapshot(ub_kv *kv) {
    ub_kv_snap *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    size_t nc = (size_t)kv->n_cells, ns = (size_t)kv->n_stream;
    s->n_stream = kv->n_stream;
    s->size = kv->size;
    s->n_cells = kv->n_cells;
    s->pos = malloc(nc * 4); s->shift = malloc(nc * 4); s->ext = malloc(nc * 8);
    s->seq = malloc(nc * UB_SEQ_WORDS * 8);
    s->head = malloc(ns * 4); s->used = malloc(ns * 4); s->used_max_p1 = malloc(ns * 4);
    s->has_shift = malloc(ns * 4);
    s->copies = malloc((size_t)(kv->n_copies ? kv->n_copies : 1) * 8);
    if (!s->pos || !s->shift || !s->ext || !s->seq || !s->head || !s->used || !s->used_max_p1 ||
        !s->has_shift || !s->copies) {
        ub_kv_snap_free(s);
        return NULL;
    }
    memcpy(s->pos, kv->pos, nc * 4); memcpy(s->shift, kv->shift, nc * 4); memcpy(s->ext, kv->ext, nc * 8);
    memcpy(s->seq, kv->seq, nc * UB_SEQ_WORDS * 8);
    memcpy(s->head, kv->head, ns * 4); memcpy(s->used, kv->used, ns * 4);
    memcpy(s->used_max_p1, kv->used_max_p1, ns * 4); memcpy(s->has_shift, kv->has_shift, ns * 4);
    memcpy(s->copies, kv->copies ? kv->copies : s->copies, (size_t)kv->n_copies * 8);
    s->n_copies = kv->n_copies;
    for (int32_t q = 0; q < UB_MAX_SEQ; q++) {
        if (q < kv->n_seq) {
            const kv_seqstat *t = kv_stat(kv, q);
            s->smin[q] = t->min; s->smax[q] = t->max; s->sn[q] = t->n;
        } else {
            s->smin[q] = s->smax[q] = -1; s->sn[q] = 0;
        }
    }
    return s;
}

/* Puts the cache back into the snapshot's state (same geometry required); sequence bounds are
 * recomputed from the cells. Not allowed inside a transaction. */
int ub_kv_restore(ub_kv *kv, const ub_kv_snap *s) {
    if (!s || s->n_stream != kv->n_stream || s->size != kv->size)
        return kv_fail(kv, UB_E_ARG, "restore: snapshot of a different cache");
    if (kv->txn) return kv_fail(kv, UB_E_ORDER, "restore inside a KV transaction");
    if (s->n_copies > kv->cap_copies) {
        int32_t *p = realloc(kv->copies, (size_t)s->n_copies * 8);
        if (!p) return kv_fail(kv, UB_E_NOMEM, "out of memory (copy queue)");
        kv->copies = p;
        kv->cap_copies = s->n_copies;
    }
    int64_t pairs = 0;              /* room for the snapshot's position maps, before anything changes */
    for (int32_t q = 0; q < UB_MAX_SEQ; q++) pairs += s->sn[q];
    if (kv_pool_reserve(&kv->pool, pairs - kv->pool.live))
        return kv_fail(kv, UB_E_NOMEM, "out of memory (sequence position maps)");
    size_t nc = (size_t)kv->n_cells, ns = (size_t)kv->n_stream;
    memcpy(kv->pos, s->pos, nc * 4); memcpy(kv->shift, s->shift, nc * 4); memcpy(kv->ext, s->ext, nc * 8);
    memcpy(kv->seq, s->seq, nc * UB_SEQ_WORDS * 8);
    memcpy(kv->head, s->head, ns * 4); memcpy(kv->used, s->used, ns * 4);
    memcpy(kv->used_max_p1, s->used_max_p1, ns * 4); memcpy(kv->has_shift, s->has_shift, ns * 4);
    if (s->n_copies) memcpy(kv->copies, s->copies, (size_t)s->n_copies * 8);
    kv->n_copies = s->n_copies;
    kv_recompute_stats(kv);         /* cannot fail: the room is reserved */
    kv->plan_n = 0;
    kv->plan_len = 0;
    return UB_OK;
}

/* 1 when every cell, head, used count, used_max_p1, shift flag, sequence bound and queued copy
 * equals the snapshot's; 0 otherwise (also for a snapshot of a different geometry). */
int ub_kv_snap_equal(ub_kv *kv, const ub_kv_snap *s) {
    if (!s || s->n_stream != kv->n_stream || s->size != kv->size) return 0;
    size_t nc = (size_t)kv->n_cells, ns = (size_t)kv->n_stream;
    if (memcmp(kv->pos, s->pos, nc * 4) || memcmp(kv->shift, s->shift, nc * 4) || memcmp(kv->ext, s->ext, nc * 8) ||
        memcmp(kv->seq, s->seq, nc * UB_SEQ_WORDS * 8))
        return 0;
    if (memcmp(kv->head, s->head, ns * 4) || memcmp(kv->used, s->used, ns * 4) ||
        memcmp(kv->used_max_p1, s->used_max_p1, ns * 4) || memcmp(kv->has_shift, s->has_shift, ns * 4))
        return 0;
    if (kv->n_copies != s->n_copies || (s->n_copies && memcmp(kv->copies, s->copies, (size_t)s->n_copies * 8)))
        return 0;
    for (int32_t q = 0; q < kv->n_seq; q++) {
        const kv_seqstat *t = kv_stat(kv, q);
        if (t->min != s->smin[q] || t->max != s->smax[q] || t->n != s->sn[q]) return 0;
    }
    return 1;
}
