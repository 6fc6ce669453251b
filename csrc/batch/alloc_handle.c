/* Batch allocator: handle lifetime, reusable buffers of the normalised batch, error text, accessors. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc_state.h"

/* Creates an empty allocator for a model with n_pos_per_embd position sections (1, 3 or 4).
 * Returns NULL on OOM or a bad n_pos_per_embd. Caller frees with ub_alloc_free. */
ub_alloc *ub_alloc_new(int32_t n_pos_per_embd) {
    if (n_pos_per_embd < 1 || n_pos_per_embd > 4) return NULL;
    ub_alloc *a = calloc(1, sizeof(*a));
    if (a) a->n_pos_per_embd = n_pos_per_embd;
    return a;
}

/* Frees the allocator and its normalised batch (NULL is fine). Ubatches already returned stay valid. */
void ub_alloc_free(ub_alloc *a) {
    if (!a) return;
    ub_norm_free(a->cur);
    ub_norm_free(a->spare);
    free(a);
}

const char *ub_alloc_error(const ub_alloc *a) { return a ? a->err : "null allocator"; }
const char *ub_alloc_warning(const ub_alloc *a) { return a ? a->warn : ""; }

/* Records a printf-style message in a->err and returns code. */
int ub_alloc_fail(ub_alloc *a, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->err, sizeof(a->err), fmt, ap);
    va_end(ap);
    return code;
}

/* Frees every array of a normalised batch (NULL is fine). */
void ub_norm_free(ub_norm *nb) {
    if (!nb) return;
    free(nb->token_buf); free(nb->embd_buf); free(nb->pos); free(nb->output);
    free(nb->seq_off); free(nb->seq_id); free(nb->seq_set);
    free(nb->tok_group); free(nb->grp_off); free(nb->grp_tok); free(nb->grp_cur);
    free(nb->used); free(nb->out_ids); free(nb->scratch);
    free(nb);
}

/* Grows *p to hold n elements of size sz (contents not kept). Returns 0 on OOM (old buffer kept). */
static int grow(void **p, size_t *cap, size_t n, size_t sz) {
    if (n <= *cap && *p) return 1;
    size_t want = n < 16 ? 16 : n + n / 4;
    void *q = malloc(want * sz);
    if (!q) return 0;
    free(*p);
    *p = q;
    *cap = want;
    return 1;
}

/* Makes sure nb's buffers hold n rows, n_ids seq ids, n_pos sections and n_embd floats per row.
 * Per-row buffers share cap_tokens; grp_off/grp_cur need n+1 entries. Returns 0 on OOM. */
int ub_norm_reserve(ub_norm *nb, size_t n, size_t n_ids, size_t n_pos, size_t n_embd) {
    if (n + 1 > nb->cap_tokens || !nb->seq_off) {
        size_t want = (n + 1) + (n + 1) / 4;
        void *bufs[11] = {0};
        size_t sizes[11] = {4, UB_SEQ_WORDS * 8, 1, 4, 4, 4, 4, 1, 4, 32, 4};
        for (int k = 0; k < 11; k++) {
            bufs[k] = malloc(want * sizes[k] + (k == 9 ? 64 * sizeof(int32_t) : 0));   /* scratch: + hash minimum */
            if (!bufs[k]) { for (int j = 0; j <= k; j++) free(bufs[j]); return 0; }
        }
        free(nb->seq_off); free(nb->seq_set); free(nb->output); free(nb->tok_group); free(nb->grp_tok);
        free(nb->grp_off); free(nb->grp_cur); free(nb->used); free(nb->out_ids); free(nb->scratch);
        free(nb->token_buf);
        nb->seq_off = bufs[0]; nb->seq_set = bufs[1]; nb->output = bufs[2]; nb->tok_group = bufs[3];
        nb->grp_tok = bufs[4]; nb->grp_off = bufs[5]; nb->grp_cur = bufs[6]; nb->used = bufs[7];
        nb->out_ids = bufs[8]; nb->scratch = bufs[9]; nb->token_buf = bufs[10];
        nb->cap_tokens = want;
    }
    if (!grow((void **)&nb->seq_id, &nb->cap_ids, n_ids ? n_ids : 1, 4)) return 0;
    if (!grow((void **)&nb->pos, &nb->cap_pos, n * n_pos, 4)) return 0;
    if (n_embd && !grow((void **)&nb->embd_buf, &nb->cap_embd, n * n_embd, 4)) return 0;
    return 1;
}

/* Forgets every split done since init: no row used, no output emitted. */
void ub_norm_split_reset(ub_norm *nb) {
    memset(nb->used, 0, (size_t)nb->n_tokens);
    memset(nb->grp_cur, 0, sizeof(int32_t) * (size_t)(nb->n_groups > 0 ? nb->n_groups : 1));
    nb->n_used = 0;
    nb->first_unused = 0;
    nb->n_out_ids = 0;
}

