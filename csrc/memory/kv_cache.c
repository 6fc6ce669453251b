/* KV cache storage: construction, accessors, the cell primitives (each keeps used counts, used_max_p1
 * and the per-sequence bounds in step) and the journal that makes transactions exact. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv_internal.h"

int kv_fail(ub_kv *kv, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(kv->err, sizeof kv->err, fmt, ap);
    va_end(ap);
    return code;
}

/* Creates a cache of n_stream x size empty cells. All arrays are owned by the handle (ub_kv_free).
 * Returns NULL on a bad argument (n_stream outside 1..256, size < 1, unknown swa_type, n_swa < 1 with
 * an SWA type) or OOM. */
ub_kv *ub_kv_new(int32_t n_stream, int32_t size, int32_t swa_type, int32_t n_swa) {
    if (n_stream < 1 || n_stream > UB_MAX_SEQ || size < 1) return NULL;
    if (swa_type < UB_SWA_NONE || swa_type > UB_SWA_SYMMETRIC) return NULL;
    if (swa_type != UB_SWA_NONE && n_swa < 1) return NULL;
    int64_t nc = (int64_t)n_stream * size;
    if (nc > ((int64_t)1 << 31) - 1) return NULL;
    ub_kv *kv = calloc(1, sizeof *kv);
    if (!kv) return NULL;
    kv->n_stream = n_stream;
    kv->size = size;
    kv->n_seq = n_stream == 1 ? UB_MAX_SEQ : n_stream;
    kv->swa_type = swa_type;
    kv->n_swa = swa_type == UB_SWA_NONE ? 0 : n_swa;
    kv->n_cells = nc;
    kv->pos = malloc((size_t)nc * sizeof(int32_t));
    kv->shift = calloc((size_t)nc, sizeof(int32_t));
    kv->ext = calloc((size_t)nc * 2, sizeof(int32_t));
    kv->seq = calloc((size_t)nc * UB_SEQ_WORDS, sizeof(uint64_t));
    kv->cell_ep = calloc((size_t)nc, sizeof(uint32_t));
    kv->head = calloc((size_t)n_stream, sizeof(int32_t));
    kv->used = calloc((size_t)n_stream, sizeof(int32_t));
    kv->used_max_p1 = calloc((size_t)n_stream, sizeof(int32_t));
    kv->has_shift = calloc((size_t)n_stream, sizeof(int32_t));
    kv->stream_ep = calloc((size_t)n_stream, sizeof(uint32_t));
    kv->js = calloc((size_t)n_stream, sizeof(kv_jstream));
    if (!kv->pos || !kv->shift || !kv->ext || !kv->seq || !kv->cell_ep || !kv->head || !kv->used ||
        !kv->used_max_p1 || !kv->has_shift || !kv->stream_ep || !kv->js) {
        ub_kv_free(kv);
        return NULL;
    }
    for (int64_t g = 0; g < nc; g++) kv->pos[g] = -1;
    kv->pool.free_head = -1;
    kv_pool_reset(&kv->pool, kv->stat, UB_MAX_SEQ);
    kv->epoch = 1;
    return kv;
}

/* Frees the handle and everything it owns (NULL is fine). */
void ub_kv_free(ub_kv *kv) {
    if (!kv) return;
    free(kv->pos); free(kv->shift); free(kv->ext); free(kv->seq); free(kv->cell_ep);
    free(kv->head); free(kv->used); free(kv->used_max_p1); free(kv->has_shift);
    free(kv->stream_ep); free(kv->js); free(kv->jc); free(kv->copies);
    free(kv->plan_ns); free(kv->plan_per); free(kv->plan_off); free(kv->plan_data);
    free(kv->mlist);
    kv_pool_free(&kv->pool);
    free(kv);
}

int32_t ub_kv_cell_bytes(void) {
    /* pos, shift, ext[2] (int32), seq set (4 x uint64), journal epoch (uint32), one kv_pnode */
    return (int32_t)(4 * sizeof(int32_t) + UB_SEQ_WORDS * sizeof(uint64_t) + sizeof(uint32_t) + sizeof(kv_pnode));
}

