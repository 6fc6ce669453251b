/* The visible-cell lists of a placed ubatch, straight from the cells: for every ubatch row, the cells it
 * may attend in ascending (position, cell index) order - the input of the visible-cell attention
 * (csrc/compute/attention_vis.c). The same visibility rule as the KQ mask (kv_mask.c, which stays as the
 * inspection helper and the tests' oracle), without building the dense mask:
 *
 *   cell j of stream strm[k] is visible to row k*per + r iff it is non-empty, holds the row's primary seq
 *   s (its smallest id), and - when causal - p0 <= p1 (M-RoPE tie rule at p0 == p1), and it lies inside
 *   the sliding window (kv_masked_swa) when one applies.
 *
 * For each group the cells of the rows' sequences are listed once and sorted by (position, index)
 * (already sorted: O(m); a few ascending runs: merged; else qsort); every window type keeps an interval of positions, so a row's list
 * is a contiguous run of its sequence's list, found by two binary searches. Cost: O(n_kv + m log m) per
 * group plus the output, against the mask path's O(per * n_kv) fill + O(n_kv log n_kv) sort + scan. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kv_internal.h"

void ub_kv_vis_free(int32_t *block) { free(block); }

static int cmp_i64(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

#define MAX_RUNS 64

/* keys int64[m] (caller-owned, each (pos << 32) | cell, distinct): ascending in place. tmp: int64[m]
 * scratch (caller-owned). A sequence written token after token is one ascending run (one pass); a cache
 * whose head wrapped leaves a few runs, merged pairwise (O(m log runs)); more than MAX_RUNS: qsort. */
static void sort_keys(int64_t *keys, int64_t m, int64_t *tmp) {
    int64_t b[MAX_RUNS + 1];
    int32_t r = 0;
    b[0] = 0;
    for (int64_t q = 1; q < m; q++)
        if (keys[q - 1] > keys[q]) {
            if (++r == MAX_RUNS) {
                qsort(keys, (size_t)m, sizeof(int64_t), cmp_i64);
                return;
            }
            b[r] = q;
        }
    if (r == 0) return;
    b[++r] = m;                               /* r runs: [b[k], b[k+1]) */
    int64_t *src = keys, *dst = tmp;
    while (r > 1) {
        int32_t w = 0;
        for (int32_t k = 0; k < r; k += 2) {
            const int64_t lo = b[k];
            if (k + 1 == r) {                 /* an odd run out: copied as it is */
                memcpy(dst + lo, src + lo, sizeof(int64_t) * (size_t)(b[k + 1] - lo));
            } else {
                const int64_t mid = b[k + 1], hi = b[k + 2];
                int64_t i = lo, j = mid, o = lo;
                while (i < mid && j < hi) dst[o++] = src[i] < src[j] ? src[i++] : src[j++];
                while (i < mid) dst[o++] = src[i++];
                while (j < hi) dst[o++] = src[j++];
            }
            b[w++] = lo;
        }
        b[w] = m;
        r = w;
        int64_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != keys) memcpy(keys, src, sizeof(int64_t) * (size_t)m);
}

/* First index q in keys[lo, hi) (ascending) with position (key >> 32) >= p, else hi. p is 64-bit: window
 * bounds may leave the int32 range. */
