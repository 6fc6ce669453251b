/* The ubatch record: one allocation holding every array of a ubatch (see ub_common.h). */
#include <stdlib.h>
#include <string.h>

#include "ub_common.h"

static size_t align8(size_t n) { return (n + 7u) & ~(size_t)7u; }

/* Sizes every array of the record from (n_tokens, n_ids, n_pos, n_embd) and carves them out of a
 * single block placed right after the struct (array contents are left to the filler). Caller owns the result (ub_ubatch_free). */
ub_ubatch *ub_ubatch_alloc(int32_t n_tokens, int32_t n_ids, int32_t n_pos, int32_t n_embd, int with_token) {
    if (n_tokens < 0 || n_ids < 0 || n_pos < 1 || n_embd < 0) return NULL;
    size_t nt = (size_t)n_tokens;
    if (n_embd > 0 && nt > (SIZE_MAX / 16) / (size_t)n_embd) return NULL;   /* embd bytes would overflow size_t */
    size_t sz = align8(sizeof(ub_ubatch));
    size_t o_token = sz;  sz += with_token ? align8(nt * 4) : 0;
    size_t o_embd = sz;   sz += align8(nt * (size_t)n_embd * 4);
    size_t o_pos = sz;    sz += align8(nt * (size_t)n_pos * 4);
    size_t o_nsid = sz;   sz += align8(nt * 4);
    size_t o_off = sz;    sz += align8((nt + 1) * 4);
    size_t o_sid = sz;    sz += align8((size_t)n_ids * 4);
    size_t o_set = sz;    sz += nt * UB_SEQ_WORDS * 8;
    size_t o_out = sz;    sz += align8(nt);
    size_t o_bidx = sz;   sz += align8(nt * 4);
    size_t o_unq = sz;    sz += UB_MAX_SEQ * 4;
    char *mem = malloc(sz);     /* the filler writes every array; only the header is cleared here */
    if (!mem) return NULL;
    ub_ubatch *ub = (ub_ubatch *)mem;
    memset(ub, 0, sizeof(*ub));
    ub->n_tokens = n_tokens;
    ub->n_pos = n_pos;
    ub->n_embd = n_embd;
    ub->token = with_token ? (int32_t *)(mem + o_token) : NULL;
    ub->embd = n_embd > 0 ? (float *)(mem + o_embd) : NULL;
    ub->pos = (int32_t *)(mem + o_pos);
    ub->n_seq_id = (int32_t *)(mem + o_nsid);
    ub->seq_off = (int32_t *)(mem + o_off);
    ub->seq_id = (int32_t *)(mem + o_sid);
    ub->seq_set = (uint64_t *)(mem + o_set);
    ub->output = (int8_t *)(mem + o_out);
    ub->batch_idxs = (int32_t *)(mem + o_bidx);
    ub->seq_id_unq = (int32_t *)(mem + o_unq);
    for (int s = 0; s < UB_MAX_SEQ; s++) ub->seq_idx[s] = -1;
    return ub;
}

/* Frees a record made by ub_ubatch_alloc (NULL is fine). */
void ub_ubatch_free(ub_ubatch *ub) { free(ub); }