const char *ub_kv_error(const ub_kv *kv) { return kv ? kv->err : "null KV cache"; }
int32_t ub_kv_n_stream(const ub_kv *kv) { return kv->n_stream; }
int32_t ub_kv_size(const ub_kv *kv) { return kv->size; }
int32_t ub_kv_n_seq(const ub_kv *kv) { return kv->n_seq; }
int32_t ub_kv_used(ub_kv *kv, int32_t st) { return st >= 0 && st < kv->n_stream ? kv->used[st] : -1; }
int32_t ub_kv_head(ub_kv *kv, int32_t st) { return st >= 0 && st < kv->n_stream ? kv->head[st] : -1; }
int32_t ub_kv_used_max_p1(ub_kv *kv, int32_t st) {
    return st >= 0 && st < kv->n_stream ? kv->used_max_p1[st] : -1;
}
int32_t ub_kv_has_shift(ub_kv *kv, int32_t st) {
    return st >= 0 && st < kv->n_stream ? kv->has_shift[st] : -1;
}
int32_t ub_kv_n_copies(const ub_kv *kv) { return kv->n_copies; }

int32_t kv_seq_stream(const ub_kv *kv, int32_t s) { return kv->n_stream == 1 ? 0 : s; }

/* ---------------------------------------------------------------- journal */

/* Makes room for n_more cell records (never more than one per cell per transaction). */
int kv_journal_reserve(ub_kv *kv, int64_t n_more) {
    if (!kv->txn) return UB_OK;
    int64_t need = kv->n_jc + n_more;
    if (need > kv->n_cells) need = kv->n_cells;
    if (need <= kv->cap_jc) return UB_OK;
    int64_t cap = kv->cap_jc ? kv->cap_jc : 64;
    while (cap < need) cap *= 2;
    if (cap > kv->n_cells) cap = kv->n_cells;
    kv_jcell *p = realloc(kv->jc, (size_t)cap * sizeof *p);
    if (!p) return kv_fail(kv, UB_E_NOMEM, "out of memory (KV journal)");
    kv->jc = p;
    kv->cap_jc = cap;
    return UB_OK;
}

/* Saves cell g before its first change in the open transaction (capacity reserved by the caller). */
void kv_touch_cell(ub_kv *kv, int64_t g) {
    if (!kv->txn || kv->cell_ep[g] == kv->epoch) return;
    if (kv->n_jc >= kv->cap_jc) return;   /* unreachable: callers reserve; never write out of bounds */
    kv->cell_ep[g] = kv->epoch;
    kv_jcell *j = &kv->jc[kv->n_jc++];
    j->g = (int32_t)g;
    j->pos = kv->pos[g];
    j->shift = kv->shift[g];
    j->x = kv->ext[2 * g];
    j->y = kv->ext[2 * g + 1];
    memcpy(j->seq, &kv->seq[g * UB_SEQ_WORDS], sizeof j->seq);
}

void kv_touch_stream(ub_kv *kv, int32_t st) {
    if (!kv->txn || kv->stream_ep[st] == kv->epoch) return;
    kv->stream_ep[st] = kv->epoch;
    kv_jstream *j = &kv->js[kv->n_js++];
    j->st = st;
    j->head = kv->head[st];
    j->used = kv->used[st];
    j->used_max_p1 = kv->used_max_p1[st];
    j->has_shift = kv->has_shift[st];
}

int ub_kv_begin(ub_kv *kv) {
    if (kv->txn) return kv_fail(kv, UB_E_ORDER, "a KV transaction is already open");
    kv->txn = 1;
    kv->epoch++;
    if (kv->epoch == 0) {   /* wrapped: clear every tag once */
        memset(kv->cell_ep, 0, (size_t)kv->n_cells * sizeof(uint32_t));
        memset(kv->stream_ep, 0, (size_t)kv->n_stream * sizeof(uint32_t));
        kv->epoch = 1;
    }
    kv->n_jc = 0;
    kv->n_js = 0;
    kv->j_n_copies = kv->n_copies;
    return UB_OK;
}

