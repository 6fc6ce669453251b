/* Shared types: limits, status codes, the 256-bit sequence set and the ubatch record. */
#ifndef UB_COMMON_H
#define UB_COMMON_H

#include <stdint.h>
#include <stddef.h>

#define UB_SEQ_WORDS 4          /* 256 bits = 4 x uint64 */
#define UB_ERR_LEN 1024

/* cdef:begin */
/* Limits (read by Python as lib.UB_MAX_SEQ / lib.UB_MAX_TOKENS: one definition, here).
 * UB_MAX_SEQ = LLAMA_MAX_SEQ: width of a sequence set, size of seq_idx.
 * UB_MAX_TOKENS: largest batch init accepts (rows); keeps every int32 index expression in the allocator
 * (2*n for the hash table, 8*n of scratch) far from overflow. */
#define UB_MAX_SEQ 256
#define UB_MAX_TOKENS 268435456

/* Status codes returned by the C entry points. */
enum {
    UB_OK = 0,
    UB_E_BATCH = -1,      /* invalid batch (llama.cpp: init failed, decode returns -1) */
    UB_E_NOMEM = -2,      /* allocation failed */
    UB_E_ARG = -3,        /* invalid argument (bad n_ubatch, bad id, ...) */
    UB_E_ORDER = -4,      /* a call made in the wrong order (split before init, nested transaction, ...) */
    UB_E_SPLIT = 1,       /* the tokens cannot be cut into ubatches */
    UB_E_KVFULL = 2       /* no KV slot for a ubatch */
};

/* One micro-batch. All arrays live in one malloc'd block owned by the record itself and are
 * released by ub_ubatch_free(); nothing points into the allocator that produced it.
 *   token      int32[n_tokens]               NULL when the batch has no token ids
 *   embd       float[n_tokens * n_embd]      NULL when the batch has no embeddings
 *   pos        int32[n_pos * n_tokens]       section-major: pos[j*n_tokens + r]
 *   n_seq_id   int32[n_tokens]               ids per row
 *   seq_off    int32[n_tokens + 1]           row r's ids are seq_id[seq_off[r] .. seq_off[r+1])
 *   seq_id     int32[seq_off[n_tokens]]      ascending, distinct per row (seq_id[seq_off[r]] = primary)
 *   seq_set    uint64[n_tokens * 4]          row r's ids as a 256-bit set
 *   output     int8[n_tokens]
 *   batch_idxs int32[n_tokens]               batch row each ubatch row came from
 *   seq_id_unq int32[n_seqs_unq]             distinct ids of the ubatch, ascending
 *   seq_idx    int32[256]                    index into seq_id_unq, -1 where absent */
typedef struct ub_ubatch {         /* the first 7 int32 fields are read as one int32[7] (ubatch_view.py) */
    int32_t n_tokens;
    int32_t n_seq_tokens;
    int32_t n_seqs;
    int32_t n_seqs_unq;
    int32_t n_pos;
    int32_t n_embd;
    int32_t equal_seqs;
    int32_t *token;
    float *embd;
    int32_t *pos;
    int32_t *n_seq_id;
    int32_t *seq_off;
    int32_t *seq_id;
    uint64_t *seq_set;
    int8_t *output;
    int32_t *batch_idxs;
    int32_t *seq_id_unq;
    int32_t seq_idx[256];
} ub_ubatch;

void ub_ubatch_free(ub_ubatch *ub);

/* One candidate token as llama.cpp's llama_token_data lays it out (id, logit, p): the arrays the drop-in's
 * samplers (compat/) and the grammar (grammar/, ub_gstate_apply_td) work on in place. */
typedef struct { int32_t id; float logit; float p; } ub_token_data;
/* cdef:end */

/* --- internal helpers (not exported to Python) --- */
static inline int ub_set_has(const uint64_t *s, int id) { return (int)((s[id >> 6] >> (id & 63)) & 1u); }
static inline void ub_set_add(uint64_t *s, int id) { s[id >> 6] |= (uint64_t)1 << (id & 63); }
static inline int ub_set_disjoint(const uint64_t *a, const uint64_t *b) {
    return !((a[0] & b[0]) | (a[1] & b[1]) | (a[2] & b[2]) | (a[3] & b[3]));
}
static inline int ub_set_subset(const uint64_t *a, const uint64_t *b) { /* a ⊆ b */
    return !((a[0] & ~b[0]) | (a[1] & ~b[1]) | (a[2] & ~b[2]) | (a[3] & ~b[3]));
}
static inline int ub_set_equal(const uint64_t *a, const uint64_t *b) {
    return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
}

/* Allocate a ubatch record with room for n_tokens rows, n_ids seq ids in total, n_pos sections and
 * n_embd floats per row (0: no embd); with_token = 0 leaves token NULL. Returns NULL on OOM. */
ub_ubatch *ub_ubatch_alloc(int32_t n_tokens, int32_t n_ids, int32_t n_pos, int32_t n_embd, int with_token);

#endif
