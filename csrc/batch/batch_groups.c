/* Batch allocator: per-row seq-id sets normalised (sort + dedup) and rows grouped by their exact set
 * (llama.cpp's seq_set_map), both used by init. */
#include <stdlib.h>
#include <string.h>

#include "alloc_state.h"

static int cmp_i32(const void *x, const void *y) {
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

/* Sorts ids[0..n) ascending in place and drops duplicates; returns the new length. */
int32_t ub_sort_unique(int32_t *ids, int32_t n) {
    if (n > 16) {
        qsort(ids, (size_t)n, sizeof(int32_t), cmp_i32);
    } else {
        for (int32_t i = 1; i < n; i++) {
            int32_t v = ids[i], j = i - 1;
            while (j >= 0 && ids[j] > v) { ids[j + 1] = ids[j]; j--; }
            ids[j + 1] = v;
        }
    }
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++)
        if (m == 0 || ids[m - 1] != ids[i]) ids[m++] = ids[i];
    return m;
}

static uint64_t hash_set(const uint64_t *s) {
    uint64_t h = 1469598103934665603ull;
    for (int w = 0; w < UB_SEQ_WORDS; w++) { h ^= s[w]; h *= 1099511628211ull; h ^= h >> 29; }
    return h;
}

/* Groups rows by their exact seq set (llama.cpp's seq_set_map). Single-id rows use a direct table,
 * multi-id rows an open-addressing hash of the 256-bit set. Fills tok_group, grp_off, grp_tok.
 * Work space: scratch int32[8 * n] = rep[n] | count[n+1] | hash table[<= 4n]. */
void ub_build_groups(ub_norm *nb) {
    int32_t n = nb->n_tokens;
    int32_t single[UB_MAX_SEQ];
    for (int s = 0; s < UB_MAX_SEQ; s++) single[s] = -1;
    int32_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    int32_t *rep = nb->scratch;                  /* group -> a representative row */
    int32_t *count = nb->scratch + n;            /* count[g + 1] = rows of group g */
    int32_t *table = nb->scratch + 2 * (size_t)n + 1;   /* slot -> group, -1 empty; filled lazily */
    int table_ready = 0;
    int32_t ng = 0, last_s = -1, last_g = -1;
    for (int32_t i = 0; i < n; i++) {
        int32_t g;
        if (nb->seq_off[i + 1] - nb->seq_off[i] == 1) {
            int32_t s = nb->seq_id[nb->seq_off[i]];
            if (s == last_s) {          /* same single seq as the previous row */
                nb->tok_group[i] = last_g;
                continue;
            }
            if (single[s] < 0) { single[s] = ng; rep[ng++] = i; }
            g = single[s];
            last_s = s;
            last_g = g;
        } else {
            if (!table_ready) {
                for (int32_t k = 0; k < cap; k++) table[k] = -1;
                table_ready = 1;
            }
            const uint64_t *set = nb->seq_set + (size_t)i * UB_SEQ_WORDS;
            uint64_t slot = hash_set(set) & (uint64_t)(cap - 1);
            for (;;) {
                int32_t gg = table[slot];
                if (gg < 0) { table[slot] = ng; rep[ng] = i; g = ng++; break; }
                if (ub_set_equal(nb->seq_set + (size_t)rep[gg] * UB_SEQ_WORDS, set)) { g = gg; break; }
                slot = (slot + 1) & (uint64_t)(cap - 1);
            }
        }
        nb->tok_group[i] = g;
    }
    nb->n_groups = ng;
    const int32_t *restrict tg = nb->tok_group;
    int32_t *restrict goff = nb->grp_off, *restrict gtok = nb->grp_tok, *restrict cnt = count;
    memset(cnt, 0, sizeof(int32_t) * ((size_t)ng + 1));
    for (int32_t i = 0; i < n; i++) cnt[tg[i] + 1]++;
    goff[0] = 0;
    for (int32_t g = 0; g < ng; g++) goff[g + 1] = goff[g] + cnt[g + 1];
    for (int32_t g = 0; g < ng; g++) cnt[g] = goff[g];
    /* scatter rows; a run of rows of one group keeps its cursor in a register */
    int32_t pg = -1, c = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t g = tg[i];
        if (g != pg) {
            if (pg >= 0) cnt[pg] = c;
            c = cnt[g];
            pg = g;
        }
        gtok[c++] = i;
    }
}

