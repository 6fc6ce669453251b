/* ub_matmul driver, get_rows and the back-end choice.
 *
 * How a result is made batch-invariant (y[i][j] bitwise independent of n, of the thread count, of which
 * thread computed it and of the tiling):
 *   1. activation row i is quantised from x[i] alone (mm_act.c: per-row, per-block scales);
 *   2. y[i][j] is the output of one dot-kernel call over the whole of K for weight row j, with one
 *      accumulator per activation row, blocks in index order and a fixed final reduction (mm_generic.c,
 *      mm_avx2*.c); a kernel called for a tile of nr <= UB_MM_RT rows performs, for each row, exactly the
 *      operations it performs for that row alone (the tile only shares the weight loads);
 *   3. threads split the output columns (weight rows) into chunks taken from a shared counter, never K,
 *      so no partial sums are ever combined across threads;
 *   4. the back-end (generic, avx2, avxvnni or avx512) is fixed for the process unless ub_mm_set_backend changes it.
 * Work of one call: participants first quantise activation rows (row counter), wait until all rows are
 * quantised, then take column chunks; inside a chunk, row tiles of UB_MM_RT rows sweep the chunk's weight
 * rows, so each weight block is loaded from memory once per chunk and reused from cache by every tile. A GEMM
 * tile with a row preparer (ub_mm_gemm.prep / fnr: the Q8_0 tiles, avx512 mm_q8_tile.h and avx2
 * mm_q8_tile_avx2.c) has its activation rows also prepared in phase 1, and inside a chunk each of its column
 * tiles sweeps all of the call's whole row tiles (the tile's weight rows stay in L1); the rows left over then
 * run as for the other tiles. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ub_common.h"
#include "ub_matmul.h"
#include "mm_internal.h"
#include "rp_internal.h"
#include "ub_pool.h"

static int g_backend = -1;
static pthread_once_t g_be_once = PTHREAD_ONCE_INIT;
static const char *const g_be_names[UB_MM_N_BACKENDS] = {"generic", "avx2", "avxvnni", "avx512"};

int ub_mm_env_backend(void) {
    const char *e = getenv("UBATCH_KERNELS");
    if (!e || !*e || strcmp(e, "auto") == 0) return -1;
    for (int b = 0; b < UB_MM_N_BACKENDS; b++)
        if (strcmp(e, g_be_names[b]) == 0) return b;
    return -2;
}

/* the best back-end the CPU has (the order of preference: avx512, avxvnni, avx2, generic) */
static int best_backend(void) {
    const int m = ub_mm_cpu_backends();
    static const int pref[] = {UB_MM_AVX512, UB_MM_AVXVNNI, UB_MM_AVX2};
    for (int i = 0; i < 3; i++)
        if (m & (1 << pref[i])) return pref[i];
    return UB_MM_GENERIC;
}

static int auto_backend(void) {
    const int e = ub_mm_env_backend();
    if (e >= 0 && (ub_mm_cpu_backends() & (1 << e))) return e;
    return best_backend();
}
static void init_backend(void) { g_backend = auto_backend(); }

int ub_mm_backend(void) {
    pthread_once(&g_be_once, init_backend);
    return g_backend;
}

int ub_mm_set_backend(int32_t b) {
    pthread_once(&g_be_once, init_backend);
    if (b < 0) g_backend = auto_backend();
    else if (b < UB_MM_N_BACKENDS && (ub_mm_cpu_backends() & (1 << b))) g_backend = b;
    else return UB_E_ARG;
    return g_backend;
}

/* The GEMM tile of weight type t on back-end be ({NULL} when it has none). */
static ub_mm_gemm gemm_for(int be, const ub_mm_type *t) {
    ub_mm_gemm g = {0};
    if (be == UB_MM_AVX512) g = ub_mm_gemm_avx512(t->type);
    if (be == UB_MM_AVXVNNI) g = ub_mm_gemm_avxvnni(t->type);
    if (be == UB_MM_AVX2) g = ub_mm_gemm_avx2(t->type);
    if (!g.fn && !g.fn1 && !g.fnr && be != UB_MM_GENERIC) /* NVFP4 / Q1_0 / Q2_0 decode tiles (avxvnni: the AVX2 build) */
        g = be == UB_MM_AVX512 ? ub_mm_gemm_fp4_avx512(t->type) : ub_mm_gemm_fp4_avx2(t->type);
    return g;
}

