/* Attention over a KV cache with an online (streaming) softmax. Work is cut into tiles
 * (stream group k, kv head g, block of tokens) that worker threads take from a shared counter; each
 * tile walks its stream's cells [0, n_kv) in chunks of UB_ATTN_CB, skipping chunks its tokens cannot see.
 * Every output row is computed by exactly one thread in a fixed order: results do not depend on n_threads. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "ub_common.h"
#include "ub_compute.h"
#include "attn_kernels.h"

/* q: nq pointers to float[hd]; k: cb rows at stride ks; s: float[nq][CB] written for c < cb. */
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

/* p: float[nq][CB]; v: cb rows at stride vs; acc: nq pointers to float[hd], updated. */
void ub_attn_pv_generic(const float *p, int nq, const float *v, int64_t vs, int cb, int hd, float *const *acc) {
    for (int i = 0; i < nq; i++) {
        float *restrict a = acc[i];
        for (int c = 0; c < cb; c++) {
            const float pc = p[i * UB_ATTN_CB + c];
            if (pc == 0.0f) continue;
            const float *restrict vr = v + c * vs;
            for (int d = 0; d < hd; d++) a[d] += pc * vr[d];
        }
    }
}

/* x: float[CB] in place. */
void ub_attn_exp_generic(float *x) {
    for (int c = 0; c < UB_ATTN_CB; c++) x[c] = expf(x[c]);
}

static pthread_once_t g_cpu_once = PTHREAD_ONCE_INIT;
static int g_have_avx2 = 0;
static void detect_cpu(void) { g_have_avx2 = ub_attn_have_avx2(); }

typedef struct {
    const float *q;
    const void *k, *v;
    int32_t k_type, v_type;
    const int32_t *streams;
    const float *mask;
    float *out;
    int32_t ns, per, n_head, n_head_kv, hd, kv_size, n_kv;
    int32_t r, tb, n_tb; /* GQA ratio, tokens per tile, token blocks per group */
    int64_t n_tiles;
    float scale;
    ub_attn_scores_fn scores;
    ub_attn_pv_fn pv;
    ub_attn_exp_fn exp16;
    pthread_mutex_t lock;
    int64_t next;
    int failed;
} attn_job;

/* Per-thread scratch, owned by the worker that allocated it. */
typedef struct {
    float *kc;          /* [CB][hd]: keys of a chunk converted from half */
    float *vc;          /* [CB][hd]: values of a chunk converted from half */
    float *s;           /* [QB][CB] */
    float *acc;         /* [nq_max][hd] */
    float *m, *l;       /* [nq_max] */
    const float **qp;   /* [nq_max] */
    float **ap;         /* [nq_max] */
    void *block;
} attn_scratch;

static int scratch_alloc(attn_scratch *sc, int hd, int nq_max) {
    const size_t nf = (size_t)hd * UB_ATTN_CB * 2 + (size_t)UB_ATTN_QB * UB_ATTN_CB + (size_t)nq_max * hd +
                      (size_t)nq_max * 2;
    const size_t bytes = nf * sizeof(float) + (size_t)nq_max * 2 * sizeof(void *);
    char *b = (char *)malloc(bytes);
    if (!b) return 0;
    sc->block = b;
    float *f = (float *)b;
    sc->kc = f; f += (size_t)hd * UB_ATTN_CB;
    sc->vc = f; f += (size_t)hd * UB_ATTN_CB;
    sc->s = f; f += (size_t)UB_ATTN_QB * UB_ATTN_CB;
    sc->acc = f; f += (size_t)nq_max * hd;
    sc->m = f; f += nq_max;
    sc->l = f; f += nq_max;
    sc->qp = (const float **)(void *)f;
    sc->ap = (float **)(void *)(sc->qp + nq_max);
    return 1;
}

/* Rows of cells [c0, c0 + cb) of one kv head: pointers straight into a float32 cache (stride between cells
 * n_head_kv * hd), or the rows converted from half into the scratch (stride hd). */
