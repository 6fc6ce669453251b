/* Token sampling (see ub_sampling.h): per request, the k best candidates of the penalised logits are found
 * in one pass over the row (a bounded min-heap; an AVX2 pass skips blocks of 8 logits below the heap's worst
 * value), sorted, cut by top-p and min-p, scaled by the temperature and drawn from with a counter-based
 * random number. Requests are independent: each one reads its own row and writes only its own outputs, so the
 * participants of the shared thread pool (ub_pool.h) take them one at a time in any order and the results never
 * depend on the thread count. The SIMD paths are chosen with the one CPU detection (ub_cpu.h). */
#define _POSIX_C_SOURCE 200809L
#include "ub_sampling.h"
#include "ub_common.h"
#include "ub_cpu.h"
#include "ub_pool.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define UB_SAMPLE_X86 1
#endif

typedef struct { float v; int32_t id; } cand;

/* a before b: larger value first, lower id first on equal values (NaN never beats anything). */
static inline int better(float av, int32_t aid, float bv, int32_t bid) {
    return av > bv || (av == bv && aid < bid);
}

/* Bounded heap of the k best candidates seen; a[0] is the worst kept. a: cand[k], caller-owned. */
typedef struct { cand *a; int32_t n, k; } topk;

static void heap_down(topk *h, int32_t i) {
    cand *a = h->a;
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < h->n && better(a[w].v, a[w].id, a[l].v, a[l].id)) w = l;
        if (r < h->n && better(a[w].v, a[w].id, a[r].v, a[r].id)) w = r;
        if (w == i) return;
        cand t = a[i]; a[i] = a[w]; a[w] = t;
        i = w;
    }
}

static void heap_offer(topk *h, float v, int32_t id) {
    cand *a = h->a;
    if (h->n < h->k) {                 /* sift up: parents are worse than children */
        int32_t i = h->n++;
        a[i].v = v; a[i].id = id;
        while (i > 0) {
            int32_t p = (i - 1) / 2;
            if (!better(a[p].v, a[p].id, a[i].v, a[i].id)) break;
            cand t = a[i]; a[i] = a[p]; a[p] = t;
            i = p;
        }
    } else if (better(v, id, a[0].v, a[0].id)) {
        a[0].v = v; a[0].id = id;
        heap_down(h, 0);
    }
}

/* Offers x[i] for i in [i0, nv) whose skip[i] is 0 (skip may be NULL). x: float[nv]. */
static void scan_plain(const float *x, int32_t i0, int32_t nv, const uint8_t *skip, topk *h) {
    for (int32_t i = i0; i < nv; i++) {
        if (skip && skip[i]) continue;
        if (h->n < h->k || x[i] >= h->a[0].v) heap_offer(h, x[i], i);
    }
}

#ifdef UB_SAMPLE_X86
/* Same as scan_plain from 0, once the heap is full: 8 logits at a time are compared with the worst kept value
 * and a block goes through the exact scalar test only when one of its logits reaches it. */
__attribute__((target("avx2"))) static void scan_avx2(const float *x, int32_t nv, const uint8_t *skip, topk *h) {
    int32_t i = 0;
    for (; i < nv && h->n < h->k; i++)
        if (!(skip && skip[i])) heap_offer(h, x[i], i);
    if (h->n < h->k) return;
    __m256 thr = _mm256_set1_ps(h->a[0].v);
    for (; i + 8 <= nv; i += 8) {
        int m = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), thr, _CMP_GE_OQ));
        if (!m) continue;
        for (int b = 0; b < 8; b++) {
            if (!(m & (1 << b))) continue;
            int32_t j = i + b;
            if (skip && skip[j]) continue;
            heap_offer(h, x[j], j);
        }
        thr = _mm256_set1_ps(h->a[0].v);
    }
    scan_plain(x, i, nv, skip, h);
}
#endif

static int g_force_plain;             /* tests: 1 = use the plain-C paths (ub_sample_force_plain) */

/* 1 when the AVX2 (use_avx2) or AVX2 + FMA (use_avx2_fma) loops are to run. */
static int use_avx2(void) { return ub_cpu_has(UB_CPU_AVX2) && !g_force_plain; }

