/* Slot search and placement: find_slot (llama-kv-cache.cpp find_slot, cont = false), apply_ubatch
 * (incl. the SWA purge that keeps every sequence gap-free), prepare (dry run + exact rollback) and n_kv.
 *
 * prepare differs from llama.cpp on purpose in two ways, both only visible after a FAILED dry run:
 *  - llama.cpp restores stream strm[k]'s head from the saved head of stream k (local index); we restore
 *    every head to its own value;
 *  - llama.cpp restores only the slot cells, so SWA purges (and heads they lowered) made by apply_ubatch
 *    during the dry run stay; we undo them too.
 * Both follow from running the dry run inside a journaled transaction (kv_cache.c), which restores
 * every cell, head, used count, shift and sequence bound exactly. */
#include <stdlib.h>
#include <string.h>

#include "kv_internal.h"

/* Checks that ub can be placed in this cache and returns its grouping: ns groups of per rows.
 * Unified (one stream): ns = 1. Otherwise ns = n_seqs_unq and every row of group k must carry exactly
 * the one id seq_id_unq[k] (what split_equal(sequential) produces; llama.cpp only asserts row 0). */
static int slot_shape(ub_kv *kv, const ub_ubatch *ub, int32_t *ns_out, int32_t *per_out) {
    if (!ub || ub->n_tokens < 1) return kv_fail(kv, UB_E_ARG, "find_slot: empty ubatch");
    int32_t n = ub->n_tokens;
    for (int32_t r = 0; r < n; r++) {
        for (int32_t k = ub->seq_off[r]; k < ub->seq_off[r + 1]; k++) {
            int32_t s = ub->seq_id[k];
            if (s < 0 || s >= kv->n_seq)
                return kv_fail(kv, UB_E_ARG, "find_slot: ubatch row %d has seq_id %d outside 0..%d", r, s,
                               kv->n_seq - 1);
        }
        if (ub->seq_off[r + 1] <= ub->seq_off[r])
            return kv_fail(kv, UB_E_ARG, "find_slot: ubatch row %d has no seq_id", r);
    }
    if (kv->n_stream == 1) {
        *ns_out = 1;
        *per_out = n;
        return UB_OK;
    }
    int32_t ns = ub->n_seqs_unq;
    if (ns < 1 || n % ns != 0)
        return kv_fail(kv, UB_E_ARG, "find_slot: %d tokens cannot be spread evenly over %d streams", n, ns);
    int32_t per = n / ns;
    for (int32_t k = 0; k < ns; k++) {
        int32_t sid = ub->seq_id_unq[k];
        for (int32_t r = k * per; r < (k + 1) * per; r++) {
            if (ub->seq_off[r + 1] - ub->seq_off[r] != 1 || ub->seq_id[ub->seq_off[r]] != sid)
                return kv_fail(kv, UB_E_ARG,
                               "find_slot: ubatch row %d must belong to seq %d only (one stream per sequence "
                               "group; coupled sequences need a unified KV cache)", r, sid);
        }
    }
    *ns_out = ns;
    *per_out = per;
    return UB_OK;
}

static int usable(ub_kv *kv, int64_t g) {
    if (kv->pos[g] < 0) return 1;
    if (kv->swa_type == UB_SWA_NONE) return 0;
    const uint64_t *set = &kv->seq[g * UB_SEQ_WORDS];
    int cnt = 0, s = -1;
    for (int w = 0; w < UB_SEQ_WORDS; w++) {
        if (!set[w]) continue;
        cnt += __builtin_popcountll(set[w]);
        s = w * 64 + __builtin_ctzll(set[w]);
    }
    if (cnt != 1) return 0;
    return kv_masked_swa(kv->swa_type, kv->n_swa, kv->pos[g], (int64_t)kv_stat(kv, s)->max + 1);
}

/* find_slot: strm int32[ns], idxs int32[ns*per] caller-owned. Per group, scans its stream from the
 * head (restarting at 0 when head > used + 2*per), wrapping once around, collecting usable cells
 * (not necessarily contiguous). Returns UB_OK or UB_E_KVFULL; the cache is not modified. */
static int find_slot(ub_kv *kv, const ub_ubatch *ub, int32_t ns, int32_t per, int32_t *strm, int32_t *idxs) {
    const int32_t size = kv->size;
    for (int32_t k = 0; k < ns; k++) {
        int32_t st = kv->n_stream == 1 ? 0 : ub->seq_id_unq[k];
        strm[k] = st;
        if (per > size)
            return kv_fail(kv, UB_E_KVFULL, "find_slot: n_tokens = %d > size = %d", per, size);
        int64_t head = kv->head[st];
        if (head > (int64_t)kv->used[st] + 2 * (int64_t)per) head = 0;
        int32_t *out = idxs + (int64_t)k * per;
        int32_t got = 0;
        int64_t tested = 0;
        const int64_t base = (int64_t)st * size;
        for (;;) {
            if (head + 1 > size) { head = 0; continue; }
            int64_t c = head++;
            tested++;
            if (usable(kv, base + c)) out[got++] = (int32_t)c;
            if (got == per) break;
            if (tested >= size)
                return kv_fail(kv, UB_E_KVFULL,
                               "find_slot: no KV slot for %d tokens in stream %d (size %d, used %d)", per, st,
                               size, kv->used[st]);
        }
    }
    return UB_OK;
}