static const float *chunk_rows(const void *base, int32_t type, int64_t off, int32_t cb, int32_t hd,
                               int64_t stride, float *scratch, int64_t *rs) {
    if (type == UB_DT_F32) {
        *rs = stride;
        return (const float *)base + off;
    }
    for (int32_t c = 0; c < cb; c++) {
        const uint16_t *src = (const uint16_t *)base + off + c * stride;
        float *dst = scratch + (int64_t)c * hd;
        for (int32_t d = 0; d < hd; d++) dst[d] = ub_h2f(src[d]);
    }
    *rs = hd;
    return scratch;
}

static void run_tile(const attn_job *j, attn_scratch *sc, int64_t tile) {
    const int32_t per_group = j->n_head_kv * j->n_tb;
    const int32_t k = (int32_t)(tile / per_group);
    const int32_t g = (int32_t)(tile % per_group) / j->n_tb;
    const int32_t t0 = (int32_t)(tile % j->n_tb) * j->tb;
    const int32_t t1 = t0 + j->tb < j->per ? t0 + j->tb : j->per;
    const int32_t r = j->r, hd = j->hd, n_kv = j->n_kv;
    const int32_t nq = (t1 - t0) * r;

    for (int32_t i = 0; i < nq; i++) {
        const int32_t t = t0 + i / r, h = g * r + i % r;
        sc->qp[i] = j->q + (((int64_t)k * j->per + t) * j->n_head + h) * hd;
        sc->ap[i] = sc->acc + (int64_t)i * hd;
        for (int d = 0; d < hd; d++) sc->ap[i][d] = 0.0f;
        sc->m[i] = -INFINITY;
        sc->l[i] = 0.0f;
    }
    const int64_t stream_base = (int64_t)j->streams[k] * j->kv_size * j->n_head_kv * hd + (int64_t)g * hd;
    const float *mask_k = j->mask + (int64_t)k * j->per * n_kv;

    for (int32_t c0 = 0; c0 < n_kv; c0 += UB_ATTN_CB) {
        const int32_t cb = n_kv - c0 < UB_ATTN_CB ? n_kv - c0 : UB_ATTN_CB;
        int visible = 0;
        for (int32_t t = t0; t < t1 && !visible; t++) {
            const float *mr = mask_k + (int64_t)t * n_kv + c0;
            for (int32_t c = 0; c < cb; c++)
                if (mr[c] != -INFINITY) { visible = 1; break; }
        }
        if (!visible) continue;
        const int64_t stride = (int64_t)j->n_head_kv * hd, off = stream_base + (int64_t)c0 * stride;
        int64_t ks, vs;
        const float *kr = chunk_rows(j->k, j->k_type, off, cb, hd, stride, sc->kc, &ks);
        const float *vr = chunk_rows(j->v, j->v_type, off, cb, hd, stride, sc->vc, &vs);

        for (int32_t q0 = 0; q0 < nq; q0 += UB_ATTN_QB) {
            const int nqg = nq - q0 < UB_ATTN_QB ? nq - q0 : UB_ATTN_QB;
            j->scores(sc->qp + q0, nqg, kr, ks, cb, hd, sc->s);
            int any = 0;
            for (int gi = 0; gi < nqg; gi++) {
                const int32_t i = q0 + gi;
                const float *mr = mask_k + (int64_t)(t0 + i / r) * n_kv + c0;
                float *s = sc->s + gi * UB_ATTN_CB;
                float mx = -INFINITY;
                for (int32_t c = 0; c < UB_ATTN_CB; c++) {
                    const float val = (c < cb && mr[c] != -INFINITY) ? s[c] * j->scale + mr[c] : -INFINITY;
                    s[c] = val;
                    if (val > mx) mx = val;
                }
                if (mx == -INFINITY) { /* nothing visible for this query in this chunk */
                    for (int32_t c = 0; c < UB_ATTN_CB; c++) s[c] = 0.0f;
                    continue;
                }
                any = 1;
                if (mx > sc->m[i]) {
                    if (sc->l[i] > 0.0f) {
                        const float corr = expf(sc->m[i] - mx);
                        float *a = sc->ap[i];
                        for (int d = 0; d < hd; d++) a[d] *= corr;
                        sc->l[i] *= corr;
                    }
                    sc->m[i] = mx;
                }
                for (int32_t c = 0; c < UB_ATTN_CB; c++) s[c] -= sc->m[i]; /* -inf stays -inf */
                j->exp16(s);
                float sum = 0.0f;
                for (int32_t c = 0; c < UB_ATTN_CB; c++) sum += s[c];
                sc->l[i] += sum;
            }
            if (any) j->pv(sc->s, nqg, vr, vs, cb, hd, sc->ap + q0);
        }
    }
    for (int32_t i = 0; i < nq; i++) {
        const int32_t t = t0 + i / r, h = g * r + i % r;
        float *o = j->out + (((int64_t)k * j->per + t) * j->n_head + h) * hd;
        const float l = sc->l[i];
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        for (int d = 0; d < hd; d++) o[d] = l > 0.0f ? sc->ap[i][d] * inv : 0.0f;
    }
}