int ub_kv_commit(ub_kv *kv) {
    if (!kv->txn) return kv_fail(kv, UB_E_ORDER, "no KV transaction is open");
    kv->txn = 0;
    return UB_OK;
}

static void stat_add(ub_kv *kv, int32_t s, int32_t p);
static void stat_remove(ub_kv *kv, int32_t s, int32_t p);

/* Every sequence of cell g's set gets (add = 1) or loses (add = 0) one entry at position pos. */
static void cell_pairs(ub_kv *kv, const uint64_t *set, int32_t pos, int add) {
    for (int w = 0; w < UB_SEQ_WORDS; w++) {
        for (uint64_t bits = set[w]; bits; bits &= bits - 1) {
            int32_t s = w * 64 + __builtin_ctzll(bits);
            if (add) stat_add(kv, s, pos); else stat_remove(kv, s, pos);
        }
    }
}

/* Restores every saved cell and stream record: the state of ub_kv_begin, exactly. The position maps
 * are replayed in two passes (first every journaled cell's current pairs leave, then its saved pairs
 * come back), so the maps never hold more pairs than before or after: no allocation, cannot fail. */
int ub_kv_rollback(ub_kv *kv) {
    if (!kv->txn) return kv_fail(kv, UB_E_ORDER, "no KV transaction is open");
    kv->txn = 0;
    for (int64_t k = kv->n_jc - 1; k >= 0; k--) {     /* newest first: appended positions leave from the top */
        int64_t g = kv->jc[k].g;
        if (kv->pos[g] >= 0) cell_pairs(kv, &kv->seq[g * UB_SEQ_WORDS], kv->pos[g], 0);
    }
    for (int64_t k = 0; k < kv->n_jc; k++) {
        const kv_jcell *j = &kv->jc[k];
        int64_t g = j->g;
        kv->pos[g] = j->pos;
        kv->shift[g] = j->shift;
        kv->ext[2 * g] = j->x;
        kv->ext[2 * g + 1] = j->y;
        memcpy(&kv->seq[g * UB_SEQ_WORDS], j->seq, sizeof j->seq);
        if (j->pos >= 0) cell_pairs(kv, j->seq, j->pos, 1);
    }
    for (int32_t k = 0; k < kv->n_js; k++) {
        const kv_jstream *j = &kv->js[k];
        kv->head[j->st] = j->head;
        kv->used[j->st] = j->used;
        kv->used_max_p1[j->st] = j->used_max_p1;
        kv->has_shift[j->st] = j->has_shift;
    }
    kv->n_copies = kv->j_n_copies;
    kv_densify_all(kv);
    return UB_OK;
}

/* ---------------------------------------------------------------- sequence bounds */

static void stat_add(ub_kv *kv, int32_t s, int32_t p) {
    kv_pm_add(&kv->pool, &kv->stat[s], p);
    kv->n_pairs++;
}

static void stat_remove(ub_kv *kv, int32_t s, int32_t p) {
    kv_pm_remove(&kv->pool, &kv->stat[s], p);
    kv->n_pairs--;
}

void kv_densify_all(ub_kv *kv) {
    for (int32_t s = 0; s < kv->n_seq && s < UB_MAX_SEQ; s++) kv_pm_densify(&kv->pool, &kv->stat[s]);
}

int kv_pairs_reserve(ub_kv *kv, int64_t n_more) {
    if (kv_pool_reserve(&kv->pool, kv->n_pairs + n_more - kv->pool.live))
        return kv_fail(kv, UB_E_NOMEM, "out of memory (sequence position maps)");
    return UB_OK;
}

