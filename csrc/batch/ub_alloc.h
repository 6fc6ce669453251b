/* The batch allocator (llama_batch_allocr): validation/normalisation of a batch (init) and the three
 * split strategies. One handle per Python BatchAllocator; all state is owned by the handle. */
#ifndef UB_ALLOC_H
#define UB_ALLOC_H

#include "ub_common.h"

/* cdef:begin */
/* A borrowed view of the caller's batch (nothing is kept after ub_alloc_init returns).
 *   token     int32[n_tokens]                or NULL
 *   embd      float[n_tokens * n_embd]       or NULL
 *   pos       int32[n_pos * pos_stride]      section j of row i at pos[j*pos_stride + i]; NULL = automatic
 *   seq_off   int32[n_tokens + 1]            row i's ids are seq_id[seq_off[i] .. seq_off[i+1]) (any order,
 *   seq_id    int32[seq_off[n_tokens]]       duplicates allowed); seq_off == NULL: every row is {0}
 *   output    int8[n_tokens]                 or NULL (last row only, or all when output_all)
 *   row_kind  uint8[n_tokens]                bit0 = row has a token id, bit1 = row has an embedding; NULL =
 *                                            every row has exactly what the non-NULL arrays say */
typedef struct ub_batch_in {
    int32_t n_tokens;
    int32_t n_embd;
    int32_t n_pos;
    int32_t pos_stride;
    const int32_t *token;
    const float *embd;
    const int32_t *pos;
    const int32_t *seq_off;
    const int32_t *seq_id;
    const int8_t *output;
    const uint8_t *row_kind;
} ub_batch_in;

typedef struct ub_alloc ub_alloc;

ub_alloc *ub_alloc_new(int32_t n_pos_per_embd);
void ub_alloc_free(ub_alloc *a);
const char *ub_alloc_error(const ub_alloc *a);   /* message of the last failure ("" if none) */
const char *ub_alloc_warning(const ub_alloc *a); /* warning of the last successful init ("" if none) */

/* init: validate + normalise. mem_min/mem_max are int32[n_seq_max] (the memory's seq_pos_min/max,
 * -1 = empty) or NULL when there is no memory. n_vocab < 0 skips the token range check; n_vocab = 0
 * makes every token id invalid (as llama.cpp with an empty vocabulary).
 * Returns UB_OK, UB_E_BATCH (message in ub_alloc_error) or UB_E_NOMEM; on failure the previous state
 * is kept untouched. */
int ub_alloc_init(ub_alloc *a, const ub_batch_in *b, int32_t n_vocab, int32_t n_seq_max, int32_t output_all,
                  const int32_t *mem_min, const int32_t *mem_max);

/* Which sequences a batch holds, before init (so the caller asks its memory only about those, as
 * llama.cpp). ids int32[n_seq_max] and cpl int32[n_seq_max] (caller-owned) receive, ascending, the ids
 * present in some row and (*n_cpl of them) the ids sharing a row with another id (coupled). Ids outside
 * [0, n_seq_max) are skipped (init refuses them). Returns the number of present ids, or -1 for a bad
 * argument. O(total ids). */
int32_t ub_alloc_batch_seqs(const ub_batch_in *b, int32_t n_seq_max, int32_t *ids, int32_t *cpl, int32_t *n_cpl);

/* out int32[n_seq_max] (caller-owned) = -1 everywhere, then out[ids[k]] = vals[k] (int64) for k < n (ids in
 * [0, n_seq_max), from ub_alloc_batch_seqs): a memory's answers for some sequences as init's dense array.
 * Returns -1, or the first k whose value is outside [-1, INT32_MAX]. */
int32_t ub_alloc_fill_bounds(int32_t *out, int32_t n_seq_max, const int32_t *ids, const int64_t *vals, int32_t n);

int ub_alloc_split_reset(ub_alloc *a);
/* Each split returns a new ubatch (caller frees it) or NULL; *status tells NULL apart:
 * UB_OK (nothing left), UB_E_ARG / UB_E_NOMEM / UB_E_SPLIT (message in ub_alloc_error). */
ub_ubatch *ub_alloc_split_simple(ub_alloc *a, int32_t n_ubatch, int32_t *status);
ub_ubatch *ub_alloc_split_equal(ub_alloc *a, int32_t n_ubatch, int32_t sequential, int32_t n_keep_tail,
                                int32_t strict, int32_t *status);
ub_ubatch *ub_alloc_split_seq(ub_alloc *a, int32_t n_ubatch, int32_t *status);
/* The whole loop in one call: split_reset, then kind (0 simple, 1 equal, 2 seq) until nothing is left.
 * *out: malloc'ed array of *n_out new ubatches (free each with ub_ubatch_free, the array with
 * ub_alloc_free_ubatch_array). On failure: the status, nothing kept, the allocator split-reset. */
int ub_alloc_split_all(ub_alloc *a, int32_t kind, int32_t n_ubatch, int32_t sequential, int32_t n_keep_tail,
                       int32_t strict, ub_ubatch ***out, int32_t *n_out);
void ub_alloc_free_ubatch_array(ub_ubatch **arr);

/* Read-only accessors. The array pointers stay valid until the next init / free. */
int32_t ub_alloc_n_tokens(const ub_alloc *a);
int32_t ub_alloc_n_used(const ub_alloc *a);
int32_t ub_alloc_n_outputs(const ub_alloc *a);
int32_t ub_alloc_n_out_ids(const ub_alloc *a);
const int32_t *ub_alloc_out_ids(const ub_alloc *a);       /* int32[n_out_ids], emission order */
const int32_t *ub_alloc_pos(const ub_alloc *a);           /* int32[n_pos * n_tokens] normalised positions */
const int8_t *ub_alloc_output(const ub_alloc *a);         /* int8[n_tokens] normalised output flags */
const int32_t *ub_alloc_seq_off(const ub_alloc *a);       /* int32[n_tokens + 1] */
const int32_t *ub_alloc_seq_id(const ub_alloc *a);        /* normalised ids: ascending, distinct per row */
int32_t ub_alloc_n_pos(const ub_alloc *a);
int32_t ub_alloc_seq_pos_min(const ub_alloc *a, int32_t s);  /* -1 if s absent from the batch */
int32_t ub_alloc_seq_pos_max(const ub_alloc *a, int32_t s);
int32_t ub_alloc_has_coupled(const ub_alloc *a);
/* cdef:end */

#endif
