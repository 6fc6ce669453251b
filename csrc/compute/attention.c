/* Attention over a KV cache with an online (streaming) softmax. Work is cut into tiles
 * (stream group k, block of tokens, block of hb kv heads) that the calling thread and the persistent pool's
 * workers (attn_pool.c) take from a shared counter. Per kv head, the query heads that read it are handled
 * together (GQA: every K/V row is loaded once for all n_head / n_head_kv of them); grouping several kv
 * heads in a tile makes it read whole cell rows of the cache ([cell][n_head_kv][head_dim]) in order. A tile
 * walks its stream's cells [0, n_kv) in chunks of UB_ATTN_CB, skipping chunks that none of its tokens can
 * see (found once per call by a vectorised scan of the mask). Every output row is computed by exactly one
 * thread, by the same operations whatever the tiling: results do not depend on n_threads. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "ub_common.h"
#include "ub_compute.h"
#include "attn_kernels.h"
#include "attn_pool.h"

#define UB_ATTN_MAXQ 32 /* most queries per tile when grouping kv heads */

/* ---- generic (plain C) inner loops; contracts in attn_kernels.h ---- */

void ub_attn_scores_generic(const float *const *q, int nq, const float *k, int64_t ks, int cb, int hd, float *s) {
    for (int i = 0; i < nq; i++) {
        const float *restrict qi = q[i];
        for (int c = 0; c < cb; c++) {
            const float *restrict kc = k + c * ks;
            float a = 0.0f;
            for (int d = 0; d < hd; d++) a += qi[d] * kc[d];
            s[i * UB_ATTN_CB + c] = a;
        }
    }
}

int ub_attn_softmax_generic(float *s, int nq, const float *const *mrow, int cb, float scale, float *m, float *l,
                            float *corr) {
    int any = 0;
    for (int i = 0; i < nq; i++) {
        float *si = s + i * UB_ATTN_CB;
        float mx = -INFINITY;
        for (int c = 0; c < cb; c++) {
            const float x = mrow[i][c] == -INFINITY ? -INFINITY : si[c] * scale + mrow[i][c];
            si[c] = x;
            if (x > mx) mx = x;
        }
        if (mx == -INFINITY) {
            for (int c = 0; c < cb; c++) si[c] = 0.0f;
            corr[i] = 1.0f;
            continue;
        }
        any = 1;
        const float mn = mx > m[i] ? mx : m[i];
        corr[i] = mn == m[i] ? 1.0f : expf(m[i] - mn);
        float sum = 0.0f;
        for (int c = 0; c < cb; c++) {
            const float p = expf(si[c] - mn); /* exp(-inf) = 0 */
            si[c] = p;
            sum += p;
        }
        l[i] = l[i] * corr[i] + sum;
        m[i] = mn;
    }
    return any;
}

void ub_attn_pv_generic(const float *p, int nq, const float *corr, const float *v, int64_t vs, int cb, int hd,
                        float *const *acc) {
    for (int i = 0; i < nq; i++) {
        float *restrict a = acc[i];
        if (corr[i] != 1.0f)
            for (int d = 0; d < hd; d++) a[d] *= corr[i];
        for (int c = 0; c < cb; c++) {
            const float pc = p[i * UB_ATTN_CB + c];
            if (pc == 0.0f) continue;
            const float *restrict vr = v + c * vs;
            for (int d = 0; d < hd; d++) a[d] += pc * vr[d];
        }
    }
}

void ub_attn_h2f_generic(const uint16_t *src, int64_t ss, int cb, int hd, float *dst) {
    for (int c = 0; c < cb; c++)
        for (int d = 0; d < hd; d++) dst[(int64_t)c * hd + d] = ub_h2f(src[c * ss + d]);
}

void ub_attn_scan_generic(const float *row, int n, uint8_t *flags) {
    for (int c = 0; c < n; c++)
        if (row[c] != -INFINITY) flags[c / UB_ATTN_CB] |= 1;
}

/* ---- the call ---- */

