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

/* The code-point trie of v (see gram_internal.h), from its byte trie: one preorder pass decoding every path
 * from a clean UTF-8 state; subtrees behind an invalid sequence are dropped (no token there can be allowed
 * from a clean state), tokens ending in a partial sequence are listed after their last complete code point's
 * node. 0, or -1 (out of memory) with nothing kept. Leaves v->cpn NULL (the byte walk only) when a path is
 * deeper than GCP_MAX_DEPTH code points. */
static int build_cp_trie(ub_gvocab *v) {
    uint32_t nb = v->n_nodes, md = v->max_depth;
    gdec *dec = malloc(((size_t)md + 1) * sizeof(gdec));
    uint32_t *cpof = malloc(((size_t)md + 1) * sizeof(uint32_t));   /* nearest code-point node per byte depth */
    uint32_t *open_c = malloc(((size_t)md + 1) * sizeof(uint32_t)); /* open code-point nodes, root first */
    uint32_t *open_e = malloc(((size_t)md + 1) * sizeof(uint32_t)); /* their byte-subtree ends */
    gcpnode *cpn = malloc((size_t)nb * sizeof(gcpnode));
    uint32_t *cpb = malloc((size_t)nb * sizeof(uint32_t));
    int32_t *ids = malloc((size_t)v->n_tokens * sizeof(int32_t));
    gpart *pt = malloc((size_t)v->n_tokens * sizeof(gpart));
    uint32_t *powner = malloc((size_t)v->n_tokens * sizeof(uint32_t));
    uint32_t *pstart = NULL; gpart *parts = NULL; uint32_t *ucp = NULL;
    uint64_t *bits = NULL; uint32_t *rank = NULL;
    int rc = -1;
    if (!dec || !cpof || !open_c || !open_e || !cpn || !cpb || !ids || !pt || !powner) goto out;
    uint32_t nc = 1, nids = 0, npt = 0, nopen = 1, maxd = 0;
    memset(&cpn[0], 0, sizeof cpn[0]);
    cpb[0] = 0;
    open_c[0] = 0; open_e[0] = nb;
    dec[0] = gdec_start(0, 0); cpof[0] = 0;
    for (uint32_t j = 1; j < nb;) {
        const gnode *nd = &v->nodes[j];
        while (nopen > 1 && open_e[nopen - 1] <= j) { cpn[open_c[nopen - 1]].end = nc; nopen--; }
        uint32_t d = nd->depth;
        gdec dd = dec[d - 1];
        uint32_t cp, parent = cpof[d - 1];
        int em = gdec_byte(&dd, nd->byte, &cp);
        if (dd.invalid) { j = nd->end; continue; }
        if (em) {
            uint32_t cd = (cpn[parent].cpd >> GCP_DEPTH_SHIFT) + 1;
            if (cd > GCP_MAX_DEPTH) { rc = 0; goto out; }        /* too deep: no code-point trie */
            if (cd > maxd) maxd = cd;
            gcpnode *c = &cpn[nc];
            c->end = 0; c->cpd = cp | (cd << GCP_DEPTH_SHIFT); c->tok0 = nids; c->ntok = 0;
            for (uint32_t k = 0; k < nd->ntok; k++) {
                int32_t id = v->sorted_ids[nd->tok0 + k];
                if (!v->eog[id]) { ids[nids++] = id; c->ntok++; }
            }
            cpb[nc] = j;
            open_c[nopen] = nc; open_e[nopen] = nd->end; nopen++;
            parent = nc++;
        } else {
            for (uint32_t k = 0; k < nd->ntok; k++) {
                int32_t id = v->sorted_ids[nd->tok0 + k];
                if (v->eog[id]) continue;
                pt[npt].id = id; pt[npt].value = dd.value; pt[npt].n_remain = dd.n_remain;
                powner[npt++] = parent;
            }
        }
        dec[d] = dd; cpof[d] = parent;
        j++;
    }
    while (nopen > 1) { cpn[open_c[nopen - 1]].end = nc; nopen--; }
    cpn[0].end = nc;
    /* code points -> their rank among the distinct ones (a bitmap of the 2^22 values and per-word counts) */
    bits = calloc((size_t)1 << 16, sizeof(uint64_t));
    rank = malloc(((size_t)1 << 16) * sizeof(uint32_t));
    if (!bits || !rank) goto out;
    const uint32_t cpmask = (1u << GCP_DEPTH_SHIFT) - 1;
    for (uint32_t c = 1; c < nc; c++) { uint32_t cp = cpn[c].cpd & cpmask; bits[cp >> 6] |= 1ull << (cp & 63); }
    uint32_t nu = 0;
    for (uint32_t k = 0; k < (1u << 16); k++) { rank[k] = nu; nu += (uint32_t)__builtin_popcountll(bits[k]); }
    ucp = malloc((size_t)(nu ? nu : 1) * sizeof(uint32_t));
    if (!ucp) goto out;
    for (uint32_t k = 0, w = 0; k < (1u << 16); k++)
        for (uint64_t b = bits[k]; b; b &= b - 1) ucp[w++] = (k << 6) | (uint32_t)__builtin_ctzll(b);
    for (uint32_t c = 1; c < nc; c++) {
        uint32_t cp = cpn[c].cpd & cpmask, k = cp >> 6;
        uint32_t r = rank[k] + (uint32_t)__builtin_popcountll(bits[k] & ((1ull << (cp & 63)) - 1));
        cpn[c].cpd = (cpn[c].cpd & ~cpmask) | r;
    }
    /* partial tokens grouped by owner (a counting sort keeps trie order within an owner) */
    pstart = calloc((size_t)nc + 1, sizeof(uint32_t));
    parts = malloc((size_t)(npt ? npt : 1) * sizeof(gpart));
    if (!pstart || !parts) goto out;
    for (uint32_t k = 0; k < npt; k++) pstart[powner[k] + 1]++;
    for (uint32_t c = 0; c < nc; c++) {
        if (pstart[c + 1]) cpn[c].ntok |= GCP_HAS_PART;
        pstart[c + 1] += pstart[c];
    }
    for (uint32_t k = 0; k < npt; k++) parts[pstart[powner[k]]++] = pt[k];
    for (uint32_t c = nc; c > 0; c--) pstart[c] = pstart[c - 1];
    pstart[0] = 0;
    gcpnode *shrunk = realloc(cpn, (size_t)nc * sizeof(gcpnode));
    if (shrunk) cpn = shrunk;
    v->cpn = cpn; v->n_cpn = nc; v->cp_max_depth = maxd; v->cp_byte = cpb; v->cp_ids = ids;
    v->part_start = pstart; v->parts = parts; v->ucp = ucp; v->n_ucp = nu;
    cpn = NULL; cpb = NULL; ids = NULL; pstart = NULL; parts = NULL; ucp = NULL;
    rc = 0;
out:
    free(dec); free(cpof); free(open_c); free(open_e); free(cpn); free(cpb); free(ids); free(pt); free(powner);
    free(pstart); free(parts); free(ucp); free(bits); free(rank);
    return rc;
}

static void vocab_arrays_free(ub_gvocab *v) {
    free(v->bytes); free(v->off); free(v->eog); free(v->sorted_ids); free(v->leaf); free(v->nodes);
    free(v->eog_ids); free(v->cpn); free(v->cp_byte); free(v->cp_ids); free(v->part_start); free(v->parts);
    free(v->ucp);
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
    free(path); free(ps); ps = NULL;
    v->eog_ids = malloc((size_t)n_tokens * sizeof(int32_t));
    if (!v->eog_ids) goto fail;
    for (int32_t i = 0; i < n_tokens; i++) if (v->eog[i]) v->eog_ids[v->n_eog++] = i;
    if (build_cp_trie(v)) goto fail;
    return v;
fail:
    free(ps);
    vocab_arrays_free(v);
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
    vocab_arrays_free(v);
    pthread_mutex_destroy(&v->mu);
    free(v);
}

int32_t ub_gvocab_n_tokens(const ub_gvocab *v) { return v ? v->n_tokens : 0; }
int64_t ub_gvocab_n_nodes(const ub_gvocab *v) { return v ? (int64_t)v->n_nodes : 0; }