/* The dot kernel of weight type t on back-end be: the back-end's own, else the next simpler one's. */
static ub_mm_dot_fn dot_for(int be, const ub_mm_type *t) {
    ub_mm_dot_fn f = 0;
    if (be == UB_MM_AVX512) f = ub_mm_dot_avx512(t->type);
    if (be == UB_MM_AVX512 && !f) f = ub_mm_dot_fp4_avx512(t->type);
    else if (be == UB_MM_AVXVNNI) f = ub_mm_dot_avxvnni(t->type);
    if (!f && be != UB_MM_GENERIC) f = ub_mm_dot_avx2(t->type);
    return f ? f : t->dot_generic;
}

int ub_mm_type_info(int32_t type, int32_t *blck, int32_t *bytes) {
    const ub_mm_type *t = ub_mm_find(type);
    if (!t) return 0;
    *blck = t->blck;
    *bytes = t->bytes;
    return ub_mm_type_ready(t) ? 1 : 2;
}

static int act_blck(int32_t act) { return act == UB_ACT_Q8_K ? 256 : (act == UB_ACT_Q8_0 || act == UB_ACT_Q8_1) ? 32 : 1; }

int64_t ub_mm_act_bytes(int32_t type, int64_t k) {
    const ub_mm_type *t = ub_mm_find(type);
    if (!t || k <= 0 || k % act_blck(t->act)) return -1;
    return ub_mm_act_row_bytes(t->act, k);
}

static void quant_row(int32_t act, const float *x, int64_t k, uint8_t *out) {
    if (ub_mm_backend() != UB_MM_GENERIC) ub_mm_quant_row_avx2(act, x, k, out);
    else ub_mm_quant_row_generic(act, x, k, out);
}

int ub_mm_quantize_act(const float *x, int64_t k, int32_t type, uint8_t *out) {
    const ub_mm_type *t = ub_mm_find(type);
    if (!t || !x || !out || k <= 0 || k % act_blck(t->act)) return UB_E_ARG;
    quant_row(t->act, x, k, out);
    return UB_OK;
}

/* One weight of a job: its bytes, output, dot kernel, chunking, and which quantised activation it reads. */
typedef struct {
    const uint8_t *w;
    float *y;
    int64_t n_rows, nb, row_bytes, ch, n_chunks, c_first; /* c_first: the job-wide index of its first chunk */
    int32_t slot;                                          /* index of its activation kind in the job */
    ub_mm_dot_fn dot;
    ub_mm_gemm gemm; /* the back-end's GEMM tile for the type, or fn NULL */
    const struct ub_rp *rp; /* a repacked weight (then w is its GGUF-layout tail), or NULL */
    ub_rp_panel_fn panel;   /* its panel kernel */
} mm_part;

typedef struct {
    const float *x;
    int64_t n, k, n_chunks;
    int32_t n_parts, n_acts;
    int32_t act[UB_MM_MAXW];  /* the distinct activation kinds */
    int64_t arb[UB_MM_MAXW];  /* bytes of one activation row of each kind */
    uint8_t *xq[UB_MM_MAXW];  /* n quantised rows of each kind */
    ub_mm_prep_fn prep[UB_MM_MAXW]; /* or NULL: the kind's rows are also prepared for a GEMM tile ... */
    int64_t pnb[UB_MM_MAXW], prb[UB_MM_MAXW]; /* ... (pnb blocks a row) into prb bytes each ... */
    uint8_t *xp[UB_MM_MAXW];        /* ... into xp */
    mm_part part[UB_MM_MAXW];
    int avx2;
    atomic_llong q_next, q_done, c_next;
} mm_job;

/* Columns [j0, j1) of a repacked weight P->rp for all of J's activation rows: the panel kernel for the
 * columns held in panels (j0 is a panel boundary: the chunk is a whole number of panels), the dot kernel on
 * the GGUF tail for the rest; row tiles of UB_MM_RT rows sweep the chunk's panels. */
static void run_repacked(const mm_job *J, const mm_part *P, int64_t j0, int64_t j1) {
    const struct ub_rp *rp = P->rp;
    const int64_t arb = J->arb[P->slot], pr = rp->L->rows, pb = rp->nb * rp->L->block_bytes;
    const int64_t jp = j1 < rp->n_prow ? j1 : rp->n_prow;
    for (int64_t i0 = 0; i0 < J->n;) {
        const int nr = (int)(J->n - i0 < UB_MM_RT ? J->n - i0 : UB_MM_RT);
        const uint8_t *a = J->xq[P->slot] + i0 * arb;
        float *yy = P->y + i0 * P->n_rows;
        for (int64_t j = j0; j < jp; j += pr) P->panel(rp->nb, rp->panels + (j / pr) * pb, a, arb, nr, yy + j, P->n_rows);
        for (int64_t j = j0 > rp->n_prow ? j0 : rp->n_prow; j < j1; j++)
            P->dot(P->nb, rp->tail + (j - rp->n_prow) * P->row_bytes, a, arb, nr, yy + j, P->n_rows);
        i0 += nr;
    }
}