static pthread_once_t g_cpu_once = PTHREAD_ONCE_INIT;
static int g_cpu = 0;
static void detect_cpu(void) {
    g_cpu = ub_attn_cpu();
    const char *e = getenv("UBATCH_ATTN_GENERIC"); /* testing aid: force the plain C loops */
    if (e && e[0] == '1') g_cpu = 0;
}

typedef struct {
    float *block;       /* the allocation; everything below points into it */
    float *kc, *vc;     /* [CB][hd]: keys / values of a chunk converted from half */
    float *s;           /* [QB][CB] */
    float *acc;         /* [nq_max][hd] */
    float *m, *l;       /* [nq_max] */
    float *corr;        /* [QB] */
    const float **qp;   /* [nq_max] */
    float **ap;         /* [nq_max] */
    const float **mr;   /* [nq_max]: mask row of each query's token */
} attn_scratch;

typedef struct {
    const float *q;
    const void *k, *v;
    int32_t k_type, v_type;
    const int32_t *streams;
    const float *mask;
    float *out;
    int32_t ns, per, n_head, n_head_kv, hd, kv_size, n_kv;
    int32_t r, tb, n_tb, n_chunks; /* GQA ratio, tokens per tile, token blocks per group, chunks per row */
    int32_t hb;                    /* kv heads per tile (a divisor of n_head_kv) */
    int64_t n_tiles;
    float scale;
    const uint8_t *vis; /* [ns][n_tb][n_chunks]: 1 when a token of the block sees a cell of the chunk */
    ub_attn_scores_fn scores;
    ub_attn_softmax_fn softmax;
    ub_attn_pv_fn pv;
    ub_attn_h2f_fn h2f;
    attn_scratch *sc; /* [n_part] */
    pthread_mutex_t lock;
    int64_t next;
} attn_job;

static size_t scratch_floats(int hd, int nq_max) {
    return (size_t)hd * UB_ATTN_CB * 2 + (size_t)UB_ATTN_QB * UB_ATTN_CB + (size_t)nq_max * hd +
           (size_t)nq_max * 2 + UB_ATTN_QB + (size_t)nq_max * 3 * (sizeof(void *) / sizeof(float) + 1);
}

/* Carve one participant's scratch out of f (scratch_floats(hd, nq_max) floats). */
static void scratch_init(attn_scratch *sc, float *f, int hd, int nq_max) {
    sc->block = f;
    sc->kc = f; f += (size_t)hd * UB_ATTN_CB;
    sc->vc = f; f += (size_t)hd * UB_ATTN_CB;
    sc->s = f; f += (size_t)UB_ATTN_QB * UB_ATTN_CB;
    sc->acc = f; f += (size_t)nq_max * hd;
    sc->m = f; f += nq_max;
    sc->l = f; f += nq_max;
    sc->corr = f; f += UB_ATTN_QB;
    void **pp = (void **)(void *)(((uintptr_t)f + sizeof(void *) - 1) & ~(uintptr_t)(sizeof(void *) - 1));
    sc->qp = (const float **)pp;
    sc->ap = (float **)(pp + nq_max);
    sc->mr = (const float **)(pp + 2 * nq_max);
}

/* Rows of cells [c0, c0 + cb) of one kv head: pointers straight into a float32 cache (stride between cells
 * n_head_kv * hd), or the rows converted from half into the scratch (stride hd). */
static const float *chunk_rows(const attn_job *j, const void *base, int32_t type, int64_t off, int32_t cb,
                               int64_t stride, float *scratch, int64_t *rs) {
    if (type == UB_DT_F32) {
        *rs = stride;
        return (const float *)base + off;
    }
    j->h2f((const uint16_t *)base + off, stride, cb, j->hd, scratch);
    *rs = j->hd;
    return scratch;
}

/* Ask (into L2) for a share gl / hb of the rows of chunk cn of kv heads [g0, g0 + hb), K and V: spread over
 * the hb heads of the current chunk, the next chunk's block arrives in cell order while this one computes. */
