/* The one persistent pool of worker threads of the C core, shared by every multi-threaded kernel (matmul,
 * attention, the gated activations, the memory-bandwidth probe, the sampler). Workers are created lazily,
 * reused across calls, and joined by ub_pool_shutdown (also registered with atexit, so the pool never outlives
 * the process's exit handlers). One job runs on the pool at a time: a call made while another thread's job is
 * running does its work on the calling thread alone. After fork() the child starts with an empty pool. On
 * Linux the workers are named "ubatch-pool" (/proc/self/task/<tid>/comm).
 * Results never depend on the pool: every job shares its work out dynamically and each output element is
 * computed by one participant with a fixed order of operations. */
#ifndef UB_POOL_H
#define UB_POOL_H

/* cdef:begin */
/* Stop and join every worker of the pool (waits for a running job); the next multi-threaded call starts fresh
 * workers. Safe to call any time and more than once. Buffers: none. */
void ub_pool_shutdown(void);
/* cdef:end */

#define UB_POOL_MAX 64 /* most participants of one job (calling thread included) */

/* Work function of a job: called once per participant, w = 0 on the calling thread, w in [1, n) on
 * workers. Participants must share the work dynamically (e.g. a tile counter): any of them may start
 * late or not at all, and the job is complete when fn has returned on every participant that started. */
typedef void (*ub_pool_fn)(void *ctx, int w);

/* Run fn(ctx, w) on up to n participants (n <= UB_POOL_MAX; n <= 1 runs fn(ctx, 0) inline) and return
 * when all that started have finished. ctx (caller-owned) is only touched during the call. */
void ub_pool_run(ub_pool_fn fn, void *ctx, int n);

#endif
