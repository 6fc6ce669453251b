/* Prompt-lookup drafting (see ub_ngram.h): a linear scan per n-gram size, no allocation. */
#include "ub_ngram.h"

/* tok int32[n] borrowed: 1 when tok[i .. i+g) equals tok[n-g .. n). */
static int window_matches(const int32_t *tok, int64_t n, int64_t i, int64_t g) {
    const int32_t *a = tok + i, *b = tok + n - g;
    for (int64_t k = 0; k < g; k++)
        if (a[k] != b[k]) return 0;
    return 1;
}

/* tok int32[n] borrowed, start int64[1] and ngram int32[1] (optional) caller-owned (see the header). */
int64_t ub_ngram_lookup(const int32_t *tok, int64_t n, int32_t max_ngram, int32_t num_pred, int32_t latest,
                        int64_t *start, int32_t *ngram) {
    if (n < 0 || !start || (n > 0 && !tok)) return -1;
    *start = n;
    if (ngram) *ngram = 0;
    if (max_ngram < 1 || num_pred < 1 || n < 2) return 0;
    int64_t gmax = (int64_t)max_ngram < n - 1 ? (int64_t)max_ngram : n - 1;
    for (int64_t g = gmax; g >= 1; g--) {
        /* a window at i has a non-empty continuation iff i + g < n */
        int64_t last = n - g - 1;
        for (int64_t j = 0; j <= last; j++) {
            int64_t i = latest ? last - j : j;
            if (tok[i] != tok[n - g] || !window_matches(tok, n, i, g)) continue;
            int64_t s = i + g, e = s + (int64_t)num_pred;
            if (e > n) e = n;
            *start = s;
            if (ngram) *ngram = (int32_t)g;
            return e - s;
        }
    }
    return 0;
}