static void prefetch_share(const attn_job *j, int64_t stream_base, int32_t g0, int32_t cn, int32_t gl) {
#if defined(__GNUC__)
    const int32_t n0 = cn * UB_ATTN_CB, nb = j->n_kv - n0 < UB_ATTN_CB ? j->n_kv - n0 : UB_ATTN_CB;
    const int64_t stride = (int64_t)j->n_head_kv * j->hd;
    const int ek = j->k_type == UB_DT_F32 ? 4 : 2, ev = j->v_type == UB_DT_F32 ? 4 : 2;
    const int64_t row = (int64_t)j->hb * j->hd; /* elements of the block's heads in one cell row */
    for (int32_t c = nb * gl / j->hb; c < nb * (gl + 1) / j->hb; c++) {
        const int64_t e0 = stream_base + (int64_t)(n0 + c) * stride + (int64_t)g0 * j->hd;
        const char *pk = (const char *)j->k + e0 * ek, *pv = (const char *)j->v + e0 * ev;
        for (int64_t b = 0; b < row * ek; b += 64) __builtin_prefetch(pk + b, 0, 1);
        for (int64_t b = 0; b < row * ev; b += 64) __builtin_prefetch(pv + b, 0, 1);
    }
#else
    (void)j; (void)stream_base; (void)g0; (void)cn; (void)gl;
#endif
}

static void run_tile(const attn_job *j, attn_scratch *sc, int64_t tile) {
    const int32_t n_hb = j->n_head_kv / j->hb;
    const int32_t k = (int32_t)(tile / ((int64_t)j->n_tb * n_hb));
    const int32_t tbi = (int32_t)(tile / n_hb % j->n_tb);
    const int32_t g0 = (int32_t)(tile % n_hb) * j->hb;
    const int32_t t0 = tbi * j->tb;
    const int32_t t1 = t0 + j->tb < j->per ? t0 + j->tb : j->per;
    const int32_t r = j->r, hd = j->hd, n_kv = j->n_kv;
    const int32_t nqh = (t1 - t0) * r; /* queries per kv head */
    const int32_t nq = nqh * j->hb;
    const float *mask_k = j->mask + (int64_t)k * j->per * n_kv;

    for (int32_t i = 0; i < nq; i++) { /* query i: kv head g0 + i / nqh, token t0 + (i % nqh) / r */
        const int32_t g = g0 + i / nqh, t = t0 + i % nqh / r, h = g * r + i % nqh % r;
        sc->qp[i] = j->q + (((int64_t)k * j->per + t) * j->n_head + h) * hd;
        sc->ap[i] = sc->acc + (int64_t)i * hd;
        sc->mr[i] = mask_k + (int64_t)t * n_kv;
        for (int d = 0; d < hd; d++) sc->ap[i][d] = 0.0f;
        sc->m[i] = -INFINITY;
        sc->l[i] = 0.0f;
    }
    const int64_t stride = (int64_t)j->n_head_kv * hd;
    const int64_t stream_base = (int64_t)j->streams[k] * j->kv_size * stride;
    const uint8_t *vis = j->vis + ((int64_t)k * j->n_tb + tbi) * j->n_chunks;
    const float *mrow[UB_ATTN_QB];

    int32_t ci = 0;
    while (ci < j->n_chunks && !vis[ci]) ci++;
    while (ci < j->n_chunks) {
        int32_t cn = ci + 1; /* next visible chunk */
        while (cn < j->n_chunks && !vis[cn]) cn++;
        const int32_t c0 = ci * UB_ATTN_CB;
        const int32_t cb = n_kv - c0 < UB_ATTN_CB ? n_kv - c0 : UB_ATTN_CB;
        for (int32_t gl = 0; gl < j->hb; gl++) {
            const int32_t g = g0 + gl;
            if (cn < j->n_chunks) prefetch_share(j, stream_base, g0, cn, gl);
            const int64_t off = stream_base + (int64_t)c0 * stride + (int64_t)g * hd;
            int64_t ks, vs;
            const float *kr = chunk_rows(j, j->k, j->k_type, off, cb, stride, sc->kc, &ks);
            const float *vr = chunk_rows(j, j->v, j->v_type, off, cb, stride, sc->vc, &vs);
            for (int32_t q0 = gl * nqh; q0 < (gl + 1) * nqh; q0 += UB_ATTN_QB) {
                const int nqg = (gl + 1) * nqh - q0 < UB_ATTN_QB ? (gl + 1) * nqh - q0 : UB_ATTN_QB;
                for (int i = 0; i < nqg; i++) mrow[i] = sc->mr[q0 + i] + c0;
                j->scores(sc->qp + q0, nqg, kr, ks, cb, hd, sc->s);
                if (j->softmax(sc->s, nqg, mrow, cb, j->scale, sc->m + q0, sc->l + q0, sc->corr))
                    j->pv(sc->s, nqg, sc->corr, vr, vs, cb, hd, sc->ap + q0);
            }
        }
        ci = cn;
    }
    for (int32_t i = 0; i < nq; i++) {
        const int32_t g = g0 + i / nqh, t = t0 + i % nqh / r, h = g * r + i % nqh % r;
        float *o = j->out + (((int64_t)k * j->per + t) * j->n_head + h) * hd;
        const float l = sc->l[i];
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        for (int d = 0; d < hd; d++) o[d] = l > 0.0f ? sc->ap[i][d] * inv : 0.0f;
    }
}

