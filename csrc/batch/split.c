/* Batch allocator: the three split strategies and ubatch_add (docs/llama-cpp-behaviours.md §B4). */
#include <string.h>

#include "alloc_state.h"

/* Gathers rows idxs[0..n) of the normalised batch into a new ubatch record (caller owns it) and marks
 * their outputs in out_ids (emission order). idxs: int32[n] batch indices. Returns NULL on OOM. */
static ub_ubatch *ubatch_add(ub_norm *nb, const int32_t *idxs, int32_t n, int32_t n_seqs, int32_t equal_seqs) {
    int32_t n_ids = 0;
    for (int32_t r = 0; r < n; r++) n_ids += nb->seq_off[idxs[r] + 1] - nb->seq_off[idxs[r]];
    ub_ubatch *ub = ub_ubatch_alloc(n, n_ids, nb->n_pos, nb->embd ? nb->n_embd : 0, nb->token != NULL);
    if (!ub) return NULL;
    uint64_t seen[UB_SEQ_WORDS] = {0, 0, 0, 0};
    int32_t w = 0, n_out = nb->n_out_ids;
    const int32_t *restrict src_off = nb->seq_off, *restrict src_id = nb->seq_id;
    const int8_t *restrict src_out = nb->output;
    const uint64_t *restrict src_set = nb->seq_set;
    int32_t *restrict dst_off = ub->seq_off, *restrict dst_id = ub->seq_id, *restrict dst_nid = ub->n_seq_id;
    int32_t *restrict out_ids = nb->out_ids, *restrict bidx = ub->batch_idxs;
    int8_t *restrict dst_out = ub->output;
    uint64_t *restrict dst_set = ub->seq_set;
    dst_off[0] = 0;
    for (int32_t r = 0; r < n; r++) {
        int32_t b = idxs[r];
        bidx[r] = b;
        int32_t k0 = src_off[b], k = src_off[b + 1] - k0;
        if (k == 1) dst_id[w] = src_id[k0];
        else memcpy(dst_id + w, src_id + k0, sizeof(int32_t) * (size_t)k);
        w += k;
        dst_off[r + 1] = w;
        dst_nid[r] = k;
        const uint64_t *set = src_set + (size_t)b * UB_SEQ_WORDS;
        uint64_t *dset = dst_set + (size_t)r * UB_SEQ_WORDS;
        for (int q = 0; q < UB_SEQ_WORDS; q++) { dset[q] = set[q]; seen[q] |= set[q]; }
        int8_t o = src_out[b];
        dst_out[r] = o;
        if (o) out_ids[n_out++] = b;
    }
    nb->n_out_ids = n_out;
    if (ub->token) {
        int32_t *restrict dt = ub->token;
        const int32_t *restrict st = nb->token;
        for (int32_t r = 0; r < n; r++) dt[r] = st[idxs[r]];
    }
    if (ub->embd)
        for (int32_t r = 0; r < n; r++)
            memcpy(ub->embd + (size_t)r * nb->n_embd, nb->embd + (size_t)idxs[r] * nb->n_embd, sizeof(float) * (size_t)nb->n_embd);
    for (int32_t j = 0; j < nb->n_pos; j++) {
        int32_t *restrict dp = ub->pos + (size_t)j * n;
        const int32_t *restrict sp = nb->pos + (size_t)j * nb->n_tokens;
        for (int32_t r = 0; r < n; r++) dp[r] = sp[idxs[r]];
    }
    int32_t u = 0;
    for (int q = 0; q < UB_SEQ_WORDS; q++)          /* ids are < n_seq_max by init's checks */
        for (uint64_t bits = seen[q]; bits; bits &= bits - 1) {
            int32_t s = q * 64 + __builtin_ctzll(bits);
            ub->seq_idx[s] = u;
            ub->seq_id_unq[u++] = s;
        }
    ub->n_seqs_unq = u;
    ub->n_seqs = n_seqs;
    ub->n_seq_tokens = n_seqs > 0 ? n / n_seqs : 0;
    ub->equal_seqs = equal_seqs;
    return ub;
}