static void scan(const float *x, int32_t nv, const uint8_t *skip, topk *h) {
#ifdef UB_SAMPLE_X86
    if (use_avx2()) { scan_avx2(x, nv, skip, h); return; }
#endif
    scan_plain(x, 0, nv, skip, h);
}

/* ---- log-sum-exp of a logits row: one max pass, one pass of exp(x - max) summed in 8 double lanes. The AVX2
 * and the plain path compute the same polynomial with the same fused operations in the same lane order, so the
 * result is bitwise the same on every machine. */
static const float LSE_LOG2E = 1.44269504088896341f, LSE_LN2_HI = 0.693359375f, LSE_LN2_LO = -2.12194440e-4f;
static const float LSE_P[6] = { 1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f,
                                1.6666665459e-1f, 5.0000001201e-1f };

/* exp(d) for d <= 0 (0 below -87): Cephes' expf polynomial, every step an explicit fma or product. */
static inline float exp_neg(float d) {
    if (!(d >= -87.0f)) return 0.0f;
    float n = nearbyintf(d * LSE_LOG2E);
    float r = fmaf(-n, LSE_LN2_HI, d);
    r = fmaf(-n, LSE_LN2_LO, r);
    float p = LSE_P[0];
    for (int k = 1; k < 6; k++) p = fmaf(p, r, LSE_P[k]);
    float r2 = r * r;
    float y = fmaf(p, r2, r) + 1.0f;
    int32_t e = (int32_t)n + 127;
    uint32_t bits = (uint32_t)e << 23;
    float sc;
    memcpy(&sc, &bits, 4);
    return y * sc;
}

static float max_plain(const float *x, int32_t nv) {
    float mx = x[0];
    for (int32_t t = 1; t < nv; t++) if (x[t] > mx) mx = x[t];
    return mx;
}

/* sum over t of exp((x[t] - shift) / temp) with shift >= every x[t], in 8 double lanes (element t in lane t % 8,
 * the tail added last): the order the AVX2 twin uses. */
static double sumexp_plain(const float *x, int32_t nv, float shift, float temp) {
    double lane[8] = {0};
    int32_t t = 0;
    for (; t + 8 <= nv; t += 8)
        for (int l = 0; l < 8; l++) lane[l] += (double)exp_neg((x[t + l] - shift) / temp);
    double s = ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
    for (; t < nv; t++) s += (double)exp_neg((x[t] - shift) / temp);
    return s;
}

/* The id-order draw: the first token t at which the running sum of w[t] exceeds target, w[t] = exp((x[t] - shift)
 * / temp) (the modified logit, in double, for flagged tokens: flag may be NULL); -1 if the sum never gets there.
 * *last = the last token with w > 0. */
static int32_t walk_plain(const float *x, int32_t nv, float shift, float temp, double target, const uint8_t *flag,
                          const float *vmod, int32_t *last) {
    double cum = 0.0;
    for (int32_t t = 0; t < nv; t++) {
        const double w = (flag && flag[t]) ? exp(((double)vmod[t] - shift) / temp) : (double)exp_neg((x[t] - shift) / temp);
        if (w > 0.0) *last = t;
        cum += w;
        if (cum > target) return t;
    }
    return -1;
}

#ifdef UB_SAMPLE_X86
/* exp_neg of 8 lanes, the same operations as the scalar function. */
__attribute__((target("avx2,fma"))) static inline __m256 exp_neg8(__m256 d) {
    const __m256 lo = _mm256_set1_ps(-87.0f);
    __m256 ok = _mm256_cmp_ps(d, lo, _CMP_GE_OQ);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(d, _mm256_set1_ps(LSE_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LSE_LN2_HI), d);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LSE_LN2_LO), r);
    __m256 p = _mm256_set1_ps(LSE_P[0]);
    for (int k = 1; k < 6; k++) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(LSE_P[k]));
    __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(_mm256_blendv_ps(lo, n, ok)),
                                                    _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(e)), ok);
}

