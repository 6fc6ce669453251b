/* Sequence operations (llama_kv_cache::seq_rm / seq_cp / seq_keep / seq_add / seq_div / clear) with
 * llama.cpp's head rules, and the pending update (stream copies + K-shift). Every op validates all its
 * arguments before changing anything, so a rejected call leaves the cache untouched. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "kv_internal.h"

static int check_seq(ub_kv *kv, const char *what, int32_t s) {
    if (s < 0 || s >= kv->n_seq)
        return kv_fail(kv, UB_E_ARG, "%s: invalid seq_id %d (valid: 0..%d)", what, s, kv->n_seq - 1);
    return UB_OK;
}

static void norm_range(int32_t *p0, int32_t *p1) {
    if (*p0 < 0) *p0 = 0;
    if (*p1 < 0) *p1 = INT32_MAX;
}

/* True when cell i (of a stream whose pos/seq arrays are given) holds seq s at a position in [p0, p1). */
static inline int cell_in_range(const int32_t *pos, const uint64_t *seq, int32_t i, int32_t s, int32_t p0, int32_t p1) {
    return pos[i] >= p0 && pos[i] < p1 && ub_set_has(seq + (int64_t)i * UB_SEQ_WORDS, s);
}

static int reserve_streams(ub_kv *kv, int32_t n_streams) {
    return kv_journal_reserve(kv, (int64_t)n_streams * kv->size);
}

/* llama.cpp: the lowest cell a removal emptied pulls the head down to it (never up). */
static void lower_head(ub_kv *kv, int32_t st, int32_t new_head) {
    if (new_head >= 0 && new_head < kv->head[st]) kv_set_head(kv, st, new_head);
}

/* Removes s (or, for s == -1, every seq in every stream) from the cells whose pos is in [p0, p1). */
int ub_kv_seq_rm(ub_kv *kv, int32_t s, int32_t p0, int32_t p1) {
    if (s != -1 && check_seq(kv, "seq_rm", s)) return UB_E_ARG;
    norm_range(&p0, &p1);
    if (reserve_streams(kv, s == -1 ? kv->n_stream : 1)) return UB_E_NOMEM;
    int32_t st0 = s == -1 ? 0 : kv_seq_stream(kv, s);
    int32_t st1 = s == -1 ? kv->n_stream : st0 + 1;
    for (int32_t st = st0; st < st1; st++) {
        int32_t new_head = -1;
        const int32_t *pos = kv->pos + (int64_t)st * kv->size;
        const uint64_t *seq = kv->seq + (int64_t)st * kv->size * UB_SEQ_WORDS;
        int32_t end = kv->used_max_p1[st];
        for (int32_t i = 0; i < end; i++) {
            if (pos[i] < p0 || pos[i] >= p1) continue;
            int emptied;
            if (s == -1) {
                kv_cell_rm(kv, st, i);
                emptied = 1;
            } else {
                if (!ub_set_has(seq + (int64_t)i * UB_SEQ_WORDS, s)) continue;
                emptied = kv_cell_seq_rm(kv, st, i, s);
            }
            if (emptied && new_head < 0) new_head = i;
        }
        lower_head(kv, st, new_head);
    }
    kv_densify_all(kv);
    return UB_OK;
}

/* Same stream: every cell in range holding src also gets dst (metadata only). Different streams
 * (non-unified): only a full range is supported (llama.cpp aborts otherwise; we refuse with
 * UB_E_ARG); dst's stream is reset, every src cell is recreated at the same index for dst (pos minus
 * the pending shift, then the shift re-applied, same ext), head copied, and a data copy is queued. */
