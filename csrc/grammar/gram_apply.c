/* Grammar objects and states (see ub_grammar.h): compile a parsed grammar, the allowed set of a state (one
 * preorder walk of the vocabulary trie), single-token checks, accepting tokens and text. */
#include "gram_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GRAM_MASK_BUDGET ((int64_t)64 << 20)

static void set_err(char *err, int32_t err_len, const char *msg) {
    if (err && err_len > 0) snprintf(err, (size_t)err_len, "%s", msg);
}

static void grammar_destroy(ub_grammar *g) {
    gram_stacks_free(g);
    free(g->el); free(g->rule_start);
    if (g->vocab) ub_gvocab_free(g->vocab);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

/* src[len] (cut at a NUL), root name, tok / v may be NULL; err[err_len] and *err_pos receive an error. */
ub_grammar *ub_grammar_new(const char *src, int64_t len, const char *root, const ub_tok *tok, ub_gvocab *v,
                           int32_t flags, char *err, int32_t err_len, int64_t *err_pos) {
    if (err_pos) *err_pos = -1;
    if (err && err_len > 0) err[0] = 0;
    if (!src || len < 0 || !root) { set_err(err, err_len, "invalid argument"); return NULL; }
    const char *z = memchr(src, 0, (size_t)len);
    if (z) len = z - src;
    char *text = malloc((size_t)len + 1);
    if (!text) { set_err(err, err_len, "out of memory"); return NULL; }
    memcpy(text, src, (size_t)len); text[len] = 0;
    gparser p;
    memset(&p, 0, sizeof p);
    p.tok = tok; p.syntax_only = (flags & UB_GRAMMAR_SYNTAX_ONLY) != 0;
    p.err = err; p.err_len = err_len; p.err_pos = -1;
    ub_grammar *g = NULL;
    if (gram_parse(&p, text)) {
        if (err_pos) *err_pos = p.err_pos;
        goto out;
    }
    if (p.n_rules == 0) { set_err(err, err_len, "failed to parse grammar"); goto out; }
    int64_t root_id = gram_symbol_find(&p, root);
    if (root_id < 0 || root_id >= p.n_rules) {
        if (err && err_len > 0) snprintf(err, (size_t)err_len, "grammar does not contain a '%.200s' symbol", root);
        goto out;
    }
    if (gram_check(&p, root_id, err, err_len)) goto out;
    g = calloc(1, sizeof *g);
    if (!g) { set_err(err, err_len, "out of memory"); goto out; }
    pthread_mutex_init(&g->mu, NULL);
    g->refs = 1;
    g->n_rules = (int32_t)p.n_rules;
    g->root = (int32_t)root_id;
    int64_t n_el = 0;
    for (int64_t r = 0; r < p.n_rules; r++) n_el += p.rules[r].n;
    g->el = malloc((size_t)(n_el + 1) * sizeof(gelem));
    g->rule_start = malloc((size_t)(p.n_rules + 1) * sizeof(int64_t));
    if (!g->el || !g->rule_start || gram_stacks_init(g)) {
        set_err(err, err_len, "out of memory");
        grammar_destroy(g); g = NULL; goto out;
    }
    int64_t w = 0;
    for (int64_t r = 0; r < p.n_rules; r++) {
        g->rule_start[r] = w;
        memcpy(g->el + w, p.rules[r].a, (size_t)p.rules[r].n * sizeof(gelem));
        w += p.rules[r].n;
    }
    g->rule_start[p.n_rules] = w;
    g->el[w].type = UB_GRE_END; g->el[w].value = 0;
    g->n_el = w;
    g->init_set = gram_initial_set(g);
    if (g->init_set < 0) {
        set_err(err, err_len, "grammar too large: its initial stacks exceed the engine's limits");
        grammar_destroy(g); g = NULL; goto out;
    }
    if (v) { gvocab_retain(v); g->vocab = v; }
    if (gram_classes_init(g)) {
        set_err(err, err_len, "out of memory");
        grammar_destroy(g); g = NULL; goto out;
    }
out:
    gram_parser_free(&p);
    free(text);
    return g;
}

static void grammar_release(ub_grammar *g) {
    pthread_mutex_lock(&g->mu);
    int left = --g->refs;
    pthread_mutex_unlock(&g->mu);
    if (left == 0) grammar_destroy(g);
}

void ub_grammar_free(ub_grammar *g) { if (g) grammar_release(g); }

/* on = 0: no allowed set is cached any more (those cached are dropped); 1: cached again */
void ub_grammar_set_mask_cache(ub_grammar *g, int on) {
    pthread_mutex_lock(&g->mu);
    g->no_mask_cache = !on;
    if (!on) {
        for (int64_t k = 0; k < g->n_sets; k++) { free(g->sets[k].mask); g->sets[k].mask = NULL; }
        g->mask_bytes = 0;
    }
    pthread_mutex_unlock(&g->mu);
}

int32_t ub_grammar_n_rules(const ub_grammar *g) { return g ? g->n_rules : 0; }

/* out int32[2 * cap]: (type, value) pairs of rule r */
int32_t ub_grammar_rule(const ub_grammar *g, int32_t r, int32_t *out, int32_t cap) {
    if (!g || r < 0 || r >= g->n_rules) return -1;
    int64_t n = g->rule_start[r + 1] - g->rule_start[r];
    for (int64_t i = 0; i < n && i < cap; i++) {
        out[2 * i] = (int32_t)g->el[g->rule_start[r] + i].type;
        out[2 * i + 1] = (int32_t)g->el[g->rule_start[r] + i].value;
    }
    return (int32_t)n;
}

/* out3 int64[3]: stacks, sets, bytes of cached masks */
void ub_grammar_stats(ub_grammar *g, int64_t *out3) {
    pthread_mutex_lock(&g->mu);
    out3[0] = g->n_st; out3[1] = g->n_sets; out3[2] = g->mask_bytes;
    pthread_mutex_unlock(&g->mu);
}

/* ---- states ---- */
ub_gstate *ub_gstate_new(ub_grammar *g) {
    if (!g) return NULL;
    ub_gstate *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    pthread_mutex_lock(&g->mu);
    g->refs++;
    pthread_mutex_unlock(&g->mu);
    s->g = g; s->set = g->init_set;
    return s;
}

ub_gstate *ub_gstate_clone(const ub_gstate *src) {
    if (!src) return NULL;
    ub_gstate *s = ub_gstate_new(src->g);
    if (s) { s->set = src->set; s->pval = src->pval; s->prem = src->prem; }
    return s;
}

int ub_gstate_copy(ub_gstate *dst, const ub_gstate *src) {
    if (!dst || !src || dst->g != src->g) return UB_E_ARG;
    dst->set = src->set; dst->pval = src->pval; dst->prem = src->prem;
    return UB_OK;
}

void ub_gstate_reset(ub_gstate *s) { if (s) { s->set = s->g->init_set; s->pval = 0; s->prem = 0; } }

void ub_gstate_free(ub_gstate *s) {
    if (!s) return;
    grammar_release(s->g);
    free(s);
}

int ub_gstate_can_end(ub_gstate *s) {
    pthread_mutex_lock(&s->g->mu);
    int r = s->g->sets[s->set].has_empty;
    pthread_mutex_unlock(&s->g->mu);
    return r;
}

/* out2 int32[2] or NULL: partial value, n_remain */
int32_t ub_gstate_info(ub_gstate *s, int32_t *out2) {
    pthread_mutex_lock(&s->g->mu);
    int32_t n = s->g->sets[s->set].n;
    pthread_mutex_unlock(&s->g->mu);
    if (out2) { out2[0] = (int32_t)s->pval; out2[1] = s->prem; }
    return n;
}

/* ---- the allowed set ---- */
typedef struct { uint32_t node; gdec dec; int32_t set; } pending;

typedef struct {
    gdec *dec; int32_t *cs; uint8_t *got;      /* per depth [max_depth + 1] */
    pending *pend; int64_t n_pend, cap_pend;
} walk;

static void mark_node(const ub_gvocab *v, const gnode *nd, int32_t except, uint8_t *out) {
    for (uint32_t k = 0; k < nd->ntok; k++) {
        int32_t id = v->sorted_ids[nd->tok0 + k];
        if (id != except && !v->eog[id]) out[id] = 1;
    }
}

/* Tokens of the subtree below node i (not those ending at i) that decode, from `dec`, at least one more code
 * point without an invalid sequence, except `except`: marked allowed (a token-element stack's rule). */
static void mark_subtree_tokens(const ub_gvocab *v, walk *w, uint32_t i, gdec dec, int32_t except, uint8_t *out) {
    uint32_t base = v->nodes[i].depth, end = v->nodes[i].end;
    w->dec[base] = dec; w->got[base] = 0;
    for (uint32_t j = i + 1; j < end;) {
        const gnode *nd = &v->nodes[j];
        uint32_t d = nd->depth;
        gdec dd = w->dec[d - 1];
        uint32_t cp;
        uint8_t got = w->got[d - 1] | (uint8_t)gdec_byte(&dd, nd->byte, &cp);
        if (dd.invalid) { j = nd->end; continue; }
        if (got) mark_node(v, nd, except, out);
        w->dec[d] = dd; w->got[d] = got;
        j++;
    }
}

/* Whether token t (in the subtree below node i) decodes at least one more code point from dec, validly. */
static int token_more_cp(const ub_gvocab *v, int32_t t, uint32_t i, gdec dec) {
    uint32_t leaf = v->leaf[t];
    if (leaf <= i || leaf >= v->nodes[i].end || v->eog[t]) return 0;
    const uint8_t *p = v->bytes + v->off[t];
    int64_t n = v->off[t + 1] - v->off[t];
    int got = 0;
    for (int64_t k = v->nodes[i].depth; k < n; k++) {
        uint32_t cp;
        got |= gdec_byte(&dec, p[k], &cp);
        if (dec.invalid) return 0;
    }
    return got;
}

static int pend_add(walk *w, uint32_t node, gdec dec, int32_t set) {
    if (w->n_pend == w->cap_pend) {
        int64_t nc = w->cap_pend ? 2 * w->cap_pend : 64;
        pending *np = realloc(w->pend, (size_t)nc * sizeof(pending));
        if (!np) return -1;
        w->pend = np; w->cap_pend = nc;
    }
    w->pend[w->n_pend].node = node; w->pend[w->n_pend].dec = dec; w->pend[w->n_pend].set = set;
    w->n_pend++;
    return 0;
}

static void do_pending(ub_grammar *g, walk *w, const pending *pe, uint8_t *out) {
    const ub_gvocab *v = g->vocab;
    const gset *s = &g->sets[pe->set];
    int32_t not_val = -1; int many_not = 0;
    for (int32_t k = 0; k < s->n; k++) {
        int32_t st = g->set_pool[s->off + k];
        if (st == 0) continue;
        const gelem *top = &g->el[g->st_elem[st]];
        if (top->type == UB_GRE_TOKEN) {
            if (top->value < (uint32_t)v->n_tokens && token_more_cp(v, (int32_t)top->value, pe->node, pe->dec))
                out[top->value] = 1;
        } else if (top->type == UB_GRE_TOKEN_NOT) {
            if (not_val >= 0 && (uint32_t)not_val != top->value) many_not = 1;
            not_val = (int32_t)top->value;
        }
    }
    if (many_not) mark_subtree_tokens(v, w, pe->node, pe->dec, -1, out);
    else if (not_val >= 0) mark_subtree_tokens(v, w, pe->node, pe->dec, not_val, out);
}

/* Tokens of code-point node c ending in a partial UTF-8 sequence, `set` = the stacks after c's code point:
 * allowed iff a char-element stack's class the sequence may complete into (runs of one sequence checked once). */
static void mark_parts(ub_grammar *g, const ub_gvocab *v, uint32_t c, int32_t set, uint8_t *out) {
    const gpart *p = v->parts + v->part_start[c], *e = v->parts + v->part_start[c + 1];
    uint32_t lv = 0; int32_t lr = 0; int ok = 0;
    for (; p < e; p++) {
        if (p->n_remain != lr || p->value != lv) {
            lv = p->value; lr = p->n_remain;
            ok = gram_set_partial_ok(g, set, lv, lr);
        }
        if (ok) out[p->id] = 1;
    }
}

/* The walk from a clean UTF-8 state (no partial sequence pending) over the code-point trie: one transition per
 * node, subtrees whose code point no stack accepts skipped. out uint8[n_tokens] zeroed by the caller; cs
 * int32[cp_max_depth + 1] scratch. Caller holds g->mu. */
static int walk_cp(ub_grammar *g, walk *w, int32_t set, uint32_t pval, int32_t prem, int32_t *cs, uint8_t *out) {
    const ub_gvocab *v = g->vocab;
    const gcpnode *cpn = v->cpn;
    const int32_t *cp_ids = v->cp_ids;
    const uint32_t *ucls = g->ucls;
    cs[0] = set;
    if (cpn[0].ntok & GCP_HAS_PART) mark_parts(g, v, 0, set, out);
    if (g->sets[set].has_tok_top && pend_add(w, 0, gdec_start(pval, prem), set)) return UB_E_NOMEM;
    const uint32_t n = v->n_cpn, cpmask = (1u << GCP_DEPTH_SHIFT) - 1;
    for (uint32_t i = 1; i < n;) {
        const gcpnode *nd = &cpn[i];
        uint32_t cpd = nd->cpd, d = cpd >> GCP_DEPTH_SHIFT, u = cpd & cpmask, cls = ucls[u];
        int32_t ps = cs[d - 1], ns;
        const int32_t *tr = g->sets[ps].tr;
        if (!tr || (ns = tr[cls]) == -2) ns = gram_trans_cls(g, ps, cls, v->ucp[u]);
        if (ns <= 0) {
            if (ns < 0) return UB_E_GRAMMAR_LIMIT;
            i = nd->end;
            continue;
        }
        uint32_t nt = nd->ntok;
        if (nt) {
            const int32_t *ids = cp_ids + nd->tok0;
            for (uint32_t k = 0, m = nt & ~GCP_HAS_PART; k < m; k++) out[ids[k]] = 1;
            if (nt & GCP_HAS_PART) mark_parts(g, v, i, ns, out);
        }
        const gset *nss = &g->sets[ns];
        if (nss->has_tok_top && pend_add(w, v->cp_byte[i], gdec_start(0, 0), ns)) return UB_E_NOMEM;
        if (!nss->n_char_top_nz) { i = nd->end; continue; }   /* no code point can follow */
        cs[d] = ns;
        i++;
    }
    return UB_OK;
}

/* The walk over the byte trie from a partial UTF-8 sequence (value pval, prem > 0 bytes to come, or any state
 * when the vocabulary has no code-point trie): decodes byte by byte. Caller holds g->mu. */
static int walk_bytes(ub_grammar *g, walk *w, int32_t set, uint32_t pval, int32_t prem, uint8_t *out) {
    const ub_gvocab *v = g->vocab;
    w->dec[0] = gdec_start(pval, prem); w->cs[0] = set;
    if (g->sets[set].has_tok_top && pend_add(w, 0, w->dec[0], set)) return UB_E_NOMEM;
    for (uint32_t i = 1; i < v->n_nodes;) {
        const gnode *nd = &v->nodes[i];
        uint32_t d = nd->depth;
        gdec dd = w->dec[d - 1];
        int32_t s = w->cs[d - 1];
        uint32_t cp;
        int em = gdec_byte(&dd, nd->byte, &cp);
        if (dd.invalid) { i = nd->end; continue; }
        if (em) {
            int32_t ns = gram_trans_fast(g, s, cp);
            if (ns < 0) return UB_E_GRAMMAR_LIMIT;
            if (ns == 0) { i = nd->end; continue; }
            s = ns;
            if (nd->ntok) mark_node(v, nd, -1, out);
            if (g->sets[s].has_tok_top && pend_add(w, i, dd, s)) return UB_E_NOMEM;
        } else {
            if (!g->sets[s].n_char_top_nz) { i = nd->end; continue; }
            if (nd->ntok && gram_set_partial_ok(g, s, dd.value, dd.n_remain)) mark_node(v, nd, -1, out);
        }
        w->dec[d] = dd; w->cs[d] = s;
        i++;
    }
    return UB_OK;
}

/* The allowed set of (set, partial) into out uint8[n_tokens]. Caller holds g->mu. */
static int compute_mask(ub_grammar *g, int32_t set, uint32_t pval, int32_t prem, uint8_t *out) {
    const ub_gvocab *v = g->vocab;
    memset(out, 0, (size_t)v->n_tokens);
    if (g->sets[set].has_empty)
        for (int32_t k = 0; k < v->n_eog; k++) out[v->eog_ids[k]] = 1;
    walk w;
    memset(&w, 0, sizeof w);
    size_t nd1 = (size_t)v->max_depth + 1;
    w.dec = malloc(nd1 * sizeof(gdec)); w.cs = malloc(nd1 * sizeof(int32_t)); w.got = malloc(nd1);
    int rc;
    if (!w.dec || !w.cs || !w.got) { rc = UB_E_NOMEM; goto done; }
    /* the code-point trie is at most as deep as the byte trie: w.cs serves both walks */
    if (prem <= 0 && v->cpn && g->ucls) rc = walk_cp(g, &w, set, pval, prem, w.cs, out);
    else rc = walk_bytes(g, &w, set, pval, prem, out);
    if (rc != UB_OK) goto done;
    for (int64_t k = 0; k < w.n_pend; k++) do_pending(g, &w, &w.pend[k], out);
done:
    free(w.dec); free(w.cs); free(w.got); free(w.pend);
    return rc;
}

/* The state's allowed set, through the per-set cache when the partial UTF-8 sequence is empty. Returns a
 * pointer to n_tokens bytes (the cache's, or `scratch`), NULL with *rc on error. Caller holds g->mu. */
static const uint8_t *state_mask(ub_gstate *s, uint8_t *scratch, int *rc) {
    ub_grammar *g = s->g;
    int plain = s->prem <= 0 && !g->no_mask_cache;
    if (plain && g->sets[s->set].mask) return g->sets[s->set].mask;
    *rc = compute_mask(g, s->set, s->pval, s->prem, scratch);
    if (*rc != UB_OK) { g->failed = 0; return NULL; }
    if (plain && g->mask_bytes + g->vocab->n_tokens <= GRAM_MASK_BUDGET) {
        uint8_t *m = malloc((size_t)g->vocab->n_tokens);
        if (m) {
            memcpy(m, scratch, (size_t)g->vocab->n_tokens);
            g->sets[s->set].mask = m;
            g->mask_bytes += g->vocab->n_tokens;
        }
    }
    return scratch;
}

int ub_gstate_mask(ub_gstate *s, uint8_t *out, int32_t n_vocab) {
    if (!s || !out) return UB_E_ARG;
    ub_grammar *g = s->g;
    if (!g->vocab || n_vocab != g->vocab->n_tokens) return UB_E_ARG;
    pthread_mutex_lock(&g->mu);
    int rc = UB_OK;
    const uint8_t *m = state_mask(s, out, &rc);
    if (m && m != out) memcpy(out, m, (size_t)n_vocab);
    pthread_mutex_unlock(&g->mu);
    return rc;
}

/* logits float[n_vocab] in id order */
int ub_gstate_apply_row(ub_gstate *s, float *logits, int32_t n_vocab) {
    if (!s || !logits) return UB_E_ARG;
    ub_grammar *g = s->g;
    if (!g->vocab || n_vocab != g->vocab->n_tokens) return UB_E_ARG;
    uint8_t *scratch = malloc((size_t)n_vocab);
    if (!scratch) return UB_E_NOMEM;
    pthread_mutex_lock(&g->mu);
    int rc = UB_OK;
    const uint8_t *m = state_mask(s, scratch, &rc);
    if (m) {
        const float ninf = -__builtin_inff();
        for (int32_t t = 0; t < n_vocab; t++) if (!m[t]) logits[t] = ninf;
    }
    pthread_mutex_unlock(&g->mu);
    free(scratch);
    return rc;
}

/* Decodes piece p[n] from (pval, prem): code points into *cps (malloc'd, caller frees), their count, the final
 * partial sequence and whether it was invalid (then no code points, partial {0, -1}). */
static int decode_piece(const uint8_t *p, int64_t n, uint32_t pval, int32_t prem, uint32_t **cps, int64_t *ncp,
                        gdec *fin) {
    uint32_t *a = malloc((size_t)(n > 0 ? n : 1) * sizeof(uint32_t));
    if (!a) return -1;
    gdec d = gdec_start(pval, prem);
    int64_t k = 0;
    for (int64_t i = 0; i < n && p[i]; i++) {
        uint32_t cp;
        if (gdec_byte(&d, p[i], &cp)) a[k++] = cp;
        if (d.invalid) { k = 0; break; }
    }
    *cps = a; *ncp = k; *fin = d;
    return 0;
}

/* Single-token check, llama.cpp's reject_candidates for one candidate. Caller holds g->mu. */
static int allows_locked(ub_gstate *s, int32_t token) {
    ub_grammar *g = s->g;
    const ub_gvocab *v = g->vocab;
    if (v->eog[token]) return g->sets[s->set].has_empty;
    int64_t n = v->off[token + 1] - v->off[token];
    if (n == 0) return 0;
    uint32_t *cps; int64_t k; gdec fin;
    if (decode_piece(v->bytes + v->off[token], n, s->pval, s->prem, &cps, &k, &fin)) return UB_E_NOMEM;
    int r;
    if (fin.invalid) { r = 0; goto out; }
    int32_t set = s->set;
    for (int64_t i = 0; i < k; i++) {
        if (g->sets[set].has_tok_top && gram_set_token_ok(g, set, token)) { r = 1; goto out; }
        set = gram_trans(g, set, cps[i]);
        if (set < 0) { g->failed = 0; r = UB_E_GRAMMAR_LIMIT; goto out; }
        if (set == 0) { r = 0; goto out; }
    }
    r = fin.n_remain == 0 ? 1 : gram_set_partial_ok(g, set, fin.value, fin.n_remain);
out:
    free(cps);
    return r;
}

int ub_gstate_allows(ub_gstate *s, int32_t token) {
    if (!s || !s->g->vocab || token < 0 || token >= s->g->vocab->n_tokens) return UB_E_ARG;
    pthread_mutex_lock(&s->g->mu);
    int r = allows_locked(s, token);
    pthread_mutex_unlock(&s->g->mu);
    return r;
}

/* d[n] candidates: id, logit, p */
int ub_gstate_apply_td(ub_gstate *s, ub_token_data *d, int64_t n) {
    if (!s || (!d && n > 0) || n < 0 || !s->g->vocab) return UB_E_ARG;
    ub_grammar *g = s->g;
    int32_t nv = g->vocab->n_tokens;
    for (int64_t i = 0; i < n; i++) if (d[i].id < 0 || d[i].id >= nv) return UB_E_ARG;
    const float ninf = -__builtin_inff();
    int rc = UB_OK;
    if (n * 8 >= nv || (s->prem <= 0 && !g->no_mask_cache && g->sets[s->set].mask)) {
        uint8_t *scratch = malloc((size_t)nv);
        if (!scratch) return UB_E_NOMEM;
        pthread_mutex_lock(&g->mu);
        const uint8_t *m = state_mask(s, scratch, &rc);
        if (m) for (int64_t i = 0; i < n; i++) if (!m[d[i].id]) d[i].logit = ninf;
        pthread_mutex_unlock(&g->mu);
        free(scratch);
        return rc;
    }
    uint8_t *keep = malloc((size_t)(n > 0 ? n : 1));
    if (!keep) return UB_E_NOMEM;
    pthread_mutex_lock(&g->mu);
    for (int64_t i = 0; i < n; i++) {
        int r = allows_locked(s, d[i].id);
        if (r < 0) { rc = r; break; }
        keep[i] = (uint8_t)r;
    }
    pthread_mutex_unlock(&g->mu);
    if (rc == UB_OK) for (int64_t i = 0; i < n; i++) if (!keep[i]) d[i].logit = ninf;
    free(keep);
    return rc;
}

int ub_gstate_accept_token(ub_gstate *s, int32_t token) {
    if (!s || !s->g->vocab || token < 0 || token >= s->g->vocab->n_tokens) return UB_E_ARG;
    ub_grammar *g = s->g;
    const ub_gvocab *v = g->vocab;
    pthread_mutex_lock(&g->mu);
    int eog = v->eog[token], ok = g->sets[s->set].has_empty;
    pthread_mutex_unlock(&g->mu);
    if (eog) return ok ? UB_OK : UB_E_GRAMMAR_REJECT;
    return ub_gstate_accept_piece(s, token, v->bytes + v->off[token], v->off[token + 1] - v->off[token]);
}

/* piece p[n] (cut at a NUL): llama_grammar_accept_token(grammar, token, piece) */
int ub_gstate_accept_piece(ub_gstate *s, int32_t token, const uint8_t *p, int64_t n) {
    if (!s || (!p && n > 0) || n < 0) return UB_E_ARG;
    ub_grammar *g = s->g;
    pthread_mutex_lock(&g->mu);
    int rc = UB_OK;
    uint32_t *cps; int64_t k; gdec fin;
    if (decode_piece(p, n, s->pval, s->prem, &cps, &k, &fin)) {
        pthread_mutex_unlock(&g->mu);
        return UB_E_NOMEM;
    }
    int32_t cset = gram_chars_only(g, s->set);
    for (int64_t i = 0; i < k && cset > 0; i++) cset = gram_trans(g, cset, cps[i]);
    int32_t ns = cset < 0 ? -1 : gram_token_step(g, s->set, token, cset);
    if (ns < 0) { g->failed = 0; rc = UB_E_GRAMMAR_LIMIT; }
    else if (ns == 0) rc = UB_E_GRAMMAR_REJECT;
    else { s->set = ns; s->pval = fin.value; s->prem = fin.n_remain; }
    pthread_mutex_unlock(&g->mu);
    free(cps);
    return rc;
}

int ub_gstate_accept_bytes(ub_gstate *s, const uint8_t *b, int64_t n) {
    if (!s || (!b && n > 0) || n < 0) return UB_E_ARG;
    ub_grammar *g = s->g;
    uint32_t *cps; int64_t k; gdec fin;
    pthread_mutex_lock(&g->mu);
    if (decode_piece(b, n, s->pval, s->prem, &cps, &k, &fin)) { pthread_mutex_unlock(&g->mu); return UB_E_NOMEM; }
    int32_t set = s->set;
    for (int64_t i = 0; i < k && set > 0; i++) set = gram_trans(g, set, cps[i]);
    int rc = UB_OK;
    if (set < 0) { g->failed = 0; rc = UB_E_GRAMMAR_LIMIT; }
    else if (set == 0) rc = UB_E_GRAMMAR_REJECT;
    else { s->set = set; s->pval = fin.value; s->prem = fin.n_remain; }
    pthread_mutex_unlock(&g->mu);
    free(cps);
    return rc;
}