__attribute__((target("avx2,fma"))) static int32_t walk_avx2(const float *x, int32_t nv, float shift, float temp,
                                                             double target, const uint8_t *flag, const float *vmod,
                                                             int32_t *last) {
    const __m256 vsh = _mm256_set1_ps(shift), vt = _mm256_set1_ps(temp);
    double cum = 0.0;
    int32_t t = 0;
    float y[8];
    for (; t + 8 <= nv; t += 8) {
        _mm256_storeu_ps(y, exp_neg8(_mm256_div_ps(_mm256_sub_ps(_mm256_loadu_ps(x + t), vsh), vt)));
        for (int l = 0; l < 8; l++) {
            const double w = (flag && flag[t + l]) ? exp(((double)vmod[t + l] - shift) / temp) : (double)y[l];
            if (w > 0.0) *last = t + l;
            cum += w;
            if (cum > target) return t + l;
        }
    }
    for (; t < nv; t++) {
        const double w = (flag && flag[t]) ? exp(((double)vmod[t] - shift) / temp) : (double)exp_neg((x[t] - shift) / temp);
        if (w > 0.0) *last = t;
        cum += w;
        if (cum > target) return t;
    }
    return -1;
}

__attribute__((target("avx2,fma"))) static float max_avx2(const float *x, int32_t nv) {
    float mx = x[0];
    int32_t t = 0;
    if (nv >= 8) {
        __m256 m = _mm256_loadu_ps(x);
        for (t = 8; t + 8 <= nv; t += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + t));
        float tmp[8];
        _mm256_storeu_ps(tmp, m);
        for (int l = 0; l < 8; l++) if (tmp[l] > mx) mx = tmp[l];
    }
    for (; t < nv; t++) if (x[t] > mx) mx = x[t];
    return mx;
}

__attribute__((target("avx2,fma"))) static double sumexp_avx2(const float *x, int32_t nv, float shift, float temp) {
    const __m256 vsh = _mm256_set1_ps(shift), vt = _mm256_set1_ps(temp), lo = _mm256_set1_ps(-87.0f);
    const __m256 l2e = _mm256_set1_ps(LSE_LOG2E), hi_ = _mm256_set1_ps(LSE_LN2_HI), lo_ = _mm256_set1_ps(LSE_LN2_LO);
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int32_t t = 0;
    for (; t + 8 <= nv; t += 8) {
        __m256 d = _mm256_div_ps(_mm256_sub_ps(_mm256_loadu_ps(x + t), vsh), vt);
        __m256 ok = _mm256_cmp_ps(d, lo, _CMP_GE_OQ);
        __m256 n = _mm256_round_ps(_mm256_mul_ps(d, l2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256 r = _mm256_fnmadd_ps(n, hi_, d);
        r = _mm256_fnmadd_ps(n, lo_, r);
        __m256 p = _mm256_set1_ps(LSE_P[0]);
        for (int k = 1; k < 6; k++) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(LSE_P[k]));
        __m256 r2 = _mm256_mul_ps(r, r);
        __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), one);
        __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(_mm256_blendv_ps(lo, n, ok)),
                                                        _mm256_set1_epi32(127)), 23);
        y = _mm256_and_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(e)), ok);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(y)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(y, 1)));
    }
    double a[4], b[4];
    _mm256_storeu_pd(a, s0);
    _mm256_storeu_pd(b, s1);
    double s = ((a[0] + b[0]) + (a[1] + b[1])) + ((a[2] + b[2]) + (a[3] + b[3]));
    for (; t < nv; t++) s += (double)exp_neg((x[t] - shift) / temp);
    return s;
}
#endif

int ub_sample_force_plain(int on) {
    int was = g_force_plain;
    g_force_plain = on ? 1 : 0;
    return was;
}

static int use_avx2_fma(void) { return ub_cpu_has(UB_CPU_AVX2 | UB_CPU_FMA) && !g_force_plain; }

static float row_max(const float *x, int32_t nv) {
#ifdef UB_SAMPLE_X86
    if (use_avx2_fma()) return max_avx2(x, nv);
#endif
    return max_plain(x, nv);
}

static double sum_exp(const float *x, int32_t nv, float shift, float temp) {
#ifdef UB_SAMPLE_X86
    if (use_avx2_fma()) return sumexp_avx2(x, nv, shift, temp);
#endif
    return sumexp_plain(x, nv, shift, temp);
}

