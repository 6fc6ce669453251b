/* Per-sequence position maps: counted treaps in one index-linked node pool (see kv_posmap.h). */
#include <stdlib.h>

#include "kv_posmap.h"

/* A node's heap priority: a fixed mix of its index (deterministic, no per-node storage). */
static inline uint32_t prio(int32_t i) {
    uint32_t x = (uint32_t)i * 0x9E3779B1u;
    x ^= x >> 16; x *= 0x85EBCA6Bu; x ^= x >> 13; x *= 0xC2B2AE35u; x ^= x >> 16;
    return x;
}

void kv_pool_free(kv_pool *p) {
    free(p->nodes);
    p->nodes = NULL;
    p->cap = p->live = 0;
    p->free_head = -1;
}

/* Grows nodes[] (doubling) so that live + n_more nodes fit. The pool's indices stay valid. */
int kv_pool_reserve(kv_pool *p, int64_t n_more) {
    int64_t need = (int64_t)p->live + n_more;
    if (need <= p->cap) return 0;
    if (need > INT32_MAX) return -1;
    int64_t cap = p->cap ? p->cap : 256;
    while (cap < need) cap *= 2;
    if (cap > INT32_MAX) cap = INT32_MAX;
    kv_pnode *n = realloc(p->nodes, (size_t)cap * sizeof *n);
    if (!n) return -1;
    /* the new nodes [old cap, cap) join the free list in ascending order */
    for (int64_t i = cap - 1; i >= p->cap; i--) {
        n[i].l = p->free_head;
        p->free_head = (int32_t)i;
    }
    p->nodes = n;
    p->cap = (int32_t)cap;
    return 0;
}

void kv_pool_reset(kv_pool *p, kv_seqstat *stats, int32_t n_stats) {
    p->live = 0;
    p->free_head = -1;
    for (int64_t i = (int64_t)p->cap - 1; i >= 0; i--) {
        p->nodes[i].l = p->free_head;
        p->free_head = (int32_t)i;
    }
    for (int32_t s = 0; s < n_stats; s++) {
        stats[s].n = 0;
        stats[s].min = stats[s].max = -1;
        stats[s].root = -1;
    }
}

static int32_t node_new(kv_pool *p, int32_t key) {
    int32_t i = p->free_head;          /* reserved by the caller: never -1 here */
    p->free_head = p->nodes[i].l;
    p->live++;
    kv_pnode *n = &p->nodes[i];
    n->key = key; n->cnt = 1; n->l = n->r = -1;
    return i;
}

static void node_free(kv_pool *p, int32_t i) {
    p->nodes[i].l = p->free_head;
    p->free_head = i;
    p->live--;
}

/* Inserts key into the treap rooted at t; returns the new root. */
static int32_t insert(kv_pool *p, int32_t t, int32_t key) {
    if (t < 0) return node_new(p, key);
    kv_pnode *N = p->nodes;
    if (key == N[t].key) { N[t].cnt++; return t; }
    if (key < N[t].key) {
        int32_t c = insert(p, N[t].l, key);
        N = p->nodes;
        N[t].l = c;
        if (prio(c) > prio(t)) { N[t].l = N[c].r; N[c].r = t; return c; }   /* rotate right */
    } else {
        int32_t c = insert(p, N[t].r, key);
        N = p->nodes;
        N[t].r = c;
        if (prio(c) > prio(t)) { N[t].r = N[c].l; N[c].l = t; return c; }   /* rotate left */
    }
    return t;
}

/* Joins two treaps whose keys are all smaller in a than in b. */
static int32_t merge(kv_pool *p, int32_t a, int32_t b) {
    if (a < 0) return b;
    if (b < 0) return a;
    kv_pnode *N = p->nodes;
    if (prio(a) > prio(b)) { N[a].r = merge(p, N[a].r, b); return a; }
    N[b].l = merge(p, a, N[b].l);
    return b;
}

/* Removes one count of key from the treap rooted at t; *gone = 1 when its node was freed. */
static int32_t erase(kv_pool *p, int32_t t, int32_t key, int *gone) {
    if (t < 0) return t;
    kv_pnode *N = p->nodes;
    if (key < N[t].key) { N[t].l = erase(p, N[t].l, key, gone); return t; }
    if (key > N[t].key) { N[t].r = erase(p, N[t].r, key, gone); return t; }
    if (--N[t].cnt > 0) return t;
    int32_t m = merge(p, N[t].l, N[t].r);
    node_free(p, t);
    *gone = 1;
    return m;
}

void kv_pm_add(kv_pool *p, kv_seqstat *t, int32_t pos) {
    t->root = insert(p, t->root, pos);
    if (t->n++ == 0) { t->min = t->max = pos; return; }
    if (pos < t->min) t->min = pos;
    if (pos > t->max) t->max = pos;
}

void kv_pm_remove(kv_pool *p, kv_seqstat *t, int32_t pos) {
    int gone = 0;
    if (t->n == 0) return;
    t->root = erase(p, t->root, pos, &gone);
    if (!gone && t->n > 0) { t->n--; return; }
    if (--t->n == 0 || t->root < 0) { t->n = 0; t->min = t->max = -1; t->root = -1; return; }
    const kv_pnode *N = p->nodes;
    if (pos == t->min) { int32_t i = t->root; while (N[i].l >= 0) i = N[i].l; t->min = N[i].key; }
    if (pos == t->max) { int32_t i = t->root; while (N[i].r >= 0) i = N[i].r; t->max = N[i].key; }
}

int32_t kv_pm_ge(const kv_pool *p, const kv_seqstat *t, int32_t pos) {
    int32_t best = -1;
    for (int32_t i = t->root; i >= 0;) {
        if (p->nodes[i].key >= pos) { best = p->nodes[i].key; i = p->nodes[i].l; }
        else i = p->nodes[i].r;
    }
    return best;
}

int32_t kv_pm_lt(const kv_pool *p, const kv_seqstat *t, int32_t pos) {
    int32_t best = -1;
    for (int32_t i = t->root; i >= 0;) {
        if (p->nodes[i].key < pos) { best = p->nodes[i].key; i = p->nodes[i].r; }
        else i = p->nodes[i].l;
    }
    return best;
}

int kv_pm_has(const kv_pool *p, const kv_seqstat *t, int32_t pos) {
    for (int32_t i = t->root; i >= 0;) {
        if (p->nodes[i].key == pos) return 1;
        i = pos < p->nodes[i].key ? p->nodes[i].l : p->nodes[i].r;
    }
    return 0;
}

/* In-order walk of the subtree at i restricted to [lo, hi); stops at the first key b lacks. */
static int32_t first_missing(const kv_pool *pa, int32_t i, const kv_pool *pb, const kv_seqstat *b, int32_t lo,
                             int32_t hi) {
    if (i < 0) return -1;
    const kv_pnode *n = &pa->nodes[i];
    if (n->key >= lo) {
        int32_t r = first_missing(pa, n->l, pb, b, lo, hi);
        if (r >= 0) return r;
        if (n->key < hi && !kv_pm_has(pb, b, n->key)) return n->key;
    }
    if (n->key < hi - 1) return first_missing(pa, n->r, pb, b, lo, hi);
    return -1;
}

int32_t kv_pm_first_missing(const kv_pool *pa, const kv_seqstat *a, const kv_pool *pb, const kv_seqstat *b,
                            int32_t lo, int32_t hi) {
    if (lo >= hi) return -1;
    return first_missing(pa, a->root, pb, b, lo, hi);
}