int32_t ub_alloc_n_tokens(const ub_alloc *a) { return a && a->cur ? a->cur->n_tokens : 0; }
int32_t ub_alloc_n_used(const ub_alloc *a) { return a && a->cur ? a->cur->n_used : 0; }
int32_t ub_alloc_n_outputs(const ub_alloc *a) { return a && a->cur ? a->cur->n_outputs : 0; }
int32_t ub_alloc_n_out_ids(const ub_alloc *a) { return a && a->cur ? a->cur->n_out_ids : 0; }
int32_t ub_alloc_n_pos(const ub_alloc *a) { return a && a->cur ? a->cur->n_pos : (a ? a->n_pos_per_embd : 0); }
int32_t ub_alloc_has_coupled(const ub_alloc *a) { return a && a->cur ? a->cur->has_cpl : 0; }
const int32_t *ub_alloc_out_ids(const ub_alloc *a) { return a && a->cur ? a->cur->out_ids : NULL; }
const int32_t *ub_alloc_pos(const ub_alloc *a) { return a && a->cur ? a->cur->pos : NULL; }
const int8_t *ub_alloc_output(const ub_alloc *a) { return a && a->cur ? a->cur->output : NULL; }
const int32_t *ub_alloc_seq_off(const ub_alloc *a) { return a && a->cur ? a->cur->seq_off : NULL; }
const int32_t *ub_alloc_seq_id(const ub_alloc *a) { return a && a->cur ? a->cur->seq_id : NULL; }
int32_t ub_alloc_seq_pos_min(const ub_alloc *a, int32_t s) {
    return a && a->cur && s >= 0 && s < UB_MAX_SEQ ? a->cur->seq_pmin[s] : -1;
}
int32_t ub_alloc_seq_pos_max(const ub_alloc *a, int32_t s) {
    return a && a->cur && s >= 0 && s < UB_MAX_SEQ ? a->cur->seq_pmax[s] : -1;
}

/* b: the caller's batch view (borrowed); ids, cpl int32[n_seq_max] and *n_cpl caller-owned. */
int32_t ub_alloc_batch_seqs(const ub_batch_in *b, int32_t n_seq_max, int32_t *ids, int32_t *cpl, int32_t *n_cpl) {
    if (!b || !ids || !cpl || !n_cpl || n_seq_max < 1 || n_seq_max > UB_MAX_SEQ || b->n_tokens < 0) return -1;
    uint8_t flags[UB_MAX_SEQ];
    memset(flags, 0, sizeof flags);
    const uint32_t lim = (uint32_t)n_seq_max;
    int32_t n = b->n_tokens;
    if (!b->seq_off || !b->seq_id) {
        if (n > 0) flags[0] = 1;
    } else if (b->seq_off[n] - b->seq_off[0] == n) {        /* one id per row: a straight scan */
        const int32_t *p = b->seq_id + b->seq_off[0];
        for (int32_t k = 0; k < n; k++)
            if ((uint32_t)p[k] < lim) flags[p[k]] = 1;
    } else {
        for (int32_t i = 0; i < n; i++) {
            int32_t k0 = b->seq_off[i], k1 = b->seq_off[i + 1];
            if (k1 <= k0) continue;
            int32_t first = b->seq_id[k0];
            uint8_t bit = 1;
            for (int32_t k = k0 + 1; k < k1; k++) if (b->seq_id[k] != first) bit = 3;
            for (int32_t k = k0; k < k1; k++)
                if ((uint32_t)b->seq_id[k] < lim) flags[b->seq_id[k]] |= bit;
        }
    }
    int32_t count = 0, nc = 0;
    for (int32_t s = 0; s < n_seq_max; s++) {
        if (flags[s] & 1) ids[count++] = s;
        if (flags[s] & 2) cpl[nc++] = s;
    }
    *n_cpl = nc;
    return count;
}

/* out int32[n_seq_max], ids int32[n], vals int64[n] (a memory's answers for seq ids[k]): all caller-owned.
 * Fills out with -1 and out[ids[k]] = vals[k]. Returns -1, or the first k whose value is outside
 * [-1, INT32_MAX] (out is then incomplete: the caller raises naming seq ids[k]). */
int32_t ub_alloc_fill_bounds(int32_t *out, int32_t n_seq_max, const int32_t *ids, const int64_t *vals, int32_t n) {
    for (int32_t s = 0; s < n_seq_max; s++) out[s] = -1;
    for (int32_t k = 0; k < n; k++) {
        if (vals[k] < -1 || vals[k] > INT32_MAX) return k;
        if (ids[k] >= 0 && ids[k] < n_seq_max) out[ids[k]] = (int32_t)vals[k];
    }
    return -1;
}
