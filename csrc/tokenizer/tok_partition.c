/* Special-token partitioning (llama.cpp's tokenizer_st_partition): for every special token, longest text
 * first, cut each of its occurrences out of every raw fragment, left to right. A one-pass prefilter first
 * finds which specials occur in the text at all, so the exact loop runs only over those. */
#include "tok_internal.h"

static int c_isspace(uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

typedef struct { tok_frag *v; int64_t n, cap; } fvec;
static int fvec_push(fvec *a, int32_t id, int64_t off, int64_t len) {
    if (a->n == a->cap) {
        int64_t nc = a->cap ? a->cap * 2 : 16;
        tok_frag *nv = (tok_frag *)realloc(a->v, (size_t)nc * sizeof(tok_frag));
        if (!nv) return -1;
        a->v = nv; a->cap = nc;
    }
    a->v[a->n].id = id; a->v[a->n].off = off; a->v[a->n].len = len;
    a->n++;
    return 0;
}

/* leftmost start of pat[pn] inside text[lo, hi), or -1 */
static int64_t find_in(const uint8_t *text, int64_t lo, int64_t hi, const uint8_t *pat, int64_t pn) {
    if (pn <= 0 || hi - lo < pn) return -1;
    int64_t last = hi - pn;
    const uint8_t *p = text + lo;
    while (p <= text + last) {
        p = (const uint8_t *)memchr(p, pat[0], (size_t)(text + last - p + 1));
        if (!p) return -1;
        if (memcmp(p, pat, (size_t)pn) == 0) return p - text;
        p++;
    }
    return -1;
}

static int mark(uint8_t *present, ivec *ranks, int32_t k) {
    if (present[k]) return 0;
    present[k] = 1;
    return ivec_push(ranks, k);
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* present[n_special] (caller-zeroed) := 1 for each special whose text occurs somewhere in text[len]; their
 * cache ranks are appended to ranks (unsorted). 0, or -1 when out of memory. */
static int mark_present(const ub_tok *t, const uint8_t *text, int64_t len, uint8_t *present, ivec *ranks) {
    for (int64_t p = 0; p < len; p++) {
        uint8_t b = text[p];
        if (t->first1[b >> 3] & (1u << (b & 7))) {
            int32_t id = tok_token(t, text + p, 1);
            if (id >= 0 && t->special_rank[id] >= 0 && mark(present, ranks, t->special_rank[id])) return -1;
        }
        if (p + 1 >= len) continue;
        unsigned pr = ((unsigned)b << 8) | text[p + 1];
        if (!(t->pair2[pr >> 3] & (1u << (pr & 7)))) continue;
        for (int32_t k = 0; k < t->n_special_lens; k++) {
            int32_t L = t->special_lens[k];
            if (L < 2 || p + L > len) continue;
            int32_t id = tok_token(t, text + p, L);
            if (id >= 0 && t->special_rank[id] >= 0 && mark(present, ranks, t->special_rank[id])) return -1;
        }
    }
    return 0;
}

/* text[len] -> *frags[*n_frags] (malloc'd, caller frees): raw spans (id -1) and special tokens, in order.
 * 0, or -1 when out of memory. */
/* 1 when one of the bytes text[m .. m + n) is marked in protect[] */
static int overlaps(const uint8_t *protect, int64_t m, int64_t n) {
    for (int64_t k = 0; k < n; k++) if (protect[m + k]) return 1;
    return 0;
}

int tok_partition(const ub_tok *t, const uint8_t *text, int64_t len, int parse_special, const uint8_t *protect,
                  tok_frag **frags, int64_t *n_frags) {
    fvec cur = {0}, nxt = {0};
    uint8_t *present = NULL;
    ivec ranks = {0};
    *frags = NULL; *n_frags = 0;
    if (len == 0) return 0;
    if (fvec_push(&cur, -1, 0, len)) goto oom;
    if (t->n_special > 0) {
        present = (uint8_t *)calloc((size_t)t->n_special, 1);
        if (!present) goto oom;
        if (mark_present(t, text, len, present, &ranks)) goto oom;
        if (ranks.n > 1) qsort(ranks.v, (size_t)ranks.n, sizeof(int32_t), cmp_i32);   /* cache order: longest text first */
    }
    for (int64_t r = 0; r < ranks.n; r++) {
        int32_t sid = t->special[ranks.v[r]];
        int32_t attr = t->attrs[sid];
        if (!parse_special && (attr & (UB_ATTR_CONTROL | UB_ATTR_UNKNOWN))) continue;
        const int guard = protect != NULL && (attr & (UB_ATTR_CONTROL | UB_ATTR_UNKNOWN));
        const uint8_t *s = t->blob + t->str_off[sid];
        int64_t sl = t->str_len[sid];
        nxt.n = 0;
        for (int64_t f = 0; f < cur.n; f++) {
            tok_frag fr = cur.v[f];
            if (fr.id >= 0) { if (fvec_push(&nxt, fr.id, 0, 0)) goto oom; continue; }
            int64_t lo = fr.off, hi = fr.off + fr.len, from = lo;
            for (;;) {
                int64_t m = find_in(text, from, hi, s, sl);
                if (m >= 0 && guard && overlaps(protect, m, sl)) { from = m + 1; continue; }   /* text here */
                if (m < 0) { if (hi > lo && fvec_push(&nxt, -1, lo, hi - lo)) goto oom; break; }
                int64_t left = m - lo;
                if (attr & UB_ATTR_LSTRIP) while (left > 0 && c_isspace(text[lo + left - 1])) left--;
                if (left > 0 && fvec_push(&nxt, -1, lo, left)) goto oom;
                if (fvec_push(&nxt, sid, 0, 0)) goto oom;
                if (m + sl >= hi) break;
                lo = m + sl;
                if (attr & UB_ATTR_RSTRIP) while (lo < hi && c_isspace(text[lo])) lo++;
                if (lo >= hi) break;
                from = lo;
            }
        }
        fvec tmp = cur; cur = nxt; nxt = tmp;
    }
    free(present); free(nxt.v); free(ranks.v);
    *frags = cur.v; *n_frags = cur.n;
    return 0;
oom:
    free(present); free(cur.v); free(nxt.v); free(ranks.v);
    return -1;
}