/* Rebuilds every position map from the cells (used by restore). */
int kv_recompute_stats(ub_kv *kv) {
    int64_t pairs = 0;
    for (int64_t g = 0; g < kv->n_cells; g++) {
        if (kv->pos[g] < 0) continue;
        const uint64_t *set = &kv->seq[g * UB_SEQ_WORDS];
        for (int w = 0; w < UB_SEQ_WORDS; w++) pairs += __builtin_popcountll(set[w]);
    }
    kv_pool_reset(&kv->pool, kv->stat, UB_MAX_SEQ);
    kv->n_pairs = 0;
    if (kv_pairs_reserve(kv, pairs)) return UB_E_NOMEM;
    for (int64_t g = 0; g < kv->n_cells; g++)
        if (kv->pos[g] >= 0) cell_pairs(kv, &kv->seq[g * UB_SEQ_WORDS], kv->pos[g], 1);
    kv_densify_all(kv);
    return UB_OK;
}

int ub_kv_seq_pos_min(ub_kv *kv, int32_t s, int32_t *out) {
    if (s < 0 || s >= kv->n_seq) return kv_fail(kv, UB_E_ARG, "invalid seq_id %d (valid: 0..%d)", s, kv->n_seq - 1);
    *out = kv_stat(kv, s)->min;
    return UB_OK;
}

int ub_kv_seq_pos_max(ub_kv *kv, int32_t s, int32_t *out) {
    if (s < 0 || s >= kv->n_seq) return kv_fail(kv, UB_E_ARG, "invalid seq_id %d (valid: 0..%d)", s, kv->n_seq - 1);
    *out = kv_stat(kv, s)->max;
    return UB_OK;
}

int ub_kv_seq_counts(ub_kv *kv, int32_t n, int32_t *counts) {
    if (n < 0) return kv_fail(kv, UB_E_ARG, "negative sequence count %d", n);
    for (int32_t s = 0; s < n; s++) counts[s] = s < kv->n_seq && s < UB_MAX_SEQ ? kv->stat[s].n : 0;
    return UB_OK;
}

int ub_kv_seq_pos_ge(ub_kv *kv, int32_t s, int32_t p, int32_t *out) {
    if (s < 0 || s >= kv->n_seq) return kv_fail(kv, UB_E_ARG, "invalid seq_id %d (valid: 0..%d)", s, kv->n_seq - 1);
    *out = kv_pm_ge(&kv->pool, &kv->stat[s], p);
    return UB_OK;
}

int ub_kv_seq_pos_lt(ub_kv *kv, int32_t s, int32_t p, int32_t *out) {
    if (s < 0 || s >= kv->n_seq) return kv_fail(kv, UB_E_ARG, "invalid seq_id %d (valid: 0..%d)", s, kv->n_seq - 1);
    *out = kv_pm_lt(&kv->pool, &kv->stat[s], p);
    return UB_OK;
}

int ub_kv_window_hole(ub_kv *full, ub_kv *swa, int32_t s, int32_t t, int32_t p, int32_t *out) {
    if (s < 0 || s >= full->n_seq || s >= swa->n_seq)
        return kv_fail(full, UB_E_ARG, "invalid seq_id %d (valid: 0..%d)", s, full->n_seq - 1);
    *out = kv_pm_first_missing(&full->pool, &full->stat[s], &swa->pool, &swa->stat[s], t, p);
    return UB_OK;
}

/* mn, mx: int32[n] caller-owned; entries for ids >= n_seq are -1. */
int ub_kv_seq_pos_bounds(ub_kv *kv, int32_t n, int32_t *mn, int32_t *mx) {
    if (n < 0) return kv_fail(kv, UB_E_ARG, "negative sequence count %d", n);
    for (int32_t s = 0; s < n; s++) {
        if (s < kv->n_seq) {
            const kv_seqstat *t = kv_stat(kv, s);
            mn[s] = t->min;
            mx[s] = t->max;
        } else {
            mn[s] = mx[s] = -1;
        }
    }
    return UB_OK;
}

/* ---------------------------------------------------------------- cell primitives */

static void stream_cell_emptied(ub_kv *kv, int32_t st, int32_t i) {
    kv->used[st]--;
    if (i + 1 == kv->used_max_p1[st]) {
        const int32_t *p = kv->pos + (int64_t)st * kv->size;
        int32_t j = i;
        while (j > 0 && p[j - 1] < 0) j--;
        kv->used_max_p1[st] = j;
    }
}