int ub_kv_seq_cp(ub_kv *kv, int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    if (check_seq(kv, "seq_cp", src) || check_seq(kv, "seq_cp", dst)) return UB_E_ARG;
    int32_t s0 = kv_seq_stream(kv, src), s1 = kv_seq_stream(kv, dst);
    if (s0 == s1) {
        if (src == dst) return UB_OK;
        norm_range(&p0, &p1);
        if (reserve_streams(kv, 1) || kv_pairs_reserve(kv, kv->used[s0])) return UB_E_NOMEM;
        const int32_t *pos = kv->pos + (int64_t)s0 * kv->size;
        const uint64_t *seq = kv->seq + (int64_t)s0 * kv->size * UB_SEQ_WORDS;
        for (int32_t i = 0, end = kv->used_max_p1[s0]; i < end; i++) {
            if (pos[i] < p0 || pos[i] >= p1) continue;
            if (ub_set_has(seq + (int64_t)i * UB_SEQ_WORDS, src)) kv_cell_seq_add(kv, s0, i, dst);
        }
        kv_densify_all(kv);
        return UB_OK;
    }
    int64_t size = kv->size;
    if ((p0 > 0 && p0 + 1 < size) || (p1 > 0 && p1 + 1 < size))
        return kv_fail(kv, UB_E_ARG,
                       "seq_cp: a copy between streams (seq %d -> %d) needs the full range, got [%d, %d) "
                       "(llama.cpp aborts: partial cross-stream copies are not supported)", src, dst, p0, p1);
    if (kv->n_copies == kv->cap_copies) {
        int32_t cap = kv->cap_copies ? kv->cap_copies * 2 : 8;
        int32_t *p = realloc(kv->copies, (size_t)cap * 2 * sizeof(int32_t));
        if (!p) return kv_fail(kv, UB_E_NOMEM, "out of memory (copy queue)");
        kv->copies = p;
        kv->cap_copies = cap;
    }
    if (reserve_streams(kv, 1) || kv_pairs_reserve(kv, kv->used[s0])) return UB_E_NOMEM;
    kv->copies[2 * kv->n_copies] = s0;
    kv->copies[2 * kv->n_copies + 1] = s1;
    kv->n_copies++;
    kv_stream_reset(kv, s1);
    const uint64_t *sseq = kv->seq + (int64_t)s0 * size * UB_SEQ_WORDS;
    for (int32_t i = 0, end = kv->used_max_p1[s0]; i < end; i++) {
        int64_t g0 = (int64_t)s0 * size + i, g1 = (int64_t)s1 * size + i;
        if (!ub_set_has(sseq + (int64_t)i * UB_SEQ_WORDS, src)) continue;
        int32_t sh = kv->shift[g0];
        kv_cell_pos_set(kv, s1, i, kv->pos[g0] - sh);
        kv_cell_seq_add(kv, s1, i, dst);
        if (sh != 0) kv_cell_pos_add(kv, s1, i, sh);
        kv->ext[2 * g1] = kv->ext[2 * g0];
        kv->ext[2 * g1 + 1] = kv->ext[2 * g0 + 1];
    }
    kv_set_head(kv, s1, kv->head[s0]);
    kv_densify_all(kv);
    return UB_OK;
}

/* In s's stream: cells holding s keep only s, every other non-empty cell is emptied; head rule as rm. */
int ub_kv_seq_keep(ub_kv *kv, int32_t s) {
    if (check_seq(kv, "seq_keep", s)) return UB_E_ARG;
    if (reserve_streams(kv, 1)) return UB_E_NOMEM;
    int32_t st = kv_seq_stream(kv, s), new_head = -1;
    for (int32_t i = 0, end = kv->used_max_p1[st]; i < end; i++)
        if (kv_cell_seq_keep(kv, st, i, s) && new_head < 0) new_head = i;
    lower_head(kv, st, new_head);
    kv_densify_all(kv);
    return UB_OK;
}

/* pos += delta for s's cells in [p0, p1) (a cell is moved for all its seqs; below 0 it is emptied).
 * Head = first emptied cell, else 0 (llama.cpp). Positions must stay within int32. */
int ub_kv_seq_add(ub_kv *kv, int32_t s, int32_t p0, int32_t p1, int32_t delta) {
    if (check_seq(kv, "seq_add", s)) return UB_E_ARG;
    if (delta == 0) return UB_OK;
    norm_range(&p0, &p1);
    if (p0 == p1) return UB_OK;
    int32_t st = kv_seq_stream(kv, s);
    const int32_t *pos = kv->pos + (int64_t)st * kv->size;
    const int32_t *shift = kv->shift + (int64_t)st * kv->size;
    const uint64_t *seq = kv->seq + (int64_t)st * kv->size * UB_SEQ_WORDS;
    int32_t end = kv->used_max_p1[st];
    for (int32_t i = 0; i < end; i++) {   /* validate first: nothing changes on failure */
        if (!cell_in_range(pos, seq, i, s, p0, p1)) continue;
        int64_t np = (int64_t)pos[i] + delta, ns = (int64_t)shift[i] + delta;
        if (np > INT32_MAX || ns > INT32_MAX || ns < INT32_MIN)
            return kv_fail(kv, UB_E_ARG, "seq_add: position %d of seq %d + delta %d overflows int32",
                           pos[i], s, delta);
    }
    if (reserve_streams(kv, 1)) return UB_E_NOMEM;
    int32_t new_head = -1;
    for (int32_t i = 0; i < end; i++) {
        if (!cell_in_range(pos, seq, i, s, p0, p1)) continue;
        if (kv_cell_pos_add(kv, st, i, delta) && new_head < 0) new_head = i;
    }
    kv_set_head(kv, st, new_head >= 0 ? new_head : 0);
    kv_densify_all(kv);
    return UB_OK;
}