/* Pool work function: take tiles until none are left. ctx: attn_job; w: participant (its scratch). */
static void attn_work(void *ctx, int w) {
    attn_job *j = (attn_job *)ctx;
    for (;;) {
        pthread_mutex_lock(&j->lock);
        const int64_t t = j->next++;
        pthread_mutex_unlock(&j->lock);
        if (t >= j->n_tiles) break;
        run_tile(j, &j->sc[w], t);
    }
}

/* Attention of ns stream groups of per tokens each:
 *   q      float[ns][per][n_head][head_dim]                  (ggml [head_dim, n_head, per, ns]) caller-owned
 *   k, v   [n_stream][kv_size][n_head_kv][head_dim], float32 (UB_DT_F32) or half (UB_DT_F16), caller-owned
 *   streams int32[ns]: stream of group k (0 <= streams[k] < n_stream)
 *   mask   float[ns][per][n_kv]: added to the scaled scores; -inf hides a cell; column j is cell j
 *   out    float[ns][per][n_head][head_dim], written (caller-owned); a row that sees no cell gets zeros
 * Query head h reads kv head h / (n_head / n_head_kv). n_threads <= 0 means 1. The call only reads
 * cells [0, n_kv) of the chosen streams. Scratch (mask scan flags, per-thread buffers) is malloc'd per
 * call and freed before returning. */