static void mark_used(ub_norm *nb, int32_t t) {
    nb->used[t] = 1;
    nb->n_used++;
}

static void unmark_used(ub_norm *nb, int32_t t) {
    nb->used[t] = 0;
    nb->n_used--;
    if (t < nb->first_unused) nb->first_unused = t;
}

static int32_t advance_first_unused(ub_norm *nb) {
    while (nb->first_unused < nb->n_tokens && nb->used[nb->first_unused]) nb->first_unused++;
    return nb->first_unused;
}

/* Common entry checks: an inited allocator and n_ubatch >= 1. Returns the normalised batch or NULL. */
static ub_norm *split_begin(ub_alloc *a, int32_t n_ubatch, int32_t *status) {
    *status = UB_OK;
    if (!a) { *status = UB_E_ARG; return NULL; }
    a->err[0] = 0;
    if (!a->cur) { *status = ub_alloc_fail(a, UB_E_ORDER, "split called before a successful init"); return NULL; }
    if (n_ubatch < 1) { *status = ub_alloc_fail(a, UB_E_ARG, "n_ubatch must be >= 1, got %d", n_ubatch); return NULL; }
    return a->cur;
}

/* Builds the ubatch of rows idxs[0..n) (already marked used). On OOM the rows are given back so the
 * failed split leaves no trace: group cursors restart at 0 (they are only lower bounds of the first
 * unused row of each group) and out_ids is untouched (ubatch_add allocates before writing). */
static ub_ubatch *finish(ub_alloc *a, ub_norm *nb, const int32_t *idxs, int32_t n, int32_t n_seqs, int32_t eq,
                         int32_t *status) {
    ub_ubatch *ub = ubatch_add(nb, idxs, n, n_seqs, eq);
    if (!ub) {
        for (int32_t r = 0; r < n; r++) unmark_used(nb, idxs[r]);
        memset(nb->grp_cur, 0, sizeof(int32_t) * (size_t)(nb->n_groups > 0 ? nb->n_groups : 1));
        *status = ub_alloc_fail(a, UB_E_NOMEM, "out of memory while building a ubatch of %d tokens", n);
    }
    return ub;
}

int ub_alloc_split_reset(ub_alloc *a) {
    if (!a) return UB_E_ARG;
    if (!a->cur) return ub_alloc_fail(a, UB_E_ORDER, "split_reset called before a successful init");
    ub_norm_split_reset(a->cur);
    return UB_OK;
}

/* The rows grouped by seq set (llama.cpp's seq_set_map), built on first use after an init: split_simple
 * never needs them. No allocation (the buffers are reserved by init), so this cannot fail. Cursors start at
 * 0, a valid lower bound of each group's first unused row whatever was split before. */
static void ensure_groups(ub_norm *nb) {
    if (nb->groups_built) return;
    ub_build_groups(nb);
    memset(nb->grp_cur, 0, sizeof(int32_t) * (size_t)(nb->n_groups > 0 ? nb->n_groups : 1));
    nb->groups_built = 1;
}

/* split_simple (§B4.2): the next n_ubatch unused rows in batch order; n_seqs = n_tokens. */
ub_ubatch *ub_alloc_split_simple(ub_alloc *a, int32_t n_ubatch, int32_t *status) {
    ub_norm *nb = split_begin(a, n_ubatch, status);
    if (!nb) return NULL;
    int32_t *idxs = nb->scratch, n = 0;
    for (int32_t c = advance_first_unused(nb); c < nb->n_tokens && n < n_ubatch; c++) {
        if (nb->used[c]) continue;
        idxs[n++] = c;
        mark_used(nb, c);
    }
    if (n == 0) return NULL;
    return finish(a, nb, idxs, n, n, 0, status);
}

/* Position in group g's row list of its first unused row (the cursor only moves forward between resets). */
static int32_t group_next(ub_norm *nb, int32_t g) {
    int32_t c = nb->grp_cur[g], len = nb->grp_off[g + 1] - nb->grp_off[g];
    const int32_t *rows = nb->grp_tok + nb->grp_off[g];
    while (c < len && nb->used[rows[c]]) c++;
    nb->grp_cur[g] = c;
    return c;
}