/* ctx: an mm_job (its buffers owned by ub_matmul_multi's caller, xq by ub_matmul_multi); w: the participant
 * (unused: rows and chunks come from the job's counters). */
static void mm_work(void *ctx, int w) {
    (void)w;
    mm_job *J = ctx;
    const int64_t nq = J->n * J->n_acts;
    for (;;) { /* phase 1: quantise activation rows (row i of kind a = item a * n + i) */
        const long long t = atomic_fetch_add(&J->q_next, 1);
        if (t >= nq) break;
        const int64_t a = t / J->n, i = t % J->n;
        if (J->avx2) ub_mm_quant_row_avx2(J->act[a], J->x + i * J->k, J->k, J->xq[a] + i * J->arb[a]);
        else ub_mm_quant_row_generic(J->act[a], J->x + i * J->k, J->k, J->xq[a] + i * J->arb[a]);
        if (J->prep[a]) J->prep[a](J->pnb[a], J->xq[a] + i * J->arb[a], J->xp[a] + i * J->prb[a]);
        atomic_fetch_add(&J->q_done, 1);
    }
    for (int spins = 0; atomic_load(&J->q_done) < nq; spins++) { /* rows taken by others are being quantised */
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        if ((spins & 63) == 63) sched_yield();
    }
    int p = 0;
    for (;;) { /* phase 2: column chunks, the weights' chunks numbered one after the other */
        const long long c = atomic_fetch_add(&J->c_next, 1);
        if (c >= J->n_chunks) break;
        while (c >= J->part[p].c_first + J->part[p].n_chunks) p++; /* c only grows within a participant */
        const mm_part *P = &J->part[p];
        const int64_t arb = J->arb[P->slot];
        const int64_t j0 = (c - P->c_first) * P->ch, j1 = j0 + P->ch < P->n_rows ? j0 + P->ch : P->n_rows;
        if (P->rp) {
            run_repacked(J, P, j0, j1);
            continue;
        }
        int64_t i0 = 0;
        if (P->gemm.fnr) { /* the rows of whole tiles over prepared rows: each column tile sweeps them all */
            const int gr = P->gemm.gr, gc = P->gemm.gc;
            const int64_t nt = J->n / gr * gr;
            int64_t j = j0;
            for (; j + gc <= j1; j += gc)
                P->gemm.fnr(P->nb, P->w + j * P->row_bytes, P->row_bytes, J->xp[P->slot], J->prb[P->slot], nt, P->y + j, P->n_rows);
            for (; j < j1; j++)
                for (int64_t r0 = 0; r0 < nt; r0 += gr)
                    P->dot(P->nb, P->w + j * P->row_bytes, J->xq[P->slot] + r0 * arb, arb, gr, P->y + r0 * P->n_rows + j, P->n_rows);
            i0 = nt; /* the rows left: below */
        }
        while (i0 < J->n) {
            const uint8_t *a = J->xq[P->slot] + i0 * arb;
            float *yy = P->y + i0 * P->n_rows;
            if (P->gemm.fn1 && J->n - i0 < P->gemm.gr) { /* rows fewer than a tile: one row at a time, gc columns */
                const int gc = P->gemm.gc;
                int64_t j = j0;
                for (; j + gc <= j1; j += gc)
                    P->gemm.fn1(P->nb, P->w + j * P->row_bytes, P->row_bytes, a, arb, yy + j, P->n_rows);
                for (; j < j1; j++) P->dot(P->nb, P->w + j * P->row_bytes, a, arb, 1, yy + j, P->n_rows);
                i0 += 1;
                continue;
            }
            if (P->gemm.fn && J->n - i0 >= P->gemm.gr) { /* GEMM tiles of gr rows x gc columns, the rest by dots */
                const int gr = P->gemm.gr, gc = P->gemm.gc;
                int64_t j = j0;
                for (; j + gc <= j1; j += gc)
                    P->gemm.fn(P->nb, P->w + j * P->row_bytes, P->row_bytes, a, arb, yy + j, P->n_rows);
                for (; j < j1; j++) P->dot(P->nb, P->w + j * P->row_bytes, a, arb, gr, yy + j, P->n_rows);
                i0 += gr;
                continue;
            }
            const int nr = (int)(J->n - i0 < UB_MM_RT ? J->n - i0 : UB_MM_RT);
            for (int64_t j = j0; j < j1; j++) P->dot(P->nb, P->w + j * P->row_bytes, a, arb, nr, yy + j, P->n_rows);
            i0 += nr;
        }
    }
}

