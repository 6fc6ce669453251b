/* Binary min-heap of merge candidates (SPM: key = -score; BPE: key = rank), ties to the smaller left index
 * (llama.cpp's llm_bigram_spm / llm_bigram_bpe comparators). */
#include "tok_internal.h"

static int cand_less(const tok_cand *x, const tok_cand *y) {
    return x->key < y->key || (x->key == y->key && x->left < y->left);
}

/* Push c; h->a grows (owned by the caller's heap, freed with free(h->a)). 0, or -1 when out of memory. */
int tok_heap_push(tok_heap *h, tok_cand c) {
    if (h->n == h->cap) {
        int64_t nc = h->cap ? h->cap * 2 : 64;
        tok_cand *na = (tok_cand *)realloc(h->a, (size_t)nc * sizeof(tok_cand));
        if (!na) return -1;
        h->a = na; h->cap = nc;
    }
    int64_t i = h->n++;
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!cand_less(&c, &h->a[p])) break;
        h->a[i] = h->a[p];
        i = p;
    }
    h->a[i] = c;
    return 0;
}

/* Pop the smallest candidate; h->n must be > 0. */
tok_cand tok_heap_pop(tok_heap *h) {
    tok_cand top = h->a[0];
    tok_cand last = h->a[--h->n];
    int64_t i = 0, n = h->n;
    for (;;) {
        int64_t l = 2 * i + 1;
        if (l >= n) break;
        int64_t m = (l + 1 < n && cand_less(&h->a[l + 1], &h->a[l])) ? l + 1 : l;
        if (!cand_less(&h->a[m], &last)) break;
        h->a[i] = h->a[m];
        i = m;
    }
    if (n > 0) h->a[i] = last;
    return top;
}
