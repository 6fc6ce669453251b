/* Internals of the grammar engine (see ub_grammar.h): the parser's output, the interned stacks and stack sets,
 * the vocabulary trie. */
#ifndef GRAM_INTERNAL_H
#define GRAM_INTERNAL_H

#include "ub_grammar.h"
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef struct { uint32_t type, value; } gelem;

/* Growable element array (one rule while parsing). */
typedef struct { gelem *a; int64_t n, cap; } gvec;

/* Parser output: rules[r] (END-terminated when defined, n == 0 when not), symbol names -> ids with
 * std::map's semantics (emplace keeps, [] overwrites; ids are the map's size at insertion). */
typedef struct {
    gvec *rules; int64_t n_rules, cap_rules;
    char **names; uint32_t *ids; int64_t n_names, cap_names;   /* insertion order; lookup by hash */
    int64_t *hslot; int64_t hcap;                               /* open addressing: index into names, -1 empty */
    const ub_tok *tok; int syntax_only;
    const char *src;
    char *err; int32_t err_len; int64_t err_pos; int failed;
} gparser;

int gram_parse(gparser *p, const char *src);          /* 0 ok, -1 error (message in p->err) */
void gram_parser_free(gparser *p);
int64_t gram_symbol_find(const gparser *p, const char *name);   /* id or -1 */
/* llama.cpp's rule checks after parsing and its left-recursion detection, plus a complete one (rules that may
 * derive the empty string through other rules): 0 ok, -1 with a message. */
int gram_check(gparser *p, int64_t root, char *err, int32_t err_len);

/* Trie node, preorder: children of node i are i+1 .. end-1 (by subtree). */
typedef struct {
    uint32_t end;        /* one past the last node of the subtree */
    uint32_t tok0;       /* tokens ending here: sorted_ids[tok0 .. tok0 + ntok) */
    uint32_t ntok;
    uint32_t depth;
    uint8_t byte;
    uint8_t pad;
} gnode;

/* Code-point trie node (the byte trie decoded from a clean UTF-8 state, invalid sequences dropped), preorder:
 * node 0 = the root, a node's subtree is [i, end). A node is a byte node where a code point completes. */
typedef struct {
    uint32_t end;        /* one past the last node of the subtree */
    uint32_t cpd;        /* index of its code point in ucp (bits 0..21) | depth in code points << 22 */
    uint32_t tok0;       /* tokens (no end-of-generation one) whose piece ends here: cp_ids[tok0 .. tok0 + ntok) */
    uint32_t ntok;       /* bit 31: tokens ending in a partial UTF-8 sequence after this node's code point follow
                          * (parts[part_start[i] .. part_start[i + 1])) */
} gcpnode;
#define GCP_DEPTH_SHIFT 22
#define GCP_MAX_DEPTH 1023u
#define GCP_HAS_PART 0x80000000u
/* A token that ends in a partial UTF-8 sequence (value, n_remain > 0) after its last complete code point. */
typedef struct { int32_t id; uint32_t value; int32_t n_remain; } gpart;

struct ub_gvocab {
    int32_t n_tokens;
    uint8_t *eog;            /* n_tokens */
    uint8_t *bytes; int64_t *off;   /* pieces cut at the first NUL */
    gnode *nodes; uint32_t n_nodes, max_depth;
    int32_t *sorted_ids;     /* token ids in trie order */
    uint32_t *leaf;          /* node of each token (0 = empty piece: the root) */
    int32_t *eog_ids; int32_t n_eog;  /* the end-of-generation tokens */
    /* the code-point trie (NULL when a piece is longer than GCP_MAX_DEPTH code points: the byte walk only) */
    gcpnode *cpn; uint32_t n_cpn, cp_max_depth;
    uint32_t *ucp; uint32_t n_ucp;   /* the distinct code points of the trie, ascending */
    uint32_t *cp_byte;       /* byte-trie node of each code-point node */
    int32_t *cp_ids;         /* token ids in code-point trie order */
    uint32_t *part_start;    /* [n_cpn + 1] */
    gpart *parts;
    int refs;
    pthread_mutex_t mu;
};
void gvocab_retain(ub_gvocab *v);

/* A set's facts, computed when the set is interned. */
typedef struct {
    int64_t off; int32_t n;  /* stack ids in gram->set_pool[off .. off + n), ascending */
    uint8_t has_empty, n_char_top_nz, has_tok_top, pad;
    int32_t chars_only;      /* the set of its char-top stacks (-1 until computed) */
    int32_t *tr;             /* int32[n_classes] transitions by code-point class (-2 unknown), NULL until first
                              * use or when the grammar has more than GRAM_DENSE_CLASSES classes */
    uint8_t *mask;           /* cached allowed set (partial UTF-8 empty), NULL if none */
} gset;

