/* Grammar stacks as interned cons cells and stack sets as interned sorted arrays (see ub_grammar.h).
 * llama_grammar_advance_stack becomes `advance` (rule references expanded until every stack has a terminal on
 * top or is empty), llama_grammar_accept over all stacks becomes gram_trans (cached per set and code point).
 * Limits (GRAM_MAX_STACKS, GRAM_MAX_SET_WORDS) turn a runaway grammar into an error instead of exhausting the
 * memory. The caller holds g->mu. */
#include "gram_internal.h"

#include <stdlib.h>
#include <string.h>

#define GRAM_MAX_STACKS (1 << 24)
#define GRAM_MAX_SET_WORDS ((int64_t)1 << 27)
#define GRAM_MAX_ADVANCE (1 << 22)

static int is_eos(const gelem *e) { return e->type == UB_GRE_END || e->type == UB_GRE_ALT; }
static int is_char_top(uint32_t t) { return t == UB_GRE_CHAR || t == UB_GRE_CHAR_NOT || t == UB_GRE_CHAR_ANY; }
static int is_tok_top(uint32_t t) { return t == UB_GRE_TOKEN || t == UB_GRE_TOKEN_NOT; }

static uint64_t mix(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return x;
}

static int grow(void **p, int64_t *cap, int64_t need, size_t sz) {
    if (need <= *cap) return 0;
    int64_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *np = realloc(*p, (size_t)nc * sz);
    if (!np) return -1;
    *p = np; *cap = nc;
    return 0;
}

/* ---- stacks ---- */
static int st_rehash(ub_grammar *g, int64_t nc) {
    int64_t *h = malloc((size_t)nc * sizeof(int64_t));
    if (!h) return -1;
    for (int64_t i = 0; i < nc; i++) h[i] = -1;
    for (int64_t k = 1; k < g->n_st; k++) {
        uint64_t x = mix(((uint64_t)g->st_elem[k] << 32) ^ (uint32_t)g->st_parent[k]) & (uint64_t)(nc - 1);
        while (h[x] >= 0) x = (x + 1) & (uint64_t)(nc - 1);
        h[x] = k;
    }
    free(g->st_hash); g->st_hash = h; g->st_hcap = nc;
    return 0;
}

/* The stack `parent` with element e pushed; -1 on a limit / out of memory. */
static int32_t st_push(ub_grammar *g, int32_t parent, uint32_t e) {
    uint64_t m = (uint64_t)g->st_hcap - 1;
    uint64_t x = mix(((uint64_t)e << 32) ^ (uint32_t)parent) & m;
    for (;;) {
        int64_t k = g->st_hash[x];
        if (k < 0) break;
        if (g->st_elem[k] == e && g->st_parent[k] == parent) return (int32_t)k;
        x = (x + 1) & m;
    }
    if (g->n_st >= GRAM_MAX_STACKS) { g->failed = 1; return -1; }
    if (g->n_st == g->cap_st) {
        int64_t nc = 2 * g->cap_st;
        uint32_t *ne = realloc(g->st_elem, (size_t)nc * sizeof(uint32_t));
        if (!ne) { g->failed = 1; return -1; }
        g->st_elem = ne;
        int32_t *np = realloc(g->st_parent, (size_t)nc * sizeof(int32_t));
        if (!np) { g->failed = 1; return -1; }
        g->st_parent = np; g->cap_st = nc;
    }
    int64_t k = g->n_st++;
    g->st_elem[k] = e; g->st_parent[k] = parent;
    g->st_hash[x] = k;
    if (2 * g->n_st > g->st_hcap && st_rehash(g, 2 * g->st_hcap)) { g->failed = 1; return -1; }
    return (int32_t)k;
}

/* ---- sets ---- */
static uint64_t set_hash_of(const int32_t *a, int32_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    for (int32_t i = 0; i < n; i++) h = mix(h ^ (uint32_t)a[i]);
    return h;
}

