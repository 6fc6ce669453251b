/* Internal state of the batch allocator (not exported to Python). */
#ifndef UB_ALLOC_STATE_H
#define UB_ALLOC_STATE_H

#include "ub_alloc.h"

/* The normalised batch produced by one successful init, plus the split cursor state.
 * Every array is owned by this struct (freed by ub_norm_free). n = n_tokens.
 *   token int32[n] (NULL: no token ids)      embd float[n*n_embd] (NULL: no embeddings)
 *   pos int32[n_pos*n] section-major         output int8[n] (0/1)
 *   seq_off int32[n+1], seq_id int32[...]    ids ascending and distinct per row
 *   seq_set uint64[n*4]                      row sets
 *   tok_group int32[n]                       index of the row's set among the distinct sets
 *   grp_off int32[n_groups+1], grp_tok int32[n]   rows of each distinct set, ascending (seq_set_map)
 *   grp_cur int32[n_groups]                  first position in grp_tok not yet known to be used
 *   used uint8[n], out_ids int32[n], scratch int32[8n]  split state and work space */
typedef struct ub_norm {
    int32_t n_tokens, n_embd, n_pos, n_seq_max;
    int32_t n_outputs, has_cpl;
    int32_t *token;
    float *embd;
    int32_t *pos;
    int8_t *output;
    int32_t *seq_off, *seq_id;
    uint64_t *seq_set;
    int32_t n_groups;
    int32_t groups_built;                    /* groups are built by the first split_equal / split_seq */
    int32_t *tok_group, *grp_off, *grp_tok, *grp_cur;
    uint64_t present[UB_SEQ_WORDS];          /* union of every row's set */
    int32_t seq_pmin[UB_MAX_SEQ], seq_pmax[UB_MAX_SEQ];   /* section-0 range per seq (-1: absent) */
    uint8_t *used;
    int32_t n_used, first_unused;
    int32_t *out_ids;
    int32_t n_out_ids;
    int32_t *scratch;
    /* capacities of the buffers above (they are reused by later inits and only grow) */
    size_t cap_tokens, cap_ids, cap_embd, cap_pos;
    int32_t *token_buf;
    float *embd_buf;
} ub_norm;

struct ub_alloc {
    int32_t n_pos_per_embd;
    ub_norm *cur;                 /* NULL before the first successful init */
    ub_norm *spare;               /* buffers of the previous batch, reused by the next init */
    char err[UB_ERR_LEN];
    char warn[UB_ERR_LEN];
};

void ub_norm_free(ub_norm *nb);
/* Grows nb's buffers for n rows, n_ids seq ids, n_pos sections, n_embd floats per row; 0 on OOM. */
int ub_norm_reserve(ub_norm *nb, size_t n, size_t n_ids, size_t n_pos, size_t n_embd);
/* Sorts ids[0..n) ascending in place, drops duplicates, returns the new length. */
int32_t ub_sort_unique(int32_t *ids, int32_t n);
/* Fills tok_group / grp_off / grp_tok of nb from its seq sets (work space: nb->scratch). */
void ub_build_groups(ub_norm *nb);
void ub_norm_split_reset(ub_norm *nb);
int ub_alloc_fail(ub_alloc *a, int code, const char *fmt, ...);

#endif
