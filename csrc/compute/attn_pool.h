/* A persistent pool of worker threads for the compute kernels (internal, not exported to Python except
 * through ub_attention_shutdown in ub_compute.h). Workers are created lazily, reused across calls, and
 * joined by ub_pool_shutdown (also registered with atexit). One job runs on the pool at a time: a call
 * made while another thread's job is running does its work on the calling thread alone. After fork() the
 * child starts with an empty pool. */
#ifndef UB_ATTN_POOL_H
#define UB_ATTN_POOL_H

#define UB_POOL_MAX 64 /* most participants of one job (calling thread included) */

/* Work function of a job: called once per participant, w = 0 on the calling thread, w in [1, n) on
 * workers. Participants must share the work dynamically (e.g. a tile counter): any of them may start
 * late or not at all, and the job is complete when fn has returned on every participant that started. */
typedef void (*ub_pool_fn)(void *ctx, int w);

/* Run fn(ctx, w) on up to n participants (n <= UB_POOL_MAX; n <= 1 runs fn(ctx, 0) inline) and return
 * when all that started have finished. ctx is only touched during the call. */
void ub_pool_run(ub_pool_fn fn, void *ctx, int n);

/* Stop and join every worker (waits for a running job); the next ub_pool_run starts fresh workers. */
void ub_pool_shutdown(void);

#endif