/* split_equal (§B4.3): n disjoint seq sets grown in lockstep. strict = 1 chooses at most n_ubatch sets
 * (never more than n_ubatch tokens); strict = 0 keeps llama.cpp's n_ubatch + 1 overflow.
 * Rows of the result: n consecutive groups of the chosen sets, each in batch order. */
ub_ubatch *ub_alloc_split_equal(ub_alloc *a, int32_t n_ubatch, int32_t sequential, int32_t n_keep_tail,
                                int32_t strict, int32_t *status) {
    ub_norm *nb = split_begin(a, n_ubatch, status);
    if (!nb) return NULL;
    ensure_groups(nb);
    if (n_keep_tail < 0 || n_keep_tail >= n_ubatch) {
        *status = ub_alloc_fail(a, UB_E_BATCH, "n_keep_tail = %d must be >= 0 and < n_ubatch = %d", n_keep_tail, n_ubatch);
        return NULL;
    }
    if (sequential && nb->has_cpl) {
        *status = ub_alloc_fail(a, UB_E_SPLIT, "sequential split is not supported when there are coupled sequences "
                                "in the input batch (you may need to use the -kvu flag)");
        return NULL;
    }
    /* phase 1: choose disjoint sets in order of their first unused row */
    int32_t max_sets = strict ? n_ubatch : n_ubatch + 1;
    /* scratch (int32[8 * n_tokens]): sets | start cursors | rows_tmp | final rows, n_tokens each */
    int32_t *sets = nb->scratch;
    int32_t n = 0, last = -1;
    uint64_t taken[UB_SEQ_WORDS] = {0, 0, 0, 0};
    for (int32_t i = advance_first_unused(nb); i < nb->n_tokens; i++) {
        if (nb->used[i]) continue;
        const uint64_t *set = nb->seq_set + (size_t)i * UB_SEQ_WORDS;
        if (!ub_set_disjoint(set, taken)) continue;
        int32_t s0 = nb->seq_id[nb->seq_off[i]];
        if (sequential && n > 0 && s0 != last + 1) continue;
        sets[n++] = nb->tok_group[i];
        last = s0;
        for (int q = 0; q < UB_SEQ_WORDS; q++) taken[q] |= set[q];
        if (n >= max_sets || ub_set_equal(taken, nb->present)) break;
    }
    if (n == 0) return NULL;

    /* phase 2: take one row of every set per step while the next step still fits */
    int32_t *start = nb->scratch + nb->n_tokens;          /* cursor of each set before this ubatch */
    int32_t *rows_tmp = nb->scratch + 2 * (size_t)nb->n_tokens;   /* step-major: rows_tmp[step*n + k] */
    int32_t L = 0;
    for (int32_t k = 0; k < n; k++) start[k] = group_next(nb, sets[k]);
    for (;;) {
        int exhausted = 0;
        for (int32_t k = 0; k < n && !exhausted; k++) {
            int32_t g = sets[k];
            exhausted = group_next(nb, g) >= nb->grp_off[g + 1] - nb->grp_off[g];
        }
        if (exhausted) break;
        for (int32_t k = 0; k < n; k++) {
            int32_t g = sets[k];
            int32_t t = nb->grp_tok[nb->grp_off[g] + nb->grp_cur[g]];
            rows_tmp[(size_t)L * n + k] = t;
            mark_used(nb, t);
            nb->grp_cur[g]++;
        }
        L++;
        if ((int64_t)(L + 1) * n > n_ubatch) break;
    }
    /* phase 3 (n_keep_tail): keep the longest prefix of sets that leave 0 or >= n_keep_tail rows */
    int32_t extra0 = 0, keep = n;
    if (n_keep_tail > 0) {
        keep = 0;
        while (keep < n) {
            int32_t g = sets[keep];
            int32_t rem = (nb->grp_off[g + 1] - nb->grp_off[g]) - nb->grp_cur[g];
            if (rem != 0 && rem < n_keep_tail) break;
            keep++;
        }
        if (keep == 0) {
            int32_t g = sets[0];
            int32_t len = nb->grp_off[g + 1] - nb->grp_off[g];
            int32_t rem = len - nb->grp_cur[g];
            if ((int64_t)L + rem <= n_ubatch) {
                extra0 = rem;    /* take the whole rest of set 0 */
            } else {
                while (rem < n_keep_tail) {   /* give back set 0's last rows until a full tail remains */
                    L--;
                    unmark_used(nb, rows_tmp[(size_t)L * n + 0]);
                    nb->grp_cur[g]--;
                    rem++;
                }
            }
            keep = 1;
        }
    }
    /* un-use the sets that are dropped (k >= keep) */
    for (int32_t k = keep; k < n; k++) {
        for (int32_t st = 0; st < L; st++) unmark_used(nb, rows_tmp[(size_t)st * n + k]);
        nb->grp_cur[sets[k]] = start[k];
    }
    /* transpose into set-major rows: set 0 (plus its taken tail), then sets 1..keep-1 */
    int32_t *idxs = nb->scratch + 3 * (size_t)nb->n_tokens;
    int32_t w = 0;
    for (int32_t st = 0; st < L; st++) idxs[w++] = rows_tmp[(size_t)st * n + 0];
    if (extra0 > 0) {
        int32_t g = sets[0];
        const int32_t *rows = nb->grp_tok + nb->grp_off[g];
        int32_t len = nb->grp_off[g + 1] - nb->grp_off[g];
        for (int32_t c = nb->grp_cur[g]; c < len; c++) {
            if (nb->used[rows[c]]) continue;
            idxs[w++] = rows[c];
            mark_used(nb, rows[c]);
        }
        nb->grp_cur[g] = len;
    }
    for (int32_t k = 1; k < keep; k++)
        for (int32_t st = 0; st < L; st++) idxs[w++] = rows_tmp[(size_t)st * n + k];
    return finish(a, nb, idxs, w, keep, 1, status);
}

