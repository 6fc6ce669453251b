/* Per-sequence position maps: dense runs, or counted treaps in one index-linked node pool (kv_posmap.h). */
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
    p->cap = p->live = p->high = 0;
    p->free_head = -1;
}

/* Grows nodes[] (doubling) so that live + n_more nodes fit; new nodes are not touched until used. */
int kv_pool_reserve(kv_pool *p, int64_t n_more) {
    int64_t need = (int64_t)p->live + n_more;
    if (need <= p->cap) return 0;
    if (need > INT32_MAX) return -1;
    int64_t cap = p->cap ? p->cap : 256;
    while (cap < need) cap *= 2;
    if (cap > INT32_MAX) cap = INT32_MAX;
    kv_pnode *n = realloc(p->nodes, (size_t)cap * sizeof *n);
    if (!n) return -1;
    p->nodes = n;
    p->cap = (int32_t)cap;
    return 0;
}

void kv_pool_reset(kv_pool *p, kv_seqstat *stats, int32_t n_stats) {
    p->live = 0;
    p->high = 0;
    p->free_head = -1;
    for (int32_t s = 0; s < n_stats; s++) {
        kv_seqstat *t = &stats[s];
        t->n = t->nd = 0;
        t->min = t->max = t->root = -1;
        t->dense = 1;
    }
}

static int32_t node_new(kv_pool *p, int32_t key) {
    int32_t i = p->free_head;          /* room reserved by the caller: a free or a never-used node */
    if (i >= 0) p->free_head = p->nodes[i].l;
    else i = p->high++;
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

/* Inserts key into the treap rooted at t; returns the new root; *created = 1 for a new node. */
static int32_t insert(kv_pool *p, int32_t t, int32_t key, int *created) {
    if (t < 0) { *created = 1; return node_new(p, key); }
    kv_pnode *N = p->nodes;
    if (key == N[t].key) { N[t].cnt++; return t; }
    if (key < N[t].key) {
        int32_t c = insert(p, N[t].l, key, created);
        N[t].l = c;
        if (prio(c) > prio(t)) { N[t].l = N[c].r; N[c].r = t; return c; }   /* rotate right */
    } else {
        int32_t c = insert(p, N[t].r, key, created);
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

/* dense {min..max} -> a treap of the same keys (n nodes; room reserved by the caller). */
static void materialize(kv_pool *p, kv_seqstat *t) {
    t->dense = 0;
    t->root = -1;
    t->nd = 0;
    if (t->n == 0) return;
    for (int64_t k = t->min; k <= t->max; k++) {
        int created = 0;
        t->root = insert(p, t->root, (int32_t)k, &created);
        t->nd += created;
    }
}

static void free_tree(kv_pool *p, int32_t i) {
    if (i < 0) return;
    free_tree(p, p->nodes[i].l);
    free_tree(p, p->nodes[i].r);
    node_free(p, i);
}

void kv_pm_densify(kv_pool *p, kv_seqstat *t) {
    if (t->dense) return;
    if (t->n == 0 || (t->n == t->nd && (int64_t)t->max - t->min + 1 == t->n)) {
        free_tree(p, t->root);
        t->root = -1;
        t->nd = 0;
        t->dense = 1;
        if (t->n == 0) t->min = t->max = -1;
    }
}

void kv_pm_add(kv_pool *p, kv_seqstat *t, int32_t pos) {
    if (t->dense) {
        if (t->n == 0) { t->n = 1; t->min = t->max = pos; return; }
        if ((int64_t)pos == (int64_t)t->max + 1) { t->max = pos; t->n++; return; }
        if ((int64_t)pos == (int64_t)t->min - 1) { t->min = pos; t->n++; return; }
        materialize(p, t);
    }
    int created = 0;
    t->root = insert(p, t->root, pos, &created);
    t->nd += created;
    if (t->n++ == 0) { t->min = t->max = pos; return; }
    if (pos < t->min) t->min = pos;
    if (pos > t->max) t->max = pos;
}

void kv_pm_remove(kv_pool *p, kv_seqstat *t, int32_t pos) {
    if (t->n == 0) return;
    if (t->dense) {
        if (t->n == 1) { t->n = 0; t->min = t->max = -1; return; }
        if (pos == t->max) { t->max--; t->n--; return; }
        if (pos == t->min) { t->min++; t->n--; return; }
        materialize(p, t);
    }
    int gone = 0;
    t->root = erase(p, t->root, pos, &gone);
    t->n--;
    if (!gone) return;
    t->nd--;
    if (t->n == 0 || t->root < 0) { t->n = 0; t->min = t->max = -1; t->root = -1; return; }
    const kv_pnode *N = p->nodes;
    if (pos == t->min) { int32_t i = t->root; while (N[i].l >= 0) i = N[i].l; t->min = N[i].key; }
    if (pos == t->max) { int32_t i = t->root; while (N[i].r >= 0) i = N[i].r; t->max = N[i].key; }
}

int32_t kv_pm_ge(const kv_pool *p, const kv_seqstat *t, int32_t pos) {
    if (t->dense) return t->n == 0 || pos > t->max ? -1 : (pos < t->min ? t->min : pos);
    int32_t best = -1;
    for (int32_t i = t->root; i >= 0;) {
        if (p->nodes[i].key >= pos) { best = p->nodes[i].key; i = p->nodes[i].l; }
        else i = p->nodes[i].r;
    }
    return best;
}

int32_t kv_pm_lt(const kv_pool *p, const kv_seqstat *t, int32_t pos) {
    if (t->dense) return t->n == 0 || pos <= t->min ? -1 : (pos > t->max ? t->max : pos - 1);
    int32_t best = -1;
    for (int32_t i = t->root; i >= 0;) {
        if (p->nodes[i].key < pos) { best = p->nodes[i].key; i = p->nodes[i].r; }
        else i = p->nodes[i].l;
    }
    return best;
}

int kv_pm_has(const kv_pool *p, const kv_seqstat *t, int32_t pos) {
    if (t->dense) return t->n > 0 && pos >= t->min && pos <= t->max;
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
    if (lo >= hi || a->n == 0) return -1;
    if (!a->dense) return first_missing(pa, a->root, pb, b, lo, hi);
    int64_t k0 = lo > a->min ? lo : a->min, k1 = (int64_t)hi - 1 < a->max ? (int64_t)hi - 1 : a->max;
    if (b->dense) {                      /* two runs: the first of [k0, k1] outside b's run */
        if (k0 > k1) return -1;
        if (b->n == 0 || k0 < b->min) return (int32_t)k0;
        if (k0 > b->max) return (int32_t)k0;
        return b->max < k1 ? b->max + 1 : -1;
    }
    for (int64_t k = k0; k <= k1; k++)
        if (!kv_pm_has(pb, b, (int32_t)k)) return (int32_t)k;
    return -1;
}
