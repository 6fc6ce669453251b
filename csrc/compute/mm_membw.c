/* A STREAM-like read kernel for the benchmarks (`ubatch bench matmul`): how fast this machine streams
 * memory into the cores, the bound of a B = 1 decode step (every weight byte read once). */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "ub_common.h"
#include "ub_matmul.h"
#include "ub_pool.h"

#define MB_CHUNK ((int64_t)1 << 20)

typedef struct {
    const uint8_t *buf;
    int64_t bytes;
    atomic_llong next;
    atomic_ullong sum;
} mb_job;

/* ctx: an mb_job (buf: bytes readable bytes, caller-owned); w unused: 1 MB chunks from a counter. Four
 * independent 8-byte accumulators per participant (two loads a cycle keep every core's load ports busy). */
static void mb_work(void *ctx, int w) {
    (void)w;
    mb_job *J = ctx;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (;;) {
        const int64_t c = atomic_fetch_add(&J->next, 1) * MB_CHUNK;
        if (c >= J->bytes) break;
        const int64_t len = J->bytes - c < MB_CHUNK ? J->bytes - c : MB_CHUNK;
        const uint8_t *p = J->buf + c;
        int64_t i = 0;
        for (; i + 32 <= len; i += 32) {
            uint64_t v[4];
            memcpy(v, p + i, 32);
            s0 += v[0];
            s1 += v[1];
            s2 += v[2];
            s3 += v[3];
        }
        for (; i < len; i++) s0 += p[i];
    }
    atomic_fetch_add(&J->sum, s0 + s1 + s2 + s3);
}

/* buf: bytes >= 0 readable bytes (caller-owned, read only); *sum (written): the sum of its 8-byte words (so
 * that the reads cannot be optimised away). n_threads participants share 1 MB chunks. Returns UB_OK or
 * UB_E_ARG. */
int ub_mem_read(const uint8_t *buf, int64_t bytes, int32_t n_threads, uint64_t *sum) {
    if (bytes < 0 || n_threads < 1 || !sum || (bytes && !buf)) return UB_E_ARG;
    mb_job J;
    J.buf = buf;
    J.bytes = bytes;
    atomic_init(&J.next, 0);
    atomic_init(&J.sum, 0);
    int nt = n_threads > UB_POOL_MAX ? UB_POOL_MAX : n_threads;
    ub_pool_run(mb_work, &J, nt);
    *sum = atomic_load(&J.sum);
    return UB_OK;
}