/* pos /= d for s's cells in [p0, p1); head untouched. d must be >= 1 (llama.cpp divides by zero or
 * produces negative positions otherwise). */
int ub_kv_seq_div(ub_kv *kv, int32_t s, int32_t p0, int32_t p1, int32_t d) {
    if (check_seq(kv, "seq_div", s)) return UB_E_ARG;
    if (d < 1) return kv_fail(kv, UB_E_ARG, "seq_div: divisor %d must be >= 1", d);
    if (d == 1) return UB_OK;
    norm_range(&p0, &p1);
    if (p0 == p1) return UB_OK;
    int32_t st = kv_seq_stream(kv, s);
    const int32_t *pos = kv->pos + (int64_t)st * kv->size;
    const int32_t *shift = kv->shift + (int64_t)st * kv->size;
    const uint64_t *seq = kv->seq + (int64_t)st * kv->size * UB_SEQ_WORDS;
    int32_t end = kv->used_max_p1[st];
    for (int32_t i = 0; i < end; i++) {
        if (!cell_in_range(pos, seq, i, s, p0, p1)) continue;
        if ((int64_t)shift[i] + (pos[i] - pos[i] / d) > INT32_MAX)
            return kv_fail(kv, UB_E_ARG, "seq_div: pending shift of seq %d overflows int32", s);
    }
    if (reserve_streams(kv, 1)) return UB_E_NOMEM;
    for (int32_t i = 0; i < end; i++) {
        if (!cell_in_range(pos, seq, i, s, p0, p1)) continue;
        kv_cell_pos_div(kv, st, i, d);
    }
    kv_densify_all(kv);
    return UB_OK;
}

/* Empties every cell of every stream and zeroes the heads (the copy queue is kept, as llama.cpp). */
void ub_kv_clear(ub_kv *kv) {
    if (reserve_streams(kv, kv->n_stream)) return;
    for (int32_t st = 0; st < kv->n_stream; st++) {
        kv_stream_reset(kv, st);
        kv_set_head(kv, st, 0);
    }
    kv_densify_all(kv);
    kv->plan_n = 0;
}

int32_t ub_kv_has_update(const ub_kv *kv) {
    if (kv->n_copies) return 1;
    for (int32_t st = 0; st < kv->n_stream; st++)
        if (kv->has_shift[st]) return 1;
    return 0;
}

/* copies int32[2*n_copies] (src, dst pairs, in queue order) or NULL when the queue is empty;
 * shift int32[n_stream*size] receives every cell's pending shift when any stream has one (*has_shift
 * = 1). Then the queue is emptied and every shift cleared (llama.cpp's update + reset_shift). Inside a
 * transaction the clearing is journaled, so a rollback makes the update pending again. */
int ub_kv_take_update(ub_kv *kv, int32_t *copies, int32_t *shift, int32_t *has_shift) {
    if (kv->n_copies && !copies) return kv_fail(kv, UB_E_ARG, "take_update: no buffer for the copies");
    int any = 0;
    for (int32_t st = 0; st < kv->n_stream; st++) any |= kv->has_shift[st];
    if (any && !shift) return kv_fail(kv, UB_E_ARG, "take_update: no buffer for the shift");
    if (any && kv->txn) {
        int64_t n_shifted = 0;
        for (int64_t g = 0; g < kv->n_cells; g++) n_shifted += kv->shift[g] != 0;
        if (kv_journal_reserve(kv, n_shifted)) return UB_E_NOMEM;
    }
    if (kv->n_copies) memcpy(copies, kv->copies, (size_t)kv->n_copies * 2 * sizeof(int32_t));
    kv->n_copies = 0;                 /* the queue itself is kept: rollback restores the count */
    *has_shift = any;
    if (any) {
        memcpy(shift, kv->shift, (size_t)kv->n_cells * sizeof(int32_t));
        if (kv->txn) {
            for (int64_t g = 0; g < kv->n_cells; g++)
                if (kv->shift[g]) { kv_touch_cell(kv, g); kv->shift[g] = 0; }
            for (int32_t st = 0; st < kv->n_stream; st++)
                if (kv->has_shift[st]) { kv_touch_stream(kv, st); kv->has_shift[st] = 0; }
        } else {
            memset(kv->shift, 0, (size_t)kv->n_cells * sizeof(int32_t));
            memset(kv->has_shift, 0, (size_t)kv->n_stream * sizeof(int32_t));
        }
    }
    return UB_OK;
}
