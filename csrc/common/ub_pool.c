/* Persistent worker pool (see ub_pool.h). State is global and guarded by g_mu; g_use serialises jobs
 * (taken with trylock so a second concurrent caller never blocks: it runs its job inline). After a job a
 * worker spins for up to UB_POOL_SPIN_US watching g_pub (the published generation) before it sleeps on the
 * condition variable, and the caller, its own share done, spins as long for the workers to leave fn before
 * it sleeps on g_done: a decode step issues hundreds of sub-millisecond jobs back to back, and a condvar
 * wake-up per job would cost more than the job. UBATCH_POOL_SPIN_US overrides the spin time (0: none). */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* pthread_setname_np */
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "ub_pool.h"

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
static atomic_int g_active; /* participants (workers) inside fn (changed under g_mu, read also without) */
static ub_pool_fn g_fn;
static void *g_ctx;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static atomic_ullong g_pub;  /* copy of g_gen (and bumped on stop) readable without g_mu, for spinning */
static long g_spin_ns = 200000;
#define UB_POOL_SPIN_US 200

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Spin (unlocked) until the published generation differs from seen or the spin time is over. */
static void spin_wait(uint64_t seen) {
    if (g_spin_ns <= 0) return;
    const int64_t end = now_ns() + g_spin_ns;
    for (;;) {
        for (int i = 0; i < 64; i++) {
            if (atomic_load_explicit(&g_pub, memory_order_acquire) != seen) return;
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        }
        if (now_ns() > end) return;
    }
}

/* The caller, its share of a job done: spin (unlocked) while workers are inside fn, up to the spin time. */
static void spin_idle(void) {
    if (g_spin_ns <= 0 || atomic_load_explicit(&g_active, memory_order_acquire) == 0) return;
    const int64_t end = now_ns() + g_spin_ns;
    for (;;) {
        for (int i = 0; i < 64; i++) {
            if (atomic_load_explicit(&g_active, memory_order_acquire) == 0) return;
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        }
        if (now_ns() > end) return;
    }
}

/* arg: participant index w >= 1 cast through intptr_t. */
static void *worker_main(void *arg) {
    const int w = (int)(intptr_t)arg;
    uint64_t seen = UINT64_MAX; /* a new worker joins the job being published when it was created */
    pthread_mutex_lock(&g_mu);
    for (;;) {
        if (!g_stop && g_gen == seen && seen != UINT64_MAX) {
            pthread_mutex_unlock(&g_mu);
            spin_wait(seen);
            pthread_mutex_lock(&g_mu);
        }
        while (!g_stop && g_gen == seen) pthread_cond_wait(&g_wake, &g_mu);
        if (g_stop) break;
        seen = g_gen;
        if (!g_open || w > g_want) continue;
        ub_pool_fn fn = g_fn;
        void *ctx = g_ctx;
        atomic_fetch_add(&g_active, 1);
        pthread_mutex_unlock(&g_mu);
        fn(ctx, w);
        pthread_mutex_lock(&g_mu);
        if (atomic_fetch_sub(&g_active, 1) == 1) pthread_cond_signal(&g_done);
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
    /* The condition variables still count the parent's waiting workers as waiters; glibc's broadcast then waits
     * for them to leave (forever, from the second job on). Nobody else runs in the child yet: start them anew. */
    pthread_cond_init(&g_wake, NULL);
    pthread_cond_init(&g_done, NULL);
    g_n = 0;
    g_stop = 0;
    g_open = 0;
    atomic_store(&g_active, 0);
    pthread_mutex_unlock(&g_mu);
    pthread_mutex_unlock(&g_use);
}
static void register_hooks(void) {
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    atexit(ub_pool_shutdown);
    const char *e = getenv("UBATCH_POOL_SPIN_US");
    g_spin_ns = e ? atol(e) * 1000L : (long)UB_POOL_SPIN_US * 1000L;
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
#if defined(__linux__) && defined(__GLIBC__)
        pthread_setname_np(g_tid[g_n], "ubatch-pool"); /* before the call returns: what ps / top / tests see */
#endif
        g_n++;
    }
    g_fn = fn;
    g_ctx = ctx;
    g_want = n - 1 < g_n ? n - 1 : g_n;
    g_open = 1;
    g_gen++;
    atomic_store_explicit(&g_pub, g_gen, memory_order_release);
    pthread_cond_broadcast(&g_wake);
    pthread_mutex_unlock(&g_mu);

    fn(ctx, 0);

    spin_idle(); /* the workers' last tiles end within microseconds on decode-sized jobs: no sleep for them */
    pthread_mutex_lock(&g_mu);
    g_open = 0; /* late workers skip this job: the caller has already taken every tile */
    while (atomic_load(&g_active) > 0) pthread_cond_wait(&g_done, &g_mu);
    g_fn = NULL;
    g_ctx = NULL;
    pthread_mutex_unlock(&g_mu);
    pthread_mutex_unlock(&g_use);
}

void ub_pool_shutdown(void) {
    pthread_mutex_lock(&g_use);
    pthread_mutex_lock(&g_mu);
    g_stop = 1;
    atomic_fetch_add(&g_pub, 1); /* wakes spinning workers; they then see g_stop under g_mu */
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