/* Empties cell i of stream st (which must be non-empty): every seq loses that position. */
void kv_cell_rm(ub_kv *kv, int32_t st, int32_t i) {
    int64_t g = (int64_t)st * kv->size + i;
    kv_touch_cell(kv, g);
    kv_touch_stream(kv, st);
    uint64_t *set = &kv->seq[g * UB_SEQ_WORDS];
    for (int w = 0; w < UB_SEQ_WORDS; w++) {
        uint64_t bits = set[w];
        while (bits) {
            int b = __builtin_ctzll(bits);
            bits &= bits - 1;
            stat_remove(kv, w * 64 + b, kv->pos[g]);
        }
        set[w] = 0;
    }
    kv->pos[g] = -1;
    kv->shift[g] = 0;
    kv->ext[2 * g] = kv->ext[2 * g + 1] = 0;
    stream_cell_emptied(kv, st, i);
}

/* Drops s from cell i (which must hold s); the cell becomes empty with its last seq. */
int kv_cell_seq_rm(ub_kv *kv, int32_t st, int32_t i, int32_t s) {
    int64_t g = (int64_t)st * kv->size + i;
    uint64_t *set = &kv->seq[g * UB_SEQ_WORDS];
    kv_touch_cell(kv, g);
    set[s >> 6] &= ~((uint64_t)1 << (s & 63));
    stat_remove(kv, s, kv->pos[g]);
    if (set[0] | set[1] | set[2] | set[3]) return 0;
    kv_touch_stream(kv, st);
    kv->pos[g] = -1;
    kv->shift[g] = 0;
    kv->ext[2 * g] = kv->ext[2 * g + 1] = 0;
    stream_cell_emptied(kv, st, i);
    return 1;
}

/* llama_kv_cells::seq_keep: a cell holding s keeps only s; any other non-empty cell is emptied. */
int kv_cell_seq_keep(ub_kv *kv, int32_t st, int32_t i, int32_t s) {
    int64_t g = (int64_t)st * kv->size + i;
    const uint64_t *set = &kv->seq[g * UB_SEQ_WORDS];
    if (!(set[0] | set[1] | set[2] | set[3])) return 0;
    if (ub_set_has(set, s)) {
        uint64_t only[UB_SEQ_WORDS] = {0, 0, 0, 0};
        ub_set_add(only, s);
        if (ub_set_equal(set, only)) return 0;
        kv_touch_cell(kv, g);
        uint64_t *ws = &kv->seq[g * UB_SEQ_WORDS];
        for (int w = 0; w < UB_SEQ_WORDS; w++) {
            uint64_t bits = ws[w] & ~only[w];
            while (bits) {
                int b = __builtin_ctzll(bits);
                bits &= bits - 1;
                stat_remove(kv, w * 64 + b, kv->pos[g]);
            }
            ws[w] = only[w];
        }
        return 0;
    }
    kv_cell_rm(kv, st, i);
    return 1;
}

/* Adds s to cell i (non-empty, pos already set). A cell that already holds s is left alone (llama.cpp
 * asserts in debug builds and double-counts the position in release builds). */
void kv_cell_seq_add(ub_kv *kv, int32_t st, int32_t i, int32_t s) {
    int64_t g = (int64_t)st * kv->size + i;
    uint64_t *set = &kv->seq[g * UB_SEQ_WORDS];
    if (ub_set_has(set, s)) return;
    kv_touch_cell(kv, g);
    ub_set_add(set, s);
    stat_add(kv, s, kv->pos[g]);
}

/* Sets the position of an empty cell (it becomes used, with no sequence yet). */
void kv_cell_pos_set(ub_kv *kv, int32_t st, int32_t i, int32_t p) {
    int64_t g = (int64_t)st * kv->size + i;
    kv_touch_cell(kv, g);
    kv_touch_stream(kv, st);
    kv->pos[g] = p;
    kv->used[st]++;
    if (i + 1 > kv->used_max_p1[st]) kv->used_max_p1[st] = i + 1;
}

/* pos += d, shift += d (pending K-shift). A position that drops below 0 empties the cell for all its
 * seqs. Returns 1 when the cell became empty. */