/* True when the 256-bit set s has exactly one bit. */
static int set_is_single(const uint64_t *s) {
    int words = 0;
    uint64_t w = 0;
    for (int q = 0; q < UB_SEQ_WORDS; q++)
        if (s[q]) { words++; w = s[q]; }
    return words == 1 && (w & (w - 1)) == 0;
}

/* split_seq (§B4.4): from the first unused row, follow rows whose set is a subset of the current one
 * (the allowed set only shrinks); one sequence set per ubatch, n_seqs = 1. */
ub_ubatch *ub_alloc_split_seq(ub_alloc *a, int32_t n_ubatch, int32_t *status) {
    ub_norm *nb = split_begin(a, n_ubatch, status);
    if (!nb) return NULL;
    ensure_groups(nb);
    int32_t c = advance_first_unused(nb);
    if (c >= nb->n_tokens) return NULL;
    int32_t *idxs = nb->scratch, n = 0;
    const uint64_t *cur = nb->seq_set + (size_t)c * UB_SEQ_WORDS;
    for (;;) {
        idxs[n++] = c;
        mark_used(nb, c);
        if (n >= n_ubatch) break;
        if (set_is_single(cur)) {
            /* a single-seq set: its only non-empty subset is itself, and cur can no longer change, so the
             * rest of the ubatch is that set's next unused rows (its row list is in batch order) */
            int32_t g = nb->tok_group[c];
            const int32_t *rows = nb->grp_tok + nb->grp_off[g];
            int32_t len = nb->grp_off[g + 1] - nb->grp_off[g];
            for (int32_t q = group_next(nb, g); q < len && n < n_ubatch; q++) {
                int32_t r = rows[q];
                if (nb->used[r] || r <= c) continue;
                idxs[n++] = r;
                mark_used(nb, r);
            }
            break;
        }
        int32_t nxt = -1;
        for (int32_t j = c + 1; j < nb->n_tokens; j++) {
            if (nb->used[j]) continue;
            if (ub_set_subset(nb->seq_set + (size_t)j * UB_SEQ_WORDS, cur)) { nxt = j; break; }
        }
        if (nxt < 0) break;
        c = nxt;
        cur = nb->seq_set + (size_t)c * UB_SEQ_WORDS;
    }
    return finish(a, nb, idxs, n, 1, 1, status);
}
