/* Internal state of ub_tok and the helpers shared by the tokenizer's C files (not exported to Python). */
#ifndef TOK_INTERNAL_H
#define TOK_INTERNAL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include "ub_tok.h"

/* Strings: token texts (ids 0..n_tokens-1) followed by interned BPE merge sides that are not tokens. */
struct ub_tok {
    int32_t kind, n_tokens;
    uint8_t *blob; int64_t blob_len, blob_cap;        /* all string bytes */
    int64_t *str_off; int32_t *str_len;               /* [n_str] */
    int32_t n_str, cap_str;
    int32_t *slots; uint64_t smask;                   /* open-addressing string table: string ids, -1 empty */
    float *scores; int32_t *attrs;                    /* [n_tokens] */
    /* BPE merge ranks: key (left string id << 32 | right string id) -> rank */
    uint64_t *pkeys; int32_t *pranks; uint64_t pmask; int64_t n_pairs;
    ub_tok_config cfg;
    int finalized;
    /* special-token cache */
    int32_t *special; int32_t n_special;              /* ids, longest text first */
    int32_t *special_rank;                            /* [n_tokens]: index in special, -1 when not special */
    int32_t *special_lens; int32_t n_special_lens;    /* distinct text lengths of the specials, descending */
    uint8_t first1[32];                               /* bitmap: first byte of a 1-byte special */
    uint8_t *pair2;                                   /* bitmap[65536 bits]: first two bytes of longer specials */
    /* piece cache (token_to_piece, special = true) */
    uint8_t *pieces; int64_t *piece_off;              /* [n_tokens + 1] */
    int32_t byte_tok[256];                            /* SPM byte fallback id per byte, -1 none */
    int32_t single_byte_tok[256];                     /* BPE: id of the 1-byte text, -1 none */
};

/* growable int32 vector */
typedef struct { int32_t *v; int64_t n, cap; } ivec;
static inline int ivec_push(ivec *a, int32_t x) {
    if (a->n == a->cap) {
        int64_t nc = a->cap ? a->cap * 2 : 64;
        int32_t *nv = (int32_t *)realloc(a->v, (size_t)nc * sizeof(int32_t));
        if (!nv) return -1;
        a->v = nv; a->cap = nc;
    }
    a->v[a->n++] = x;
    return 0;
}

static inline uint64_t tok_hash(const uint8_t *s, int64_t n) {   /* FNV-1a, 64 bit */
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i < n; i++) { h ^= s[i]; h *= 1099511628211ull; }
    return h;
}

/* string id of text[0..n) (token or interned), -1 when absent */
int32_t tok_lookup(const ub_tok *t, const uint8_t *text, int64_t n);
/* token id of text[0..n) (string ids >= n_tokens are not tokens), -1 when absent */
static inline int32_t tok_token(const ub_tok *t, const uint8_t *text, int64_t n) {
    int32_t id = tok_lookup(t, text, n);
    return id < t->n_tokens ? id : -1;
}
int32_t tok_rank(const ub_tok *t, int32_t left, int32_t right);

static inline void tok_err(char *err, int32_t err_len, const char *msg) {
    if (err && err_len > 0) snprintf(err, (size_t)err_len, "%s", msg);
}

/* raw fragment / token list produced by the special-token partition */
typedef struct { int32_t id; int64_t off, len; } tok_frag;     /* id >= 0: token; id < 0: raw text span */
int tok_partition(const ub_tok *t, const uint8_t *text, int64_t len, int parse_special, const uint8_t *protect,
                  tok_frag **frags, int64_t *n_frags);

/* SPM encode of one escaped fragment s[n]; appends to out. 0, or -1 (message in err). */
int tok_spm_encode(const ub_tok *t, const uint8_t *s, int64_t n, ivec *out, char *err, int32_t err_len);
/* BPE encode of one raw fragment (pre-tokenizer + byte-level map + merges); appends to out. */
int tok_bpe_encode(const ub_tok *t, const uint8_t *s, int64_t n, ivec *out, char *err, int32_t err_len);
/* Pre-tokenizer: split cps[n] into words; writes word lengths (in code points) into *lens / *n_lens. */
int tok_pre_split(int32_t pre, const uint32_t *cps, int64_t n, int64_t **lens, int64_t *n_lens);

/* min-heap of merge candidates ordered by (key, left) */
typedef struct { double key; int32_t left, right; int64_t size; } tok_cand;
typedef struct { tok_cand *a; int64_t n, cap; } tok_heap;
int tok_heap_push(tok_heap *h, tok_cand c);
tok_cand tok_heap_pop(tok_heap *h);

/* symbol of a merge list: bytes [off, off + n) of the word, linked list over indices */
typedef struct { int64_t off, n; int64_t prev, next; int32_t sid; } tok_sym;

#endif