static int32_t walk(const float *x, int32_t nv, float shift, float temp, double target, const uint8_t *flag,
                    const float *vmod, int32_t *last) {
#ifdef UB_SAMPLE_X86
    if (use_avx2_fma()) return walk_avx2(x, nv, shift, temp, target, flag, vmod, last);
#endif
    return walk_plain(x, nv, shift, temp, target, flag, vmod, last);
}

static double log_sum_exp(const float *x, int32_t nv) {
    const float mx = row_max(x, nv);
    return (double)mx + log(sum_exp(x, nv, mx, 1.0f));
}

static int cmp_cand(const void *pa, const void *pb) {
    const cand *a = (const cand *)pa, *b = (const cand *)pb;
    if (better(a->v, a->id, b->v, b->id)) return -1;
    if (better(b->v, b->id, a->v, a->id)) return 1;
    return 0;
}

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

double ub_sample_uniform(uint64_t seed, uint64_t counter) {
    uint64_t x = mix64(mix64(seed + 0x9E3779B97F4A7C15ULL) ^ (counter * 0xD1B54A32D192ED03ULL + 1ULL));
    return (double)(x >> 11) * 0x1.0p-53;
}

typedef struct {
    const float *logits; int32_t n_vocab; const int32_t *row;
    const float *temperature; const int32_t *top_k; const float *top_p; const float *min_p; const float *penalty;
    const int64_t *pen_off; const int32_t *pen_tok; const int64_t *bias_off; const int32_t *bias_tok;
    const float *bias_val; const uint64_t *seed; const uint64_t *counter;
    int32_t n_logprobs; int32_t *out_tok; float *out_lp; int32_t *out_top_id; float *out_top_lp;
    int32_t cap;              /* candidates a scratch buffer holds */
    int32_t n;                /* requests */
    int marks;                /* some request has a logit bias or penalties: the scratch needs flag/cnt/bias/... */
    atomic_llong next;        /* the next request to take (participants share them dynamically) */
    atomic_llong done;        /* requests sampled */
} job;

/* Per-participant scratch, n_vocab long, all zero between requests: flag (1 biased, 2 penalised), the token's count
 * in the penalty window, its bias, its modified logit; `marked` lists the distinct flagged tokens of a request.
 * flag, cnt, bias, vmod and marked are NULL when no request of the call has a bias or a penalty (never read then:
 * every use is behind n_marked > 0). */
typedef struct { cand *cands; uint8_t *flag; int32_t *cnt; float *bias; float *vmod; int32_t *marked;
                 float *clean; } scratch;   /* clean: float[n_vocab], a row with its NaNs as -inf */

/* The kk best candidates (sorted: larger value first, lower id on ties) of row x with the n_marked flagged tokens
 * at their modified value. Returns how many (min(kk, nv)). */
static int32_t collect(const float *x, int32_t nv, int32_t kk, const scratch *S, int32_t n_marked) {
    topk h = { S->cands, 0, kk };
    for (int32_t q = 0; q < n_marked; q++) heap_offer(&h, S->vmod[S->marked[q]], S->marked[q]);
    if (kk >= nv) {
        for (int32_t t = 0; t < nv; t++)
            if (!(n_marked && S->flag[t])) { h.a[h.n].v = x[t]; h.a[h.n].id = t; h.n++; }
    } else {
        scan(x, nv, n_marked ? S->flag : NULL, &h);
    }
    qsort(S->cands, (size_t)h.n, sizeof(cand), cmp_cand);
    return h.n;
}

/* sum over the vocabulary of exp((v - shift) / temp), v the modified logits (see sum_exp for shift). */
static double sum_exp_marked(const float *x, int32_t nv, float shift, float temp, const scratch *S, int32_t n_marked) {
    double z = sum_exp(x, nv, shift, temp);
    for (int32_t q = 0; q < n_marked; q++) {
        const int32_t t = S->marked[q];
        z += exp(((double)S->vmod[t] - shift) / temp) - (double)exp_neg((x[t] - shift) / temp);
    }
    return z;
}

/* 1 when the row x (float[nv]) holds a NaN. */
static int has_nan_plain(const float *x, int32_t nv) {
    for (int32_t t = 0; t < nv; t++) if (x[t] != x[t]) return 1;
    return 0;
}