int ub_attention(const float *q, const void *k, int32_t k_type, const void *v, int32_t v_type,
                 const int32_t *streams, const float *mask, float *out,
                 int32_t ns, int32_t per, int32_t n_head, int32_t n_head_kv, int32_t head_dim,
                 int32_t n_stream, int32_t kv_size, int32_t n_kv, float scale, int32_t n_threads) {
    if (!q || !k || !v || !streams || !mask || !out) return UB_E_ARG;
    if (ns < 0 || per < 0 || n_head <= 0 || n_head_kv <= 0 || head_dim <= 0 || n_stream <= 0 || kv_size < 0)
        return UB_E_ARG;
    if (n_head % n_head_kv != 0 || n_kv < 0 || n_kv > kv_size) return UB_E_ARG;
    if ((k_type != UB_DT_F32 && k_type != UB_DT_F16) || (v_type != UB_DT_F32 && v_type != UB_DT_F16))
        return UB_E_ARG;
    for (int32_t i = 0; i < ns; i++)
        if (streams[i] < 0 || streams[i] >= n_stream) return UB_E_ARG;
    if (ns == 0 || per == 0) return UB_OK;

    pthread_once(&g_cpu_once, detect_cpu);
    attn_job j;
    memset(&j, 0, sizeof j);
    j.q = q; j.k = k; j.v = v; j.k_type = k_type; j.v_type = v_type;
    j.streams = streams; j.mask = mask; j.out = out;
    j.ns = ns; j.per = per; j.n_head = n_head; j.n_head_kv = n_head_kv; j.hd = head_dim;
    j.kv_size = kv_size; j.n_kv = n_kv; j.scale = scale;
    j.r = n_head / n_head_kv;
    j.tb = j.r >= 32 ? 1 : 32 / j.r;
    if (j.tb > per) j.tb = per;
    j.n_tb = (per + j.tb - 1) / j.tb;
    j.n_chunks = (n_kv + UB_ATTN_CB - 1) / UB_ATTN_CB;
    const int simd = (g_cpu & UB_CPU_AVX2_FMA) && head_dim % 8 == 0;
    j.scores = simd ? ub_attn_scores_avx2 : ub_attn_scores_generic;
    j.softmax = (g_cpu & UB_CPU_AVX2_FMA) ? ub_attn_softmax_avx2 : ub_attn_softmax_generic;
    j.pv = simd ? ub_attn_pv_avx2 : ub_attn_pv_generic;
    j.h2f = (g_cpu & UB_CPU_F16C) && head_dim % 8 == 0 ? ub_attn_h2f_f16c : ub_attn_h2f_generic;
    const ub_attn_scan_fn scan = (g_cpu & UB_CPU_AVX2_FMA) ? ub_attn_scan_avx2 : ub_attn_scan_generic;

    /* participants: no more than tiles, and one when the work is too small to pay for waking a worker */
    const double work = (double)ns * per * n_head * (double)n_kv * head_dim;
    int64_t nt = n_threads > 0 ? n_threads : 1;
    if (nt > (int64_t)ns * j.n_tb * n_head_kv) nt = (int64_t)ns * j.n_tb * n_head_kv;
    if (work < 1048576.0) nt = 1; /* ~100 us on one core: less than waking a worker may cost */
    if (nt > UB_POOL_MAX) nt = UB_POOL_MAX;

    /* kv heads per tile: as many as keep <= 32 queries per tile and >= 2 tiles per participant, so that
     * a tile reads whole cell rows of the cache (all heads of a cell are adjacent) */
    j.hb = 1;
    for (int32_t d = 2; d <= n_head_kv; d++) {
        if (n_head_kv % d || (int64_t)d * j.tb * j.r > UB_ATTN_MAXQ) continue;
        if (nt > 1 && (int64_t)ns * j.n_tb * (n_head_kv / d) < 2 * nt) continue;
        j.hb = d;
    }
    j.n_tiles = (int64_t)ns * j.n_tb * (n_head_kv / j.hb);
    if (nt > j.n_tiles) nt = j.n_tiles;
    const int nq_max = j.tb * j.r * j.hb;
    const size_t per_part = scratch_floats(head_dim, nq_max);
    const size_t n_vis = (size_t)ns * j.n_tb * j.n_chunks;
    char *mem = (char *)malloc((size_t)nt * (per_part * sizeof(float) + sizeof(attn_scratch)) + n_vis);
    if (!mem) return UB_E_NOMEM;
    j.sc = (attn_scratch *)(void *)mem;
    float *f = (float *)(void *)(j.sc + nt);
    for (int64_t w = 0; w < nt; w++) scratch_init(&j.sc[w], f + (size_t)w * per_part, head_dim, nq_max);
    uint8_t *vis = (uint8_t *)(f + (size_t)nt * per_part);
    memset(vis, 0, n_vis);
    for (int32_t g = 0; g < ns; g++)
        for (int32_t t = 0; t < per; t++)
            scan(mask + ((int64_t)g * per + t) * n_kv, n_kv, vis + ((int64_t)g * j.n_tb + t / j.tb) * j.n_chunks);
    j.vis = vis;
    if (pthread_mutex_init(&j.lock, NULL) != 0) {
        free(mem);
        return UB_E_NOMEM;
    }
    ub_pool_run(attn_work, &j, (int)nt);
    pthread_mutex_destroy(&j.lock);
    free(mem);
    return UB_OK;
}

void ub_attention_shutdown(void) { ub_pool_shutdown(); }