/* Bytes of weight rows per thread chunk. Decode-sized calls (n <= UB_MM_RT), and the GEMM tiles over prepared
 * rows (ub_mm_gemm.fnr: each column tile sweeps every row, so nothing is reused across a chunk), stream each
 * weight byte once:
 * 1 MB chunks keep each thread's stream long enough for the hardware prefetchers (16 KB chunks taken in turn
 * by two threads ran a DRAM-sized lm head slower on 2 threads than on 1: Gemma's 178 MB Q8_0 head 11.1 ms vs
 * 9.4 ms, 5.4 ms with 1 MB chunks; Zen 4, quiet). Calls with more rows reuse each chunk from cache. The
 * per-element arithmetic does not depend on the chunking. */
#define UB_MM_CHUNK_DECODE 1048576
#define UB_MM_CHUNK_BATCH 131072

/* x: float[n][k]; w[p]: n_rows[p] rows of weight type types[p] (w_bytes[p] bytes); y[p]: float[n][n_rows[p]];
 * all caller-owned (see ub_matmul.h). */
int ub_matmul_multi(const float *x, int64_t n, int64_t k, int32_t n_w, const uint8_t *const *w,
                    const int64_t *w_bytes, const int32_t *types, const int64_t *n_rows, float *const *y,
                    int32_t n_threads) {
    if (n_w < 1 || n_w > UB_MM_MAXW || !w || !w_bytes || !types || !n_rows || !y) return UB_E_ARG;
    if (n < 0 || k <= 0 || n_threads < 1 || k > ((int64_t)1 << 40) || n > ((int64_t)1 << 40)) return UB_E_ARG;
    mm_job J;
    memset(&J, 0, sizeof J);
    int64_t work = 0, total_rows = 0;
    for (int32_t p = 0; p < n_w; p++) {
        const ub_mm_type *t = ub_mm_find(types[p] & ~(int32_t)UB_MM_REPACKED);
        if (!t || !ub_mm_type_ready(t) || n_rows[p] < 0 || n_rows[p] > ((int64_t)1 << 40) || k % t->blck) return UB_E_ARG;
        const int64_t nb = k / t->blck, row_bytes = nb * t->bytes;
        if (w_bytes[p] != row_bytes * n_rows[p]) return UB_E_ARG;
        if (n_rows[p] && n && (!w[p] || !y[p])) return UB_E_ARG;
        const struct ub_rp *rp = 0;
        if (types[p] & UB_MM_REPACKED) { /* w[p] is a ub_rp: its fields must agree with the arguments */
            rp = ub_rp_check(w[p], types[p], n_rows[p], k, w_bytes[p]);
            if (!rp) return UB_E_ARG;
        }
        int32_t slot = 0;
        while (slot < J.n_acts && J.act[slot] != t->act) slot++;
        if (slot == J.n_acts) J.act[J.n_acts++] = t->act;
        mm_part *P = &J.part[p];
        P->w = w[p];
        P->y = y[p];
        P->n_rows = n_rows[p];
        P->nb = t->blck == 1 ? k : nb;
        P->row_bytes = row_bytes;
        P->slot = slot;
        P->rp = rp;
        work += w_bytes[p];
        total_rows += n_rows[p];
    }
    if (n == 0 || total_rows == 0) return UB_OK;
    if (!x) return UB_E_ARG;
    const int be = ub_mm_backend();
    J.avx2 = be != UB_MM_GENERIC; /* every SIMD back-end quantises with the AVX2 code (the generic bytes) */
    for (int32_t p = 0; p < n_w; p++) { /* chunk of weight rows: 1 MB for decode-sized calls, 128 KB when many rows reuse it (above) */
        mm_part *P = &J.part[p];
        const ub_mm_type *t = ub_mm_find(types[p] & ~(int32_t)UB_MM_REPACKED);
        P->dot = dot_for(be, t);
        P->gemm = gemm_for(be, t);
        if (P->rp) P->panel = ub_rp_panel_for(be, P->rp), P->gemm.fn = P->gemm.fn1 = 0, P->gemm.gc = P->rp->L->rows;
        if (P->gemm.fn && (P->gemm.gr > UB_MM_RT || n < P->gemm.gr)) P->gemm.fn = 0; /* edges by dots of <= RT rows */
        if (P->gemm.gr > UB_MM_RT) P->gemm.fn1 = 0;
        if (P->gemm.fnr && (P->gemm.gr > UB_MM_RT || n < P->gemm.gr)) P->gemm.fnr = 0;
        if (!P->gemm.fnr) P->gemm.prep = 0;
        if (P->gemm.prep) { /* one preparer per activation kind (a second, different one: that part's tile goes) */
            if (!J.prep[P->slot])
                J.prep[P->slot] = P->gemm.prep, J.pnb[P->slot] = P->nb, J.prb[P->slot] = P->gemm.prep_bytes(P->nb);
            else if (J.prep[P->slot] != P->gemm.prep) P->gemm.fnr = 0, P->gemm.prep = 0;
        }
        int64_t ch = P->row_bytes ? (n <= UB_MM_RT || P->gemm.fnr ? UB_MM_CHUNK_DECODE : UB_MM_CHUNK_BATCH) / P->row_bytes : 1;
        const int64_t bal = (P->n_rows + 4 * (int64_t)n_threads - 1) / (4 * (int64_t)n_threads);
        if (ch > bal) ch = bal;
        if (P->gemm.fn || P->gemm.fn1 || P->rp) ch = (ch + P->gemm.gc - 1) / P->gemm.gc * P->gemm.gc; /* whole tiles / panels */
        if (ch < 1) ch = 1;
        P->ch = ch;
        P->n_chunks = (P->n_rows + ch - 1) / ch;
        P->c_first = J.n_chunks;
        J.n_chunks += P->n_chunks;
    }
    int64_t q_bytes = 0;
    for (int32_t a = 0; a < J.n_acts; a++) {
        J.arb[a] = ub_mm_act_row_bytes(J.act[a], k);
        q_bytes += (J.arb[a] * n + 63) & ~(int64_t)63;
        if (J.prep[a]) q_bytes += J.prb[a] * n;
    }
    uint8_t *xq = malloc((size_t)q_bytes + 64);
    if (!xq) return UB_E_NOMEM;
    int64_t off = 0;
    for (int32_t a = 0; a < J.n_acts; a++) {
        J.xq[a] = xq + off;
        off += (J.arb[a] * n + 63) & ~(int64_t)63;
        if (J.prep[a]) J.xp[a] = xq + off, off += J.prb[a] * n;
    }
    J.x = x;
    J.n = n;
    J.k = k;
    J.n_parts = n_w;
    atomic_init(&J.q_next, 0);
    atomic_init(&J.q_done, 0);
    atomic_init(&J.c_next, 0);
    /* small calls on fewer threads: waking a worker (and waiting for it) costs more than ~64 KB of work */
    work *= (n + UB_MM_RT - 1) / UB_MM_RT;
    int nt = n_threads;
    if ((int64_t)nt > 1 + work / 65536) nt = (int)(1 + work / 65536);
    if (nt > J.n_chunks) nt = (int)J.n_chunks;
    ub_pool_run(mm_work, &J, nt);
    free(xq);
    return UB_OK;
}