#ifdef UB_SAMPLE_X86
__attribute__((target("avx2"))) static int has_nan_avx2(const float *x, int32_t nv) {
    int32_t t = 0;
    __m256 acc = _mm256_setzero_ps();
    for (; t + 8 <= nv; t += 8) {
        const __m256 v = _mm256_loadu_ps(x + t);
        acc = _mm256_or_ps(acc, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    return _mm256_movemask_ps(acc) != 0 || has_nan_plain(x + t, nv - t);
}
#endif

/* A logits row whose NaNs are read as -inf (a NaN never wins and never freezes the top-k heap: NaN compares
 * false with everything): x itself when it has none, else S->clean (float[nv]) filled with the sanitised copy. */
static const float *nan_free_row(const float *x, int32_t nv, scratch *S) {
    int nan;
#ifdef UB_SAMPLE_X86
    nan = use_avx2() ? has_nan_avx2(x, nv) : has_nan_plain(x, nv);
#else
    nan = has_nan_plain(x, nv);
#endif
    if (!nan) return x;
    for (int32_t t = 0; t < nv; t++) S->clean[t] = x[t] != x[t] ? -INFINITY : x[t];
    return S->clean;
}

/* Samples request i (see ub_sampling.h for the chain). */
static void sample_one(const job *J, int32_t i, scratch *S) {
    const int32_t nv = J->n_vocab;
    const float *x = nan_free_row(J->logits + (int64_t)J->row[i] * nv, nv, S);
    const float temp = J->temperature[i];
    const float rep = J->penalty[3 * i], freq = J->penalty[3 * i + 1], pres = J->penalty[3 * i + 2];
    cand *cands = S->cands;
    uint8_t *flag = S->flag;
    int32_t k = J->top_k[i];
    if (k <= 0 || k > nv) k = nv;

    /* tokens with a bias or a penalty: flagged, their modified value kept in vmod; scans skip them */
    const int64_t b0 = J->bias_off ? J->bias_off[i] : 0, b1 = J->bias_off ? J->bias_off[i + 1] : 0;
    const int64_t p0 = J->pen_off[i], p1 = J->pen_off[i + 1];
    const int use_pen = (rep != 1.0f || freq != 0.0f || pres != 0.0f) && p1 > p0;
    int32_t n_marked = 0;
    for (int64_t b = b0; b < b1; b++) {
        const int32_t t = J->bias_tok[b];
        if (!flag[t]) S->marked[n_marked++] = t;
        flag[t] |= 1;
        S->bias[t] = J->bias_val[b];
    }
    if (use_pen)
        for (int64_t p = p0; p < p1; p++) {
            const int32_t t = J->pen_tok[p];
            if (!flag[t]) S->marked[n_marked++] = t;
            flag[t] |= 2;
            S->cnt[t]++;
        }
    for (int32_t q = 0; q < n_marked; q++) {
        const int32_t t = S->marked[q];
        float v = x[t];
        if (flag[t] & 1) v += S->bias[t];
        if (flag[t] & 2) {                   /* llama.cpp's penalties sampler */
            v = v <= 0.0f ? v * rep : v / rep;
            v -= (float)S->cnt[t] * freq + pres;
        }
        S->vmod[t] = v;
    }

    int32_t tok;
    if (temp <= 0.0f) {                      /* greedy */
        collect(x, nv, 1, S, n_marked);
        tok = cands[0].id;
    } else if (k == nv && J->top_p[i] >= 1.0f && J->min_p[i] <= 0.0f) {
        /* no cut at all: draw over the whole vocabulary in id order, no sort */
        const float mr = row_max(x, nv);
        const double target = ub_sample_uniform(J->seed[i], J->counter[i]) *
                              sum_exp_marked(x, nv, mr, temp, S, n_marked);
        int32_t last = 0;
        tok = walk(x, nv, mr, temp, target, n_marked ? flag : NULL, S->vmod, &last);
        if (tok < 0) tok = last;
    } else {
        const float tp = J->top_p[i], mp = J->min_p[i];
        int32_t m;
        if (k < nv) {                        /* top-k: top-p normalises over the k candidates */
            m = collect(x, nv, k, S, n_marked);
            if (tp < 1.0f && m > 1) {
                const double vmax = cands[0].v;
                double s = 0.0, cum = 0.0;
                for (int32_t j = 0; j < m; j++) s += exp((double)cands[j].v - vmax);
                for (int32_t j = 0; j < m; j++) {
                    cum += exp((double)cands[j].v - vmax) / s;
                    if (cum >= tp) { m = j + 1; break; }
                }
            }
        } else {                             /* whole vocabulary: grow the candidates until the cuts fall inside */
            const float mr = row_max(x, nv);
            const double z = sum_exp_marked(x, nv, mr, 1.0f, S, n_marked);
            int32_t kk = 64;
            for (;;) {
                if ((int64_t)kk * 4 >= nv) kk = nv;
                m = collect(x, nv, kk, S, n_marked);
                int found = 0;
                if (tp < 1.0f) {
                    double cum = 0.0;
                    for (int32_t j = 0; j < m; j++) {
                        cum += exp((double)cands[j].v - mr) / z;
                        if (cum >= tp) { m = j + 1; found = 1; break; }
                    }
                }
                if (found || kk == nv) break;
                if (mp > 0.0f && cands[m - 1].v < cands[0].v + logf(mp)) break;   /* min-p cuts inside */
                kk *= 8;
            }
        }
        if (mp > 0.0f) {        /* tokens within log(min_p) of the best */
            const float lim = cands[0].v + logf(mp);
            int32_t keep = 1;
            while (keep < m && cands[keep].v >= lim) keep++;
            m = keep;
        }
        tok = cands[0].id;
        if (m > 1) {
            const double vmax = cands[0].v;
            double s = 0.0;
            for (int32_t j = 0; j < m; j++) s += exp(((double)cands[j].v - vmax) / temp);
            const double target = ub_sample_uniform(J->seed[i], J->counter[i]) * s;
            double cum = 0.0;
            tok = cands[m - 1].id;
            for (int32_t j = 0; j < m; j++) {
                cum += exp(((double)cands[j].v - vmax) / temp);
                if (cum > target) { tok = cands[j].id; break; }
            }
        }
    }
    for (int32_t q = 0; q < n_marked; q++) {
        const int32_t t = S->marked[q];
        flag[t] = 0;
        S->cnt[t] = 0;
        S->bias[t] = 0.0f;
    }
    J->out_tok[i] = tok;

    if (J->n_logprobs >= 0) {   /* log-softmax of the raw logits */
        const double lse = log_sum_exp(x, nv);
        J->out_lp[i] = (float)((double)x[tok] - lse);
        const int32_t nl = J->n_logprobs;
        if (nl > 0) {
            topk t = { cands, 0, nl };
            scan(x, nv, NULL, &t);
            qsort(cands, (size_t)t.n, sizeof(cand), cmp_cand);
            for (int32_t j = 0; j < nl; j++) {
                J->out_top_id[(int64_t)i * nl + j] = cands[j].id;
                J->out_top_lp[(int64_t)i * nl + j] = (float)((double)cands[j].v - lse);
            }
        }
    }
}

/* Work function of the pool (ub_pool_fn): participant w (unused: every participant is alike) allocates its
 * n_vocab-long scratch (owned and freed here), then takes requests from J->next until none is left. A participant
 * that cannot allocate takes none and leaves them to the others; ub_sample reports UB_E_NOMEM when some request
 * was never taken. */
static void sample_work(void *ctx, int w) {
    job *J = (job *)ctx;
    (void)w;
    scratch S;
    const size_t nv = (size_t)J->n_vocab;
    memset(&S, 0, sizeof S);
    S.cands = (cand *)malloc((size_t)J->cap * sizeof(cand));
    S.clean = (float *)malloc(nv * sizeof(float));     /* touched only for a row with NaNs */
    if (J->marks) {  /* calloc'd memory is zeroed page by page: ~1.4 MB for 150k tokens, only when needed */
        S.flag = (uint8_t *)calloc(nv, 1);
        S.cnt = (int32_t *)calloc(nv, sizeof(int32_t));
        S.bias = (float *)calloc(nv, sizeof(float));
        S.vmod = (float *)malloc(nv * sizeof(float));
        S.marked = (int32_t *)malloc(nv * sizeof(int32_t));
    }
    if (S.cands && S.clean && (!J->marks || (S.flag && S.cnt && S.bias && S.vmod && S.marked))) {
        for (;;) {
            const long long i = atomic_fetch_add(&J->next, 1);
            if (i >= J->n) break;
            sample_one(J, (int32_t)i, &S);
            atomic_fetch_add(&J->done, 1);
        }
    }
    free(S.cands);
    free(S.flag);
    free(S.cnt);
    free(S.bias);
    free(S.vmod);
    free(S.marked);
    free(S.clean);
}

int ub_sample(const float *logits, int64_t n_rows, int32_t n_vocab, int32_t n, const int32_t *row,
              const float *temperature, const int32_t *top_k, const float *top_p, const float *min_p,
              const float *penalty, const int64_t *pen_off, const int32_t *pen_tok,
              const int64_t *bias_off, const int32_t *bias_tok, const float *bias_val,
              const uint64_t *seed, const uint64_t *counter, int32_t n_logprobs,
              int32_t *out_tok, float *out_lp, int32_t *out_top_id, float *out_top_lp, int32_t n_threads) {
    if (n < 0 || n_vocab <= 0 || n_rows < 0 || n_logprobs < -1 || n_logprobs > n_vocab) return UB_E_ARG;
    if (n == 0) return UB_OK;
    if (!logits || !row || !temperature || !top_k || !top_p || !min_p || !penalty || !pen_off || !seed ||
        !counter || !out_tok) return UB_E_ARG;
    if (n_logprobs >= 0 && (!out_lp || (n_logprobs > 0 && (!out_top_id || !out_top_lp)))) return UB_E_ARG;
    if (pen_off[0] != 0) return UB_E_ARG;
    int32_t cap = n_logprobs > 0 ? n_logprobs : 1;
    for (int32_t i = 0; i < n; i++) {
        if (row[i] < 0 || (int64_t)row[i] >= n_rows) return UB_E_ARG;
        if (pen_off[i + 1] < pen_off[i]) return UB_E_ARG;
        if (!(penalty[3 * i] > 0.0f) || !isfinite(penalty[3 * i]) || !isfinite(temperature[i])) return UB_E_ARG;
        if (!isfinite(penalty[3 * i + 1]) || !isfinite(penalty[3 * i + 2])) return UB_E_ARG;
        if (bias_off && bias_off[i + 1] < bias_off[i]) return UB_E_ARG;
        int32_t k = top_k[i];
        if (k <= 0 || k > n_vocab) k = n_vocab;
        if (temperature[i] <= 0.0f) k = 1;
        if (k > cap) cap = k;
    }
    if (pen_off[n] > 0 && !pen_tok) return UB_E_ARG;
    for (int64_t p = 0; p < pen_off[n]; p++)
        if (pen_tok[p] < 0 || pen_tok[p] >= n_vocab) return UB_E_ARG;
    if (bias_off) {
        if (bias_off[0] != 0 || (bias_off[n] > 0 && (!bias_tok || !bias_val))) return UB_E_ARG;
        for (int64_t b = 0; b < bias_off[n]; b++)
            if (bias_tok[b] < 0 || bias_tok[b] >= n_vocab || isnan(bias_val[b])) return UB_E_ARG;
    }

    job J = { logits, n_vocab, row, temperature, top_k, top_p, min_p, penalty, pen_off, pen_tok, bias_off,
              bias_tok, bias_val, seed, counter,
              n_logprobs, out_tok, out_lp, out_top_id, out_top_lp, cap, n, 0, 0, 0 };
    int32_t nt = n_threads < 1 ? 1 : n_threads;
    if (nt > n) nt = n;
    if (nt > UB_POOL_MAX) nt = UB_POOL_MAX;
    if ((int64_t)n * n_vocab < (1 << 18)) nt = 1;     /* too little work to pay for a second participant */
    J.marks = (bias_off && bias_off[n] > 0) || pen_off[n] > 0;
    atomic_init(&J.next, 0);
    atomic_init(&J.done, 0);
    ub_pool_run(sample_work, &J, nt);
    return atomic_load(&J.done) == n ? UB_OK : UB_E_NOMEM;
}