/* apply_ubatch: writes ub's rows into the slot cells (an SWA-reused cell is emptied first), stores
 * ext (x, y) for 2-D positions, adds every seq id of the row, purges [seq_pos_min, max overwritten]
 * of any sequence that lost a cell so its range stays gap-free, and moves each stream's head to the
 * cell after its last slot cell. */
static int apply_slot(ub_kv *kv, const ub_ubatch *ub, int32_t ns, int32_t per, const int32_t *strm,
                      const int32_t *idxs) {
    int64_t bound = (int64_t)ns * per;
    if (kv->swa_type != UB_SWA_NONE) bound += (int64_t)ns * kv->size;
    if (kv_journal_reserve(kv, bound)) return UB_E_NOMEM;
    if (kv_pairs_reserve(kv, (int64_t)ub->seq_off[ub->n_tokens] - ub->seq_off[0])) return UB_E_NOMEM;
    int32_t max_rm[UB_MAX_SEQ];
    int any_rm = 0;
    for (int s = 0; s < UB_MAX_SEQ; s++) max_rm[s] = -1;
    const int32_t n = ub->n_tokens;
    const int is_2d = ub->n_pos >= 3;
    for (int32_t k = 0; k < ns; k++) {
        const int32_t st = strm[k];
        for (int32_t r = 0; r < per; r++) {
            const int32_t row = k * per + r, c = idxs[(int64_t)k * per + r];
            const int64_t g = (int64_t)st * kv->size + c;
            if (kv->pos[g] >= 0) {
                const uint64_t *set = &kv->seq[g * UB_SEQ_WORDS];
                for (int w = 0; w < UB_SEQ_WORDS; w++) {
                    if (!set[w]) continue;
                    int s = w * 64 + __builtin_ctzll(set[w]);
                    if (kv->pos[g] > max_rm[s]) max_rm[s] = kv->pos[g];
                    any_rm = 1;
                    break;
                }
                kv_cell_rm(kv, st, c);
            }
            kv_cell_pos_set(kv, st, c, ub->pos[row]);
            if (is_2d) {
                kv->ext[2 * g] = ub->pos[row + 2 * n];
                kv->ext[2 * g + 1] = ub->pos[row + n];
            }
            for (int32_t q = ub->seq_off[row]; q < ub->seq_off[row + 1]; q++) kv_cell_seq_add(kv, st, c, ub->seq_id[q]);
        }
    }
    if (any_rm) {
        for (int32_t s = 0; s < UB_MAX_SEQ; s++) {
            if (max_rm[s] < 0) continue;
            int32_t mn = kv_stat(kv, s)->min;
            if (mn >= 0 && mn <= max_rm[s]) ub_kv_seq_rm(kv, s, mn, max_rm[s] + 1);
        }
    }
    for (int32_t k = 0; k < ns; k++) kv_set_head(kv, strm[k], idxs[(int64_t)k * per + per - 1] + 1);
    kv_densify_all(kv);
    return UB_OK;
}

/* ---------------------------------------------------------------- plan */

static int plan_push(ub_kv *kv, int32_t ns, int32_t per, int32_t **strm, int32_t **idxs) {
    if (kv->plan_n == kv->plan_cap) {
        int32_t cap = kv->plan_cap ? kv->plan_cap * 2 : 16;
        int32_t *a = realloc(kv->plan_ns, (size_t)cap * sizeof(int32_t));
        if (!a) return kv_fail(kv, UB_E_NOMEM, "out of memory (plan)");
        kv->plan_ns = a;
        int32_t *b = realloc(kv->plan_per, (size_t)cap * sizeof(int32_t));
        if (!b) return kv_fail(kv, UB_E_NOMEM, "out of memory (plan)");
        kv->plan_per = b;
        int64_t *c = realloc(kv->plan_off, (size_t)cap * sizeof(int64_t));
        if (!c) return kv_fail(kv, UB_E_NOMEM, "out of memory (plan)");
        kv->plan_off = c;
        kv->plan_cap = cap;
    }
    int64_t need = kv->plan_len + ns + (int64_t)ns * per;
    if (need > kv->plan_cap_data) {
        int64_t cap = kv->plan_cap_data ? kv->plan_cap_data : 1024;
        while (cap < need) cap *= 2;
        int32_t *d = realloc(kv->plan_data, (size_t)cap * sizeof(int32_t));
        if (!d) return kv_fail(kv, UB_E_NOMEM, "out of memory (plan)");
        kv->plan_data = d;
        kv->plan_cap_data = cap;
    }
    int32_t i = kv->plan_n++;
    kv->plan_ns[i] = ns;
    kv->plan_per[i] = per;
    kv->plan_off[i] = kv->plan_len;
    *strm = kv->plan_data + kv->plan_len;
    *idxs = *strm + ns;
    kv->plan_len = need;
    return UB_OK;
}