static int64_t lower_pos(const int64_t *keys, int64_t lo, int64_t hi, int64_t p) {
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if ((keys[mid] >> 32) < p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The interval [*a, *b] of cell positions p0 that row position p1 may see (INT64 bounds = open): the
 * causal bound and the window of swa_type / n_swa, exactly the complement of kv_masked_swa. */
static void visible_interval(int32_t swa_type, int32_t n_swa, int32_t causal, int64_t p1, int64_t *a, int64_t *b) {
    int64_t lo = INT64_MIN, hi = causal ? p1 : INT64_MAX;
    switch (swa_type) {
    case UB_SWA_STANDARD: lo = p1 - n_swa + 1; break;                     /* masked iff p1 - p0 >= n_swa */
    case UB_SWA_CHUNKED: lo = (p1 / n_swa) * n_swa; break;                /* masked iff p0 < (p1 / n) * n */
    case UB_SWA_SYMMETRIC: {                                              /* masked iff |p1 - p0| > n/2 */
        const int64_t half = n_swa / 2;
        lo = p1 - half;
        if (p1 + half < hi) hi = p1 + half;
        break;
    }
    default: break;
    }
    *a = lo;
    *b = hi;
}

/* Lists, for stream `base`'s cells [0, n_kv), the cells of every seq in need[4] (a 256-bit set) as keys
 * (pos << 32) | cell, sorted per seq: seq s's run is (*keys)[run[2s] .. run[2s+1]) (run int64[2*UB_MAX_SEQ],
 * caller-owned; written for the seqs of need only). *keys, *tmp (the sort's scratch) / *cap: growable
 * buffers of *cap entries owned by the caller (realloc'd here). Cost O(n_kv + sort), not O(256). */
static int group_lists(ub_kv *kv, int64_t base, int32_t n_kv, const uint64_t *need, int64_t *run, int64_t **keys,
                       int64_t **tmp, int64_t *cap) {
    const int32_t *cpos = kv->pos + base;
    const uint64_t *cseq = kv->seq + base * UB_SEQ_WORDS;
    int32_t ids[UB_MAX_SEQ], n_ids = 0;
    for (int w = 0; w < UB_SEQ_WORDS; w++)
        for (uint64_t bits = need[w]; bits; bits &= bits - 1) ids[n_ids++] = w * 64 + __builtin_ctzll(bits);
    int64_t cnt[UB_MAX_SEQ];
    for (int32_t q = 0; q < n_ids; q++) cnt[ids[q]] = 0;
    int64_t total = 0;
    for (int32_t j = 0; j < n_kv; j++) {
        if (cpos[j] < 0) continue;
        for (int w = 0; w < UB_SEQ_WORDS; w++) {
            uint64_t bits = cseq[(int64_t)j * UB_SEQ_WORDS + w] & need[w];
            while (bits) {
                cnt[w * 64 + __builtin_ctzll(bits)]++;
                bits &= bits - 1;
                total++;
            }
        }
    }
    if (total > *cap) {
        int64_t *p = realloc(*keys, (size_t)total * sizeof(int64_t));
        if (!p) return kv_fail(kv, UB_E_NOMEM, "out of memory (visible cells)");
        *keys = p;
        p = realloc(*tmp, (size_t)total * sizeof(int64_t));
        if (!p) return kv_fail(kv, UB_E_NOMEM, "out of memory (visible cells)");
        *tmp = p;
        *cap = total;
    }
    int64_t at = 0;
    for (int32_t q = 0; q < n_ids; q++) {
        const int32_t s = ids[q];
        run[2 * s] = run[2 * s + 1] = at;     /* run[2s+1] is the fill cursor, then the end */
        at += cnt[s];
    }
    int64_t *k = *keys;
    for (int32_t j = 0; j < n_kv; j++) {
        if (cpos[j] < 0) continue;
        const int64_t key = ((int64_t)cpos[j] << 32) | (int64_t)j;
        for (int w = 0; w < UB_SEQ_WORDS; w++) {
            uint64_t bits = cseq[(int64_t)j * UB_SEQ_WORDS + w] & need[w];
            while (bits) {
                k[run[2 * (w * 64 + __builtin_ctzll(bits)) + 1]++] = key;
                bits &= bits - 1;
            }
        }
    }
    for (int32_t q = 0; q < n_ids; q++) {
        const int64_t lo = run[2 * ids[q]], m = run[2 * ids[q] + 1] - lo;
        if (m > 1) sort_keys(k + lo, m, *tmp + lo);
    }
    return UB_OK;
}

/* 1 when cell j at the row's own position is hidden by the 2-D M-RoPE tie rule (cell.y > y1, or equal y
 * and cell.x > x1). cext int32[size*2] of the row's stream, (x, y) pairs. */
static inline int tie_hidden(const int32_t *cext, int32_t j, int32_t y1, int32_t x1) {
    const int32_t cx = cext[2 * j], cy = cext[2 * j + 1];
    return cy > y1 || (cy == y1 && cx > x1);
}

/* Plan slot i of ub (placed by ub_kv_apply): its rows' visible cells among cells [0, n_kv) of their
 * streams, in the current state. swa_type / n_swa: the window to apply (swa_type < 0: this cache's own;
 * the two-cache memory passes its window for the full cache when the sliding layers run on it).
 * On UB_OK *out is one malloc'd int32 block owned by the caller (free with ub_kv_vis_free):
 *   [0, n)            row_stream: stream of row r (n = ub->n_tokens)
 *   [n, 2n + 1)       off: row r sees cells[off[r] .. off[r+1])
 *   [2n + 1, + total) cells, total = off[n] = *n_cells
 * On failure *out is NULL, the message is set and nothing else changes (the cache is only read). */
int ub_kv_visible(ub_kv *kv, int32_t i, const ub_ubatch *ub, int32_t causal, int32_t n_kv, int32_t swa_type,
                  int32_t n_swa, int32_t **out, int64_t *n_cells) {
    if (!out || !n_cells) return kv_fail(kv, UB_E_ARG, "visible: NULL output");
    *out = NULL;
    *n_cells = 0;
    if (i < 0 || i >= kv->plan_n) return kv_fail(kv, UB_E_ORDER, "visible: no planned slot %d", i);
    if (n_kv < 1 || n_kv > kv->size) return kv_fail(kv, UB_E_ARG, "visible: n_kv %d outside 1..%d", n_kv, kv->size);
    if (swa_type < 0) {
        swa_type = kv->swa_type;
        n_swa = kv->n_swa;
    } else if (swa_type > UB_SWA_SYMMETRIC || (swa_type != UB_SWA_NONE && n_swa < 1)) {
        return kv_fail(kv, UB_E_ARG, "visible: bad window (swa_type %d, n_swa %d)", swa_type, n_swa);
    }
    const int32_t ns = kv->plan_ns[i], per = kv->plan_per[i];
    if (!ub || ub->n_tokens != ns * per)
        return kv_fail(kv, UB_E_ARG, "visible: ubatch does not match planned slot %d", i);
    const int32_t *strm = kv->plan_data + kv->plan_off[i];
    const int32_t n = ub->n_tokens;
    const int is_2d = ub->n_pos >= 3;
    for (int32_t row = 0; row < n; row++) {
        if (ub->seq_off[row + 1] <= ub->seq_off[row])
            return kv_fail(kv, UB_E_ARG, "visible: ubatch row %d has no seq id", row);
        const int32_t s = ub->seq_id[ub->seq_off[row]];
        if (s < 0 || s >= UB_MAX_SEQ) return kv_fail(kv, UB_E_ARG, "visible: bad seq id %d in row %d", s, row);
    }

    int64_t *keys = NULL, *ktmp = NULL, kcap = 0;
    int64_t run[2 * UB_MAX_SEQ];                                 /* per seq: its run in keys */
    int64_t *rng = malloc(sizeof(int64_t) * 2 * (size_t)n);      /* per row: [lo, hi) in its seq's run */
    int64_t ocap = 2 * (int64_t)n + 1 + n_kv;                     /* grows per group */
    int32_t *blk = malloc(sizeof(int32_t) * (size_t)ocap);
    int rc = UB_OK;
    int64_t t = 0;                                                /* cells written so far */
    if (!rng || !blk) {
        rc = kv_fail(kv, UB_E_NOMEM, "out of memory (visible cells)");
        goto done;
    }
    blk[n] = 0;
    for (int32_t k = 0; k < ns && rc == UB_OK; k++) {
        const int64_t base = (int64_t)strm[k] * kv->size;
        const int32_t *cext = kv->ext + 2 * base;
        uint64_t need[UB_SEQ_WORDS] = {0};
        for (int32_t r = 0; r < per; r++) {
            const int32_t s = ub->seq_id[ub->seq_off[k * per + r]];
            need[s >> 6] |= (uint64_t)1 << (s & 63);
        }
        rc = group_lists(kv, base, n_kv, need, run, &keys, &ktmp, &kcap);
        if (rc) break;
        /* count: each row's run [lo, hi) minus the cells the tie rule hides */
        int64_t add = 0;
        for (int32_t r = 0; r < per; r++) {
            const int32_t row = k * per + r;
            const int32_t s = ub->seq_id[ub->seq_off[row]];
            const int32_t p1 = ub->pos[row];
            int64_t a, b;
            visible_interval(swa_type, n_swa, causal, p1, &a, &b);
            const int64_t r0 = run[2 * s], r1 = run[2 * s + 1];
            int64_t lo = r1, hi = r1;
            if (a <= b) {
                lo = lower_pos(keys, r0, r1, a);
                hi = b == INT64_MAX ? r1 : lower_pos(keys, lo, r1, b + 1);
            }
            rng[2 * row] = lo;
            rng[2 * row + 1] = hi;
            int64_t c = hi - lo;
            if (causal && is_2d) {
                const int32_t y1 = ub->pos[row + n], x1 = ub->pos[row + 2 * n];
                for (int64_t q = hi - 1; q >= lo && (keys[q] >> 32) == p1; q--)
                    c -= tie_hidden(cext, (int32_t)(keys[q] & 0xffffffff), y1, x1);
            }
            add += c;
        }
        if (t + add > INT32_MAX) {
            rc = kv_fail(kv, UB_E_ARG, "visible: more than %d visible cells", INT32_MAX);
            break;
        }
        if (2 * (int64_t)n + 1 + t + add > ocap) {
            ocap = 2 * (int64_t)n + 1 + t + add;
            int32_t *p = realloc(blk, sizeof(int32_t) * (size_t)ocap);
            if (!p) {
                rc = kv_fail(kv, UB_E_NOMEM, "out of memory (visible cells)");
                break;
            }
            blk = p;
        }
        /* fill */
        int32_t *cells = blk + 2 * n + 1;
        for (int32_t r = 0; r < per; r++) {
            const int32_t row = k * per + r;
            const int64_t lo = rng[2 * row], hi = rng[2 * row + 1];
            const int32_t p1 = ub->pos[row];
            const int tie = causal && is_2d;
            const int32_t y1 = tie ? ub->pos[row + n] : 0, x1 = tie ? ub->pos[row + 2 * n] : 0;
            for (int64_t q = lo; q < hi; q++) {
                const int32_t j = (int32_t)(keys[q] & 0xffffffff);
                if (tie && (keys[q] >> 32) == p1 && tie_hidden(cext, j, y1, x1)) continue;
                cells[t++] = j;
            }
            blk[row] = strm[k];
            blk[n + row + 1] = (int32_t)t;
        }
    }
done:
    free(keys);
    free(ktmp);
    free(rng);
    if (rc != UB_OK) {
        free(blk);
        return rc;
    }
    *out = blk;
    *n_cells = t;
    return UB_OK;
}
