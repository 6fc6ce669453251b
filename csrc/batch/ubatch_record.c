/* The ubatch record: one allocation holding every array of a ubatch (see ub_common.h).
 *
 * Freed records are kept in a small cache (at most REC_CACHE_N blocks, REC_CACHE_BYTES in all) and reused
 * by the next allocation they fit: a plan of large ubatches (2048 tokens = ~128 kB, malloc's mmap
 * threshold) otherwise pays for fresh pages on every plan, as glibc maps or trims that memory each time. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ub_common.h"

static size_t align8(size_t n) { return (n + 7u) & ~(size_t)7u; }

#define REC_HDR 16                      /* bytes before the struct: the block's capacity (size_t) */
#define REC_CACHE_N 16
#define REC_CACHE_BYTES ((size_t)16 << 20)
static pthread_mutex_t g_rec_lock = PTHREAD_MUTEX_INITIALIZER;
static char *g_rec_blk[REC_CACHE_N];    /* cached blocks (header first), owned by the cache */
static int g_rec_n;
static size_t g_rec_bytes;

/* A block of at least sz bytes after the header: the smallest cached one that fits, else a new malloc.
 * Returns a pointer to the block start (header), or NULL. */
static char *rec_block(size_t sz) {
    char *blk = NULL;
    pthread_mutex_lock(&g_rec_lock);
    int best = -1;
    for (int i = 0; i < g_rec_n; i++) {
        size_t cap = *(size_t *)g_rec_blk[i];
        if (cap >= sz && cap <= 2 * sz + 4096 && (best < 0 || cap < *(size_t *)g_rec_blk[best])) best = i;
    }
    if (best >= 0) {
        blk = g_rec_blk[best];
        g_rec_bytes -= *(size_t *)blk;
        g_rec_blk[best] = g_rec_blk[--g_rec_n];
    }
    pthread_mutex_unlock(&g_rec_lock);
    if (blk) return blk;
    if (sz > SIZE_MAX - REC_HDR) return NULL;
    blk = malloc(REC_HDR + sz);
    if (blk) *(size_t *)blk = sz;
    return blk;
}

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
    char *blk = rec_block(sz);  /* the filler writes every array; only the struct is cleared here */
    if (!blk) return NULL;
    char *mem = blk + REC_HDR;
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

/* Frees a record made by ub_ubatch_alloc (NULL is fine): into the cache while it has room, else free(). */
void ub_ubatch_free(ub_ubatch *ub) {
    if (!ub) return;
    char *blk = (char *)ub - REC_HDR;
    size_t cap = *(size_t *)blk;
    pthread_mutex_lock(&g_rec_lock);
    if (g_rec_n < REC_CACHE_N && g_rec_bytes + cap <= REC_CACHE_BYTES) {
        g_rec_blk[g_rec_n++] = blk;
        g_rec_bytes += cap;
        blk = NULL;
    }
    pthread_mutex_unlock(&g_rec_lock);
    free(blk);
}