int kv_cell_pos_add(ub_kv *kv, int32_t st, int32_t i, int32_t d) {
    int64_t g = (int64_t)st * kv->size + i;
    kv_touch_cell(kv, g);
    kv_touch_stream(kv, st);
    kv->has_shift[st] = 1;
    int32_t np = kv->pos[g] + d;   /* callers guarantee no int32 overflow */
    if (np < 0) {
        kv_cell_rm(kv, st, i);
        return 1;
    }
    uint64_t *set = &kv->seq[g * UB_SEQ_WORDS];
    for (int w = 0; w < UB_SEQ_WORDS; w++) {
        uint64_t bits = set[w];
        while (bits) {
            int b = __builtin_ctzll(bits);
            bits &= bits - 1;
            stat_remove(kv, w * 64 + b, kv->pos[g]);
            stat_add(kv, w * 64 + b, np);
        }
    }
    kv->pos[g] = np;
    kv->shift[g] += d;
    return 0;
}

/* pos /= d (C truncation), shift += old - new: llama.cpp's sign, opposite to pos_add (kept for
 * bit-exactness; see spec Appendix B.4). d > 0 (checked by the caller). */
void kv_cell_pos_div(ub_kv *kv, int32_t st, int32_t i, int32_t d) {
    int64_t g = (int64_t)st * kv->size + i;
    kv_touch_cell(kv, g);
    kv_touch_stream(kv, st);
    kv->has_shift[st] = 1;
    int32_t old = kv->pos[g], np = old / d;
    uint64_t *set = &kv->seq[g * UB_SEQ_WORDS];
    for (int w = 0; w < UB_SEQ_WORDS; w++) {
        uint64_t bits = set[w];
        while (bits) {
            int b = __builtin_ctzll(bits);
            bits &= bits - 1;
            stat_remove(kv, w * 64 + b, old);
            stat_add(kv, w * 64 + b, np);
        }
    }
    kv->pos[g] = np;
    kv->shift[g] += old - np;
}

/* Empties every cell of stream st and clears its shift flag (llama_kv_cells::reset); head untouched. */
void kv_stream_reset(ub_kv *kv, int32_t st) {
    for (int32_t i = 0; i < kv->size; i++) {
        int64_t g = (int64_t)st * kv->size + i;
        if (kv->pos[g] >= 0) kv_cell_rm(kv, st, i);
        else if (kv->shift[g]) { kv_touch_cell(kv, g); kv->shift[g] = 0; }
    }
    kv_touch_stream(kv, st);
    kv->has_shift[st] = 0;
}

void kv_set_head(ub_kv *kv, int32_t st, int32_t h) {
    if (kv->head[st] == h) return;
    kv_touch_stream(kv, st);
    kv->head[st] = h;
}

/* idx/pos int32[size], seq uint64[size*4], shift int32[size] or NULL, ext int32[size*2] or NULL:
 * caller-owned; filled with the non-empty cells of stream st in ascending index order. */
int32_t ub_kv_cells(ub_kv *kv, int32_t st, int32_t *idx, int32_t *pos, uint64_t *seq, int32_t *shift,
                    int32_t *ext) {
    if (st < 0 || st >= kv->n_stream) {
        kv_fail(kv, UB_E_ARG, "invalid stream %d (valid: 0..%d)", st, kv->n_stream - 1);
        return -1;
    }
    int32_t n = 0;
    for (int32_t i = 0; i < kv->used_max_p1[st]; i++) {
        int64_t g = (int64_t)st * kv->size + i;
        if (kv->pos[g] < 0) continue;
        idx[n] = i;
        pos[n] = kv->pos[g];
        memcpy(&seq[(int64_t)n * UB_SEQ_WORDS], &kv->seq[g * UB_SEQ_WORDS], UB_SEQ_WORDS * sizeof(uint64_t));
        if (shift) shift[n] = kv->shift[g];
        if (ext) { ext[2 * n] = kv->ext[2 * g]; ext[2 * n + 1] = kv->ext[2 * g + 1]; }
        n++;
    }
    return n;
}
