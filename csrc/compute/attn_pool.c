/* Persistent worker pool (see attn_pool.h). State is global and guarded by g_mu; g_use serialises jobs
 * (taken with trylock so a second concurrent caller never blocks: it runs its job inline). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "attn_pool.h"

static pthread_mutex_t g_use = PTHREAD_MUTEX_INITIALIZER; /* held by the thread whose job owns the pool */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;  /* guards every field below */
static pthread_cond_t g_wake = PTHREAD_COND_INITIALIZER;  /* workers wait here for a job or stop */
static pthread_cond_t g_done = PTHREAD_COND_INITIALIZER;  /* the caller waits here for active == 0 */
static pthread_t g_tid[UB_POOL_MAX];
static int g_n;           /* workers alive: participants 1..g_n */
static int g_stop;        /* set by shutdown */
static uint64_t g_gen;    /* job generation, bumped per job */
static int g_open;        /* the current job still accepts participants */
static int g_want;        /* participants 1..g_want may join the current job */
static int g_active;      /* participants (workers) inside fn */
static ub_pool_fn g_fn;
static void *g_ctx;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* arg: participant index w >= 1 cast through intptr_t. */
static void *worker_main(void *arg) {
    const int w = (int)(intptr_t)arg;
    uint64_t seen = UINT64_MAX; /* a new worker joins the job being published when it was created */
    pthread_mutex_lock(&g_mu);
    for (;;) {
        while (!g_stop && g_gen == seen) pthread_cond_wait(&g_wake, &g_mu);
        if (g_stop) break;
        seen = g_gen;
        if (!g_open || w > g_want) continue;
        ub_pool_fn fn = g_fn;
        void *ctx = g_ctx;
        g_active++;
        pthread_mutex_unlock(&g_mu);
        fn(ctx, w);
        pthread_mutex_lock(&g_mu);
        if (--g_active == 0) pthread_cond_signal(&g_done);
    }
    pthread_mutex_unlock(&g_mu);
    return NULL;
}

static void fork_prepare(void) {
    pthread_mutex_lock(&g_use);
    pthread_mutex_lock(&g_mu);
}
static void fork_parent(void) {
    pthread_mutex_unlock(&g_mu);
    pthread_mutex_unlock(&g_use);
}
static void fork_child(void) { /* the workers do not exist in the child */
    g_n = 0;
    g_stop = 0;
    g_open = 0;
    g_active = 0;
    pthread_mutex_unlock(&g_mu);
    pthread_mutex_unlock(&g_use);
}
static void register_hooks(void) {
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    atexit(ub_pool_shutdown);
}

void ub_pool_run(ub_pool_fn fn, void *ctx, int n) {
    if (n > UB_POOL_MAX) n = UB_POOL_MAX;
    if (n <= 1 || pthread_mutex_trylock(&g_use) != 0) {
        fn(ctx, 0);
        return;
    }
    pthread_once(&g_once, register_hooks);
    pthread_mutex_lock(&g_mu);
    while (g_n < n - 1) { /* grow lazily; on failure run with the workers we have */
        if (pthread_create(&g_tid[g_n], NULL, worker_main, (void *)(intptr_t)(g_n + 1)) != 0) break;
        g_n++;
    }
    g_fn = fn;
    g_ctx = ctx;
    g_want = n - 1 < g_n ? n - 1 : g_n;
    g_open = 1;
    g_gen++;
    pthread_cond_broadcast(&g_wake);
    pthread_mutex_unlock(&g_mu);

    fn(ctx, 0);

    pthread_mutex_lock(&g_mu);
    g_open = 0; /* late workers skip this job: the caller has already taken every tile */
    while (g_active > 0) pthread_cond_wait(&g_done, &g_mu);
    g_fn = NULL;
    g_ctx = NULL;
    pthread_mutex_unlock(&g_mu);
    pthread_mutex_unlock(&g_use);
}

void ub_pool_shutdown(void) {
    pthread_mutex_lock(&g_use);
    pthread_mutex_lock(&g_mu);
    g_stop = 1;
    pthread_cond_broadcast(&g_wake);
    const int n = g_n;
    pthread_mutex_unlock(&g_mu);
    for (int i = 0; i < n; i++) pthread_join(g_tid[i], NULL);
    pthread_mutex_lock(&g_mu);
    g_n = 0;
    g_stop = 0;
    pthread_mutex_unlock(&g_mu);
    pthread_mutex_unlock(&g_use);
}