static int set_rehash(ub_grammar *g, int64_t nc) {
    int64_t *h = malloc((size_t)nc * sizeof(int64_t));
    if (!h) return -1;
    for (int64_t i = 0; i < nc; i++) h[i] = -1;
    for (int64_t k = 0; k < g->n_sets; k++) {
        uint64_t x = set_hash_of(g->set_pool + g->sets[k].off, g->sets[k].n) & (uint64_t)(nc - 1);
        while (h[x] >= 0) x = (x + 1) & (uint64_t)(nc - 1);
        h[x] = k;
    }
    free(g->set_hash); g->set_hash = h; g->set_hcap = nc;
    return 0;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Interns the stacks a[n] (any order, duplicates allowed; a is reordered). Returns the set id or -1. */
static int32_t set_intern(ub_grammar *g, int32_t *a, int64_t n) {
    if (n > 1) qsort(a, (size_t)n, sizeof(int32_t), cmp_i32);
    int64_t w = 0;
    for (int64_t i = 0; i < n; i++) if (w == 0 || a[w - 1] != a[i]) a[w++] = a[i];
    n = w;
    uint64_t m = (uint64_t)g->set_hcap - 1, x = set_hash_of(a, (int32_t)n) & m;
    for (;;) {
        int64_t k = g->set_hash[x];
        if (k < 0) break;
        if (g->sets[k].n == n && (n == 0 || memcmp(g->set_pool + g->sets[k].off, a, (size_t)n * sizeof(int32_t)) == 0))
            return (int32_t)k;
        x = (x + 1) & m;
    }
    if (g->pool_n + n > GRAM_MAX_SET_WORDS || g->n_sets >= INT32_MAX / 2) { g->failed = 1; return -1; }
    if (grow((void **)&g->set_pool, &g->pool_cap, g->pool_n + n, sizeof(int32_t)) ||
        grow((void **)&g->sets, &g->cap_sets, g->n_sets + 1, sizeof(gset))) { g->failed = 1; return -1; }
    gset *s = &g->sets[g->n_sets];
    memset(s, 0, sizeof *s);
    s->off = g->pool_n; s->n = (int32_t)n; s->chars_only = -1;
    if (n) memcpy(g->set_pool + g->pool_n, a, (size_t)n * sizeof(int32_t));
    g->pool_n += n;
    for (int64_t i = 0; i < n; i++) {
        if (a[i] == 0) { s->has_empty = 1; continue; }
        uint32_t t = g->el[g->st_elem[a[i]]].type;
        if (is_char_top(t)) s->n_char_top_nz = 1;
        else if (is_tok_top(t)) s->has_tok_top = 1;
    }
    int64_t k = g->n_sets++;
    g->set_hash[x] = k;
    if (2 * g->n_sets > g->set_hcap && set_rehash(g, 2 * g->set_hcap)) { g->failed = 1; return -1; }
    return (int32_t)k;
}

/* ---- advance ---- */
static int acc_add(ub_grammar *g, int32_t st) {
    if (grow((void **)&g->acc, &g->acc_cap, g->acc_n + 1, sizeof(int32_t))) { g->failed = 1; return -1; }
    g->acc[g->acc_n++] = st;
    return 0;
}

/* llama_grammar_advance_stack: appends to g->acc every stack reachable from `st` by expanding rule references
 * whose top is a terminal (or that is empty). 0 or -1 (limit). */
static int advance(ub_grammar *g, int32_t st) {
    if (++g->seen_gen == INT32_MAX) {
        memset(g->seen, 0, (size_t)g->seen_cap * sizeof(int32_t));
        g->seen_gen = 1;
    }
    int32_t gen = g->seen_gen;
    int64_t nt = 0, work = 0;
    if (grow((void **)&g->todo, &g->todo_cap, 1, sizeof(int32_t))) { g->failed = 1; return -1; }
    g->todo[nt++] = st;
    while (nt > 0) {
        int32_t cur = g->todo[--nt];
        if (++work > GRAM_MAX_ADVANCE) { g->failed = 1; return -1; }
        if (g->n_st + 1 > g->seen_cap) {
            int64_t old = g->seen_cap;
            if (grow((void **)&g->seen, &g->seen_cap, g->n_st + 1, sizeof(int32_t))) { g->failed = 1; return -1; }
            memset(g->seen + old, 0, (size_t)(g->seen_cap - old) * sizeof(int32_t));
        }
        if (g->seen[cur] == gen) continue;
        g->seen[cur] = gen;
        if (cur == 0) { if (acc_add(g, 0)) return -1; continue; }
        uint32_t ei = g->st_elem[cur];
        const gelem *pos = &g->el[ei];
        if (pos->type == UB_GRE_RULE_REF) {
            int64_t sub = g->rule_start[pos->value];
            int32_t base = g->st_parent[cur];
            if (!is_eos(pos + 1)) { base = st_push(g, base, ei + 1); if (base < 0) return -1; }
            for (;;) {
                int32_t next = base;
                if (!is_eos(&g->el[sub])) { next = st_push(g, base, (uint32_t)sub); if (next < 0) return -1; }
                if (grow((void **)&g->todo, &g->todo_cap, nt + 1, sizeof(int32_t))) { g->failed = 1; return -1; }
                g->todo[nt++] = next;
                while (!is_eos(&g->el[sub])) sub++;
                if (g->el[sub].type == UB_GRE_ALT) sub++;
                else break;
            }
        } else if (is_char_top(pos->type) || is_tok_top(pos->type)) {
            if (acc_add(g, cur)) return -1;
        } else {
            g->failed = 1;      /* END / ALT / RNG_UPPER / CHAR_ALT on top: cannot happen with parsed rules */
            return -1;
        }
    }
    return 0;
}

/* The stack below the top of st with `after` pushed unless it ends the alternative. */
static int32_t pop_push(ub_grammar *g, int32_t st, const gelem *after) {
    int32_t base = g->st_parent[st];
    if (!is_eos(after)) base = st_push(g, base, (uint32_t)(after - g->el));
    return base;
}

int gram_match_char(const gelem *pos, uint32_t chr, const gelem **after) {
    int found = 0;
    int positive = pos->type == UB_GRE_CHAR || pos->type == UB_GRE_CHAR_ANY;
    do {
        if (pos[1].type == UB_GRE_CHAR_RNG_UPPER) {
            found = found || (pos->value <= chr && chr <= pos[1].value);
            pos += 2;
        } else if (pos->type == UB_GRE_CHAR_ANY) {
            found = 1;
            pos += 1;
        } else {
            found = found || pos->value == chr;
            pos += 1;
        }
    } while (pos->type == UB_GRE_CHAR_ALT);
    if (after) *after = pos;
    return found == positive;
}

int gram_match_partial(const gelem *pos, uint32_t value, int32_t n_remain) {
    int positive = pos->type == UB_GRE_CHAR || pos->type == UB_GRE_CHAR_ANY;
    if (n_remain < 0 || (n_remain == 1 && value < 2)) return 0;
    uint32_t low = value << (n_remain * 6);
    uint32_t high = low | ((1u << (n_remain * 6)) - 1);
    if (low == 0) {
        if (n_remain == 2) low = 1u << 11;
        else if (n_remain == 3) low = 1u << 16;
    }
    do {
        if (pos[1].type == UB_GRE_CHAR_RNG_UPPER) {
            if (pos->value <= high && low <= pos[1].value) return positive;
            pos += 2;
        } else if (pos->type == UB_GRE_CHAR_ANY) {
            return 1;
        } else {
            if (low <= pos->value && pos->value <= high) return positive;
            pos += 1;
        }
    } while (pos->type == UB_GRE_CHAR_ALT);
    return !positive;
}

static int32_t finish(ub_grammar *g) {
    int32_t s = set_intern(g, g->acc, g->acc_n);
    g->acc_n = 0;
    return s;
}

int32_t gram_initial_set(ub_grammar *g) {
    g->acc_n = 0;
    int64_t pos = g->rule_start[g->root];
    for (;;) {
        int32_t st = 0;
        if (!is_eos(&g->el[pos])) { st = st_push(g, 0, (uint32_t)pos); if (st < 0) return -1; }
        if (advance(g, st)) return -1;
        while (!is_eos(&g->el[pos])) pos++;
        if (g->el[pos].type == UB_GRE_ALT) pos++;
        else break;
    }
    return finish(g);
}

/* Transition of a set by one code point, uncached. */
static int32_t trans_compute(ub_grammar *g, int32_t set, uint32_t cp) {
    gset *s = &g->sets[set];
    g->acc_n = 0;
    for (int32_t i = 0; i < s->n; i++) {
        int32_t st = g->set_pool[s->off + i];
        if (st == 0) continue;
        const gelem *top = &g->el[g->st_elem[st]];
        if (!is_char_top(top->type)) continue;
        const gelem *after;
        if (!gram_match_char(top, cp, &after)) continue;
        int32_t ns = pop_push(g, st, after);
        if (ns < 0 || advance(g, ns)) return -1;
        s = &g->sets[set];
    }
    return finish(g);
}

static int tr_grow(ub_grammar *g) {
    int64_t nc = g->tr_cap ? 2 * g->tr_cap : 1024;
    uint64_t *nk = malloc((size_t)nc * sizeof(uint64_t));
    int32_t *nv = malloc((size_t)nc * sizeof(int32_t));
    if (!nk || !nv) { free(nk); free(nv); return -1; }
    for (int64_t i = 0; i < nc; i++) nk[i] = UINT64_MAX;
    for (int64_t i = 0; i < g->tr_cap; i++) {
        if (g->tr_key[i] == UINT64_MAX) continue;
        uint64_t x = mix(g->tr_key[i]) & (uint64_t)(nc - 1);
        while (nk[x] != UINT64_MAX) x = (x + 1) & (uint64_t)(nc - 1);
        nk[x] = g->tr_key[i]; nv[x] = g->tr_val[i];
    }
    free(g->tr_key); free(g->tr_val);
    g->tr_key = nk; g->tr_val = nv; g->tr_cap = nc;
    return 0;
}

/* Transition of `set` by code point cp of class cls: the set's dense table (allocated on first use) or, for
 * grammars with many classes or once the dense tables hold GRAM_DENSE_BUDGET bytes, the grammar-wide hash table
 * keyed by (set, class); computed on a miss. */
int32_t gram_trans_cls(ub_grammar *g, int32_t set, uint32_t cls, uint32_t cp) {
    if (!g->sets[set].n_char_top_nz) return 0;
    int64_t need = (int64_t)g->n_classes * (int64_t)sizeof(int32_t);
    if (g->sets[set].tr || (g->n_classes <= GRAM_DENSE_CLASSES && g->tr_bytes + need <= GRAM_DENSE_BUDGET)) {
        if (!g->sets[set].tr) {
            int32_t *a = malloc((size_t)need);
            if (!a) { g->failed = 1; return -1; }
            for (int32_t i = 0; i < g->n_classes; i++) a[i] = -2;
            g->sets[set].tr = a;
            g->tr_bytes += need;
        }
        int32_t v = g->sets[set].tr[cls];
        if (v != -2) return v;
        v = trans_compute(g, set, cp);
        if (v >= 0) g->sets[set].tr[cls] = v;
        return v;
    }
    uint64_t key = ((uint64_t)(uint32_t)set << 32) | cls;
    if (g->tr_cap) {
        uint64_t m = (uint64_t)g->tr_cap - 1, x = mix(key) & m;
        for (; g->tr_key[x] != UINT64_MAX; x = (x + 1) & m)
            if (g->tr_key[x] == key) return g->tr_val[x];
    }
    int32_t v = trans_compute(g, set, cp);
    if (v < 0) return -1;
    if (2 * (g->tr_n + 1) > g->tr_cap && tr_grow(g)) { g->failed = 1; return -1; }
    uint64_t m = (uint64_t)g->tr_cap - 1, x = mix(key) & m;
    while (g->tr_key[x] != UINT64_MAX) x = (x + 1) & m;
    g->tr_key[x] = key; g->tr_val[x] = v; g->tr_n++;
    return v;
}

int32_t gram_trans(ub_grammar *g, int32_t set, uint32_t cp) {
    return gram_trans_cls(g, set, gram_class(g, cp), cp);
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The code-point classes of g (g->el compiled, g->vocab set or NULL): breakpoints = every char element's
 * value and value + 1, every range's upper bound + 1 (code points between two breakpoints compare alike with
 * every element, so they move every stack set alike); then the class of each ASCII code point and of each of
 * the vocabulary's distinct code points. 0, or -1 (out of memory). */
int gram_classes_init(ub_grammar *g) {
    int64_t nb = 0;
    for (int64_t k = 0; k < g->n_el; k++) {
        uint32_t t = g->el[k].type;
        if (t == UB_GRE_CHAR || t == UB_GRE_CHAR_NOT || t == UB_GRE_CHAR_ALT || t == UB_GRE_CHAR_RNG_UPPER) nb += 2;
    }
    if (nb > INT32_MAX / 2) return -1;
    g->brk = malloc((size_t)(nb ? nb : 1) * sizeof(uint32_t));
    if (!g->brk) return -1;
    int64_t w = 0;
    for (int64_t k = 0; k < g->n_el; k++) {
        uint32_t t = g->el[k].type, v = g->el[k].value;
        if (t == UB_GRE_CHAR || t == UB_GRE_CHAR_NOT || t == UB_GRE_CHAR_ALT) g->brk[w++] = v;
        if (t == UB_GRE_CHAR || t == UB_GRE_CHAR_NOT || t == UB_GRE_CHAR_ALT || t == UB_GRE_CHAR_RNG_UPPER)
            if (v != UINT32_MAX) g->brk[w++] = v + 1;
    }
    if (w > 1) qsort(g->brk, (size_t)w, sizeof(uint32_t), cmp_u32);
    int64_t u = 0;
    for (int64_t k = 0; k < w; k++) if (u == 0 || g->brk[u - 1] != g->brk[k]) g->brk[u++] = g->brk[k];
    g->n_brk = (int32_t)u;
    g->n_classes = (int32_t)u + 1;
    for (uint32_t c = 0, b = 0; c < 128; c++) {
        while (b < (uint32_t)u && g->brk[b] <= c) b++;
        g->cls_ascii[c] = b;
    }
    const ub_gvocab *v = g->vocab;
    if (v && v->cpn) {
        g->ucls = malloc((size_t)(v->n_ucp ? v->n_ucp : 1) * sizeof(uint32_t));
        if (!g->ucls) return -1;
        for (uint32_t k = 0; k < v->n_ucp; k++) g->ucls[k] = gram_class(g, v->ucp[k]);
    }
    return 0;
}

int32_t gram_chars_only(ub_grammar *g, int32_t set) {
    if (g->sets[set].chars_only >= 0) return g->sets[set].chars_only;
    g->acc_n = 0;
    gset *s = &g->sets[set];
    for (int32_t i = 0; i < s->n; i++) {
        int32_t st = g->set_pool[s->off + i];
        if (st != 0 && is_char_top(g->el[g->st_elem[st]].type) && acc_add(g, st)) return -1;
        s = &g->sets[set];
    }
    int32_t r = finish(g);
    if (r >= 0) g->sets[set].chars_only = r;
    return r;
}

/* The token part of llama_grammar_accept_token: stacks with a token element on top that `token` matches,
 * advanced, united with the stacks of set cp_set. */
int32_t gram_token_step(ub_grammar *g, int32_t set, int32_t token, int32_t cp_set) {
    g->acc_n = 0;
    gset *s = &g->sets[set];
    for (int32_t i = 0; i < s->n; i++) {
        int32_t st = g->set_pool[s->off + i];
        if (st == 0) continue;
        const gelem *top = &g->el[g->st_elem[st]];
        if (!is_tok_top(top->type)) continue;
        int match = top->type == UB_GRE_TOKEN ? top->value == (uint32_t)token : top->value != (uint32_t)token;
        if (!match) continue;
        /* advance appends to acc; keep the accumulated stacks across calls */
        int32_t ns = pop_push(g, st, top + 1);
        if (ns < 0 || advance(g, ns)) return -1;
        s = &g->sets[set];
    }
    const gset *c = &g->sets[cp_set];
    for (int32_t i = 0; i < c->n; i++) if (acc_add(g, g->set_pool[c->off + i])) return -1;
    return finish(g);
}

int gram_set_partial_ok(ub_grammar *g, int32_t set, uint32_t value, int32_t n_remain) {
    const gset *s = &g->sets[set];
    for (int32_t i = 0; i < s->n; i++) {
        int32_t st = g->set_pool[s->off + i];
        if (st == 0) continue;
        const gelem *top = &g->el[g->st_elem[st]];
        if (is_char_top(top->type) && gram_match_partial(top, value, n_remain)) return 1;
    }
    return 0;
}

int gram_set_token_ok(ub_grammar *g, int32_t set, int32_t token) {
    const gset *s = &g->sets[set];
    for (int32_t i = 0; i < s->n; i++) {
        int32_t st = g->set_pool[s->off + i];
        if (st == 0) continue;
        const gelem *top = &g->el[g->st_elem[st]];
        if (top->type == UB_GRE_TOKEN && top->value == (uint32_t)token) return 1;
        if (top->type == UB_GRE_TOKEN_NOT && top->value != (uint32_t)token) return 1;
    }
    return 0;
}

int gram_stacks_init(ub_grammar *g) {
    g->cap_st = 1024;
    g->st_elem = malloc((size_t)g->cap_st * sizeof(uint32_t));
    g->st_parent = malloc((size_t)g->cap_st * sizeof(int32_t));
    if (!g->st_elem || !g->st_parent) return -1;
    g->st_elem[0] = 0; g->st_parent[0] = -1; g->n_st = 1;
    if (st_rehash(g, 4096) || set_rehash(g, 1024)) return -1;
    if (grow((void **)&g->set_pool, &g->pool_cap, 64, sizeof(int32_t)) ||
        grow((void **)&g->sets, &g->cap_sets, 64, sizeof(gset)) ||
        grow((void **)&g->acc, &g->acc_cap, 64, sizeof(int32_t))) return -1;
    /* set 0 = the empty set */
    g->acc_n = 0;
    if (set_intern(g, g->acc, 0) != 0) return -1;
    return 0;
}

void gram_stacks_free(ub_grammar *g) {
    for (int64_t k = 0; k < g->n_sets; k++) { free(g->sets[k].tr); free(g->sets[k].mask); }
    free(g->sets); free(g->set_pool); free(g->set_hash);
    free(g->st_elem); free(g->st_parent); free(g->st_hash);
    free(g->tr_key); free(g->tr_val); free(g->brk); free(g->ucls);
    free(g->seen); free(g->todo); free(g->acc);
}