struct ub_grammar {
    gelem *el; int64_t n_el;           /* all rules, each END-terminated */
    int64_t *rule_start; int32_t n_rules;
    int32_t root;
    ub_gvocab *vocab;
    /* stacks: node k = (elem[k], parent[k]); 0 is the empty stack */
    uint32_t *st_elem; int32_t *st_parent; int64_t n_st, cap_st;
    int64_t *st_hash; int64_t st_hcap;
    /* stack sets: 0 is the empty set */
    gset *sets; int64_t n_sets, cap_sets;
    int32_t *set_pool; int64_t pool_n, pool_cap;
    int64_t *set_hash; int64_t set_hcap;
    /* code-point classes: code points no char element tells apart (the same side of every value and range
     * bound) share a class, hence every transition; class(cp) = #breakpoints <= cp */
    uint32_t *brk; int32_t n_brk, n_classes;
    uint32_t cls_ascii[128];
    uint32_t *ucls;                      /* class of each of vocab->ucp, NULL without a code-point trie */
    /* transitions (set, class) -> set of grammars with more than GRAM_DENSE_CLASSES classes */
    uint64_t *tr_key; int32_t *tr_val; int64_t tr_n, tr_cap;
    int64_t tr_bytes;                    /* bytes of the sets' dense transition tables */
    int64_t mask_bytes;
    int no_mask_cache;                   /* benchmarks: every apply walks the trie */
    int32_t init_set;
    /* scratch of advance */
    int32_t *seen; int64_t seen_cap; int32_t seen_gen;
    int32_t *todo; int64_t todo_cap;
    int32_t *acc; int64_t acc_n, acc_cap;
    int failed;                          /* a limit was hit inside the current call */
    int refs;
    pthread_mutex_t mu;
};

struct ub_gstate {
    ub_grammar *g;
    int32_t set;
    uint32_t pval;
    int32_t prem;
};

/* gram_stacks.c (callers hold g->mu) */
int gram_stacks_init(ub_grammar *g);
void gram_stacks_free(ub_grammar *g);
int32_t gram_initial_set(ub_grammar *g);                       /* -1 on a limit */
int32_t gram_trans(ub_grammar *g, int32_t set, uint32_t cp);    /* -1 on a limit; 0 = dead */
/* the same for code point cp of class cls (cls = gram_class(g, cp)) */
int32_t gram_trans_cls(ub_grammar *g, int32_t set, uint32_t cls, uint32_t cp);
int gram_classes_init(ub_grammar *g);                          /* brk, cls_ascii, ucls: 0 or -1 (memory) */
#define GRAM_DENSE_CLASSES 2048
#define GRAM_DENSE_BUDGET ((int64_t)32 << 20)
int32_t gram_chars_only(ub_grammar *g, int32_t set);            /* -1 on a limit */
int32_t gram_token_step(ub_grammar *g, int32_t set, int32_t token, int32_t cp_set);  /* union with cp_set */
int gram_match_char(const gelem *pos, uint32_t chr, const gelem **after);
int gram_match_partial(const gelem *pos, uint32_t value, int32_t n_remain);
int gram_set_partial_ok(ub_grammar *g, int32_t set, uint32_t value, int32_t n_remain);
int gram_set_token_ok(ub_grammar *g, int32_t set, int32_t token);

static inline uint32_t gram_class(const ub_grammar *g, uint32_t cp) {
    if (cp < 128) return g->cls_ascii[cp];
    int32_t lo = 0, hi = g->n_brk;            /* first breakpoint > cp */
    while (lo < hi) { int32_t m = (lo + hi) >> 1; if (g->brk[m] <= cp) lo = m + 1; else hi = m; }
    return (uint32_t)lo;
}

/* gram_trans through the set's dense transition table when the entry is there (the walks' hot path). */
static inline int32_t gram_trans_fast(ub_grammar *g, int32_t set, uint32_t cp) {
    uint32_t cls = gram_class(g, cp);
    const int32_t *tr = g->sets[set].tr;
    if (tr && tr[cls] != -2) return tr[cls];
    return gram_trans_cls(g, set, cls, cp);
}

/* The UTF-8 decoder of llama.cpp's decode_utf8(piece, partial), one byte at a time. */
typedef struct { uint32_t value; int32_t n_remain; uint8_t phase_a; uint8_t invalid; } gdec;
/* Feeds byte b; returns 1 and sets *cp when a code point completes, 0 otherwise (d->invalid set on error). */
static inline int gdec_byte(gdec *d, uint8_t b, uint32_t *cp) {
    static const int8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4};
    if (d->phase_a && d->n_remain > 0) {
        if ((b >> 6) != 2) { d->invalid = 1; d->value = 0; d->n_remain = -1; return 0; }
        d->value = (d->value << 6) + (b & 0x3F);
        if (--d->n_remain == 0) { d->phase_a = 0; *cp = d->value; return 1; }
        return 0;
    }
    d->phase_a = 0;
    if (d->n_remain <= 0) {
        int n = lookup[b >> 4] - 1;
        if (n < 0) { d->invalid = 1; d->value = 0; d->n_remain = -1; return 0; }
        d->value = b & ((1u << (7 - n)) - 1);
        d->n_remain = n;
        if (n == 0) { *cp = d->value; return 1; }
        return 0;
    }
    d->value = (d->value << 6) + (b & 0x3F);
    if (--d->n_remain == 0) { *cp = d->value; return 1; }
    return 0;
}
static inline gdec gdec_start(uint32_t value, int32_t n_remain) {
    gdec d; d.value = value; d.n_remain = n_remain; d.phase_a = n_remain > 0; d.invalid = 0; return d;
}

#endif
