/* The vocabulary trie of the grammar engine: pieces cut at their first NUL, sorted bytewise, laid out as a
 * preorder array of nodes (node 0 = the root = the empty prefix; a node's subtree is the index range
 * [i, end)); the tokens whose piece ends at a node are a contiguous run of `sorted_ids`. */
#include "gram_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct { const uint8_t *p; int64_t n; int32_t id; } pref;

static int cmp_piece(const void *a, const void *b) {
    const pref *x = a, *y = b;
    int64_t n = x->n < y->n ? x->n : y->n;
    int c = n ? memcmp(x->p, y->p, (size_t)n) : 0;
    if (c) return c;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* pieces: bytes of all pieces, offsets int64[n_tokens + 1] (ascending, within the caller's buffer);
 * eog uint8[n_tokens] or NULL. Everything kept is copied. */
ub_gvocab *ub_gvocab_new(const uint8_t *pieces, const int64_t *offsets, int32_t n_tokens, const uint8_t *eog) {
    if (n_tokens <= 0 || !offsets || (!pieces && offsets[n_tokens] > 0)) return NULL;
    for (int32_t i = 0; i < n_tokens; i++)
        if (offsets[i] < 0 || offsets[i + 1] < offsets[i]) return NULL;
    ub_gvocab *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    v->n_tokens = n_tokens;
    v->refs = 1;
    pthread_mutex_init(&v->mu, NULL);
    int64_t total = offsets[n_tokens] - offsets[0];
    v->bytes = malloc((size_t)(total > 0 ? total : 1));
    v->off = malloc((size_t)(n_tokens + 1) * sizeof(int64_t));
    v->eog = calloc((size_t)n_tokens, 1);
    v->sorted_ids = malloc((size_t)n_tokens * sizeof(int32_t));
    v->leaf = calloc((size_t)n_tokens, sizeof(uint32_t));
    pref *ps = malloc((size_t)n_tokens * sizeof(pref));
    if (!v->bytes || !v->off || !v->eog || !v->sorted_ids || !v->leaf || !ps) goto fail;
    int64_t w = 0;
    for (int32_t i = 0; i < n_tokens; i++) {
        const uint8_t *p = pieces + offsets[i];
        int64_t n = offsets[i + 1] - offsets[i];
        const uint8_t *z = n ? memchr(p, 0, (size_t)n) : NULL;
        if (z) n = z - p;
        v->off[i] = w;
        if (n) memcpy(v->bytes + w, p, (size_t)n);
        w += n;
        if (eog) v->eog[i] = eog[i] ? 1 : 0;
    }
    v->off[n_tokens] = w;
    int64_t max_nodes = 1;
    for (int32_t i = 0; i < n_tokens; i++) {
        ps[i].p = v->bytes + v->off[i]; ps[i].n = v->off[i + 1] - v->off[i]; ps[i].id = i;
        max_nodes += ps[i].n;
    }
    if (max_nodes > UINT32_MAX / 2) goto fail;
    qsort(ps, (size_t)n_tokens, sizeof(pref), cmp_piece);
    /* build: nodes along the current path path[d] (node index at depth d) */
    v->nodes = malloc((size_t)max_nodes * sizeof(gnode));
    int64_t maxlen = 0;
    for (int32_t i = 0; i < n_tokens; i++) if (ps[i].n > maxlen) maxlen = ps[i].n;
    uint32_t *path = malloc((size_t)(maxlen + 1) * sizeof(uint32_t));
    if (!v->nodes || !path) { free(path); goto fail; }
    uint32_t nn = 1;
    memset(&v->nodes[0], 0, sizeof(gnode));
    path[0] = 0;
    int64_t depth = 0;              /* depth of the path's last node */
    const uint8_t *prev = NULL; int64_t prev_n = 0;
    for (int32_t k = 0; k < n_tokens; k++) {
        const pref *t = &ps[k];
        int64_t l = 0;
        if (prev) while (l < t->n && l < prev_n && t->p[l] == prev[l]) l++;
        while (depth > l) { v->nodes[path[depth]].end = nn; depth--; }
        for (int64_t d = l; d < t->n; d++) {
            gnode *nd = &v->nodes[nn];
            nd->end = 0; nd->tok0 = 0; nd->ntok = 0; nd->byte = t->p[d]; nd->pad = 0;
            nd->depth = (uint32_t)(d + 1);
            path[++depth] = nn++;
        }
        gnode *leaf = &v->nodes[path[depth]];
        if (leaf->ntok == 0) leaf->tok0 = (uint32_t)k;
        leaf->ntok++;
        v->sorted_ids[k] = t->id;
        v->leaf[t->id] = path[depth];
        prev = t->p; prev_n = t->n;
    }
    while (depth > 0) { v->nodes[path[depth]].end = nn; depth--; }
    v->nodes[0].end = nn;
    v->n_nodes = nn;
    v->max_depth = (uint32_t)maxlen;
    free(path); free(ps);
    return v;
fail:
    free(ps);
    free(v->bytes); free(v->off); free(v->eog); free(v->sorted_ids); free(v->leaf); free(v->nodes);
    pthread_mutex_destroy(&v->mu);
    free(v);
    return NULL;
}

void gvocab_retain(ub_gvocab *v) {
    pthread_mutex_lock(&v->mu);
    v->refs++;
    pthread_mutex_unlock(&v->mu);
}

void ub_gvocab_free(ub_gvocab *v) {
    if (!v) return;
    pthread_mutex_lock(&v->mu);
    int left = --v->refs;
    pthread_mutex_unlock(&v->mu);
    if (left > 0) return;
    free(v->bytes); free(v->off); free(v->eog); free(v->sorted_ids); free(v->leaf); free(v->nodes);
    pthread_mutex_destroy(&v->mu);
    free(v);
}

int32_t ub_gvocab_n_tokens(const ub_gvocab *v) { return v ? v->n_tokens : 0; }
int64_t ub_gvocab_n_nodes(const ub_gvocab *v) { return v ? (int64_t)v->n_nodes : 0; }