static void *worker(void *arg) {
    attn_job *j = (attn_job *)arg;
    attn_scratch sc;
    if (!scratch_alloc(&sc, j->hd, j->tb * j->r)) {
        pthread_mutex_lock(&j->lock);
        j->failed = 1;
        pthread_mutex_unlock(&j->lock);
        return NULL;
    }
    for (;;) {
        pthread_mutex_lock(&j->lock);
        const int64_t t = j->failed ? j->n_tiles : j->next++;
        pthread_mutex_unlock(&j->lock);
        if (t >= j->n_tiles) break;
        run_tile(j, &sc, t);
    }
    free(sc.block);
    return NULL;
}

/* Attention of ns stream groups of per tokens each:
 *   q      float[ns][per][n_head][head_dim]                  (ggml [head_dim, n_head, per, ns]) caller-owned
 *   k, v   [n_stream][kv_size][n_head_kv][head_dim], float32 (UB_DT_F32) or half (UB_DT_F16), caller-owned
 *   streams int32[ns]: stream of group k (0 <= streams[k] < n_stream)
 *   mask   float[ns][per][n_kv]: added to the scaled scores; -inf hides a cell; column j is cell j
 *   out    float[ns][per][n_head][head_dim], written (caller-owned); a row that sees no cell gets zeros
 * Query head h reads kv head h / (n_head / n_head_kv). n_threads <= 0 means 1. The call only reads
 * cells [0, n_kv) of the chosen streams. */
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
    j.n_tiles = (int64_t)ns * n_head_kv * j.n_tb;
    const int fast = g_have_avx2 && head_dim % 8 == 0;
    j.scores = fast ? ub_attn_scores_avx2 : ub_attn_scores_generic;
    j.pv = fast ? ub_attn_pv_avx2 : ub_attn_pv_generic;
    j.exp16 = g_have_avx2 ? ub_attn_exp_avx2 : ub_attn_exp_generic;
    if (pthread_mutex_init(&j.lock, NULL) != 0) return UB_E_NOMEM;

    /* threads: no more than tiles, and one thread when the work is too small to pay for a thread start */
    const double work = (double)ns * per * n_head * (double)n_kv * head_dim;
    int64_t nt = n_threads > 0 ? n_threads : 1;
    if (nt > j.n_tiles) nt = j.n_tiles;
    if (work < 262144.0) nt = 1;
    if (nt > 256) nt = 256;
    pthread_t tid[256];
    int64_t started = 0;
    for (int64_t t = 1; t < nt; t++) {
        if (pthread_create(&tid[started], NULL, worker, &j) != 0) break; /* run with fewer threads */
        started++;
    }
    worker(&j);
    for (int64_t t = 0; t < started; t++) pthread_join(tid[t], NULL);
    pthread_mutex_destroy(&j.lock);
    return j.failed ? UB_E_NOMEM : UB_OK;
}