/* ubs: n_ub borrowed ubatch pointers. Dry run inside a transaction, always rolled back. The slots are
 * kept as the plan (cleared first); *failed_ub = index of the ubatch that found no slot (or -1). */
int ub_kv_prepare(ub_kv *kv, const ub_ubatch *const *ubs, int32_t n_ub, int32_t *failed_ub) {
    if (failed_ub) *failed_ub = -1;
    if (n_ub < 0 || (n_ub > 0 && !ubs)) return kv_fail(kv, UB_E_ARG, "prepare: bad ubatch list");
    kv->plan_n = 0;
    kv->plan_len = 0;
    int rc = ub_kv_begin(kv);
    if (rc) return rc;
    for (int32_t u = 0; u < n_ub && rc == UB_OK; u++) {
        int32_t ns = 0, per = 0, *strm = NULL, *idxs = NULL;
        rc = slot_shape(kv, ubs[u], &ns, &per);
        if (rc == UB_OK) rc = plan_push(kv, ns, per, &strm, &idxs);
        if (rc == UB_OK) rc = find_slot(kv, ubs[u], ns, per, strm, idxs);
        if (rc == UB_OK) rc = apply_slot(kv, ubs[u], ns, per, strm, idxs);
        if (rc != UB_OK && failed_ub) *failed_ub = u;
    }
    ub_kv_rollback(kv);
    if (rc != UB_OK) {
        kv->plan_n = 0;
        kv->plan_len = 0;
    }
    return rc;
}

int32_t ub_kv_plan_n(const ub_kv *kv) { return kv->plan_n; }
int32_t ub_kv_plan_ns(const ub_kv *kv, int32_t i) { return i >= 0 && i < kv->plan_n ? kv->plan_ns[i] : 0; }
int32_t ub_kv_plan_per(const ub_kv *kv, int32_t i) { return i >= 0 && i < kv->plan_n ? kv->plan_per[i] : 0; }
const int32_t *ub_kv_plan_strm(const ub_kv *kv, int32_t i) {
    return i >= 0 && i < kv->plan_n ? kv->plan_data + kv->plan_off[i] : NULL;
}
const int32_t *ub_kv_plan_idxs(const ub_kv *kv, int32_t i) {
    return i >= 0 && i < kv->plan_n ? kv->plan_data + kv->plan_off[i] + kv->plan_ns[i] : NULL;
}

/* Applies plan slot i to ub (the ubatch it was planned for, same shape). */
int ub_kv_apply(ub_kv *kv, int32_t i, const ub_ubatch *ub) {
    if (i < 0 || i >= kv->plan_n) return kv_fail(kv, UB_E_ORDER, "apply: no planned slot %d", i);
    int32_t ns, per;
    int rc = slot_shape(kv, ub, &ns, &per);
    if (rc) return rc;
    if (ns != kv->plan_ns[i] || per != kv->plan_per[i])
        return kv_fail(kv, UB_E_ARG, "apply: ubatch shape %dx%d differs from planned slot %d (%dx%d)", ns, per, i,
                       kv->plan_ns[i], kv->plan_per[i]);
    const int32_t *strm = kv->plan_data + kv->plan_off[i];
    const int32_t *idxs = strm + ns;
    for (int32_t k = 0; k < ns; k++)   /* the cells must be usable now (they are, right after prepare) */
        for (int32_t r = 0; r < per; r++)
            if (!usable(kv, (int64_t)strm[k] * kv->size + idxs[(int64_t)k * per + r]))
                return kv_fail(kv, UB_E_ARG, "apply: planned cell %d of stream %d is no longer free",
                               idxs[(int64_t)k * per + r], strm[k]);
    return apply_slot(kv, ub, ns, per, strm, idxs);
}

int32_t ub_kv_n_kv(ub_kv *kv, int32_t i) {
    if (i < 0 || i >= kv->plan_n) return -1;
    const int32_t *strm = kv->plan_data + kv->plan_off[i];
    int32_t best = 0;
    for (int32_t k = 0; k < kv->plan_ns[i]; k++) {
        int32_t u = kv->used_max_p1[strm[k]];
        int32_t v = ((u + 255) / 256) * 256;
        if (v < 256) v = 256;
        if (v > kv->size) v = kv->size;
        if (v > best) best = v;
    }
    return best;
}