int ub_matmul(const float *x, int64_t n, int64_t k, const uint8_t *w, int64_t w_bytes, int32_t type,
              int64_t n_rows, float *y, int32_t n_threads) {
    return ub_matmul_multi(x, n, k, 1, &w, &w_bytes, &type, &n_rows, &y, n_threads);
}

int ub_get_rows(const uint8_t *w, int64_t w_bytes, int32_t type, int64_t n_rows, int64_t n_cols,
                const int32_t *ids, int64_t m, float *out) {
    const ub_mm_type *t = ub_mm_find(type & ~(int32_t)UB_MM_REPACKED);
    if (!t || !ub_mm_type_ready(t) || n_rows < 0 || n_cols <= 0 || m < 0 || n_cols % t->blck) return UB_E_ARG;
    const int64_t nb = n_cols / t->blck, row_bytes = nb * t->bytes;
    if (w_bytes != row_bytes * n_rows) return UB_E_ARG;
    if (m == 0) return UB_OK;
    if (!w || !ids || !out) return UB_E_ARG;
    for (int64_t r = 0; r < m; r++)
        if (ids[r] < 0 || ids[r] >= n_rows) return UB_E_ARG;
    if (type & UB_MM_REPACKED) {
        const struct ub_rp *rp = ub_rp_check(w, type, n_rows, n_cols, w_bytes);
        return rp ? ub_rp_get_rows(rp, t, ids, m, out) : UB_E_ARG;
    }
    for (int64_t r = 0; r < m; r++) {
        const uint8_t *row = w + (int64_t)ids[r] * row_bytes;
        float *o = out + r * n_cols;
        if (type == UB_T_F32) {
            memcpy(o, row, (size_t)n_cols * 4);
            continue;
        }
        for (int64_t b = 0; b < nb; b++) t->deq(row + b * t->bytes, o + b * t->blck);
    }
    return UB_OK;
}
