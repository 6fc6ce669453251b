/* Batch-invariant attention over per-row visible-cell lists, and the builder of those lists.
 *
 * Invariance: the cells a query row sees are listed in ascending position order (ties by cell index),
 * whatever cells they occupy, and every (row, kv head) unit is computed by one thread with a fixed
 * sequence of operations: scores in list order, max, exp, a double sum in list order, normalised
 * probabilities, then sum_c p_c * V_c accumulated in list order. So a row's output depends only on its
 * query, its visible cells' (position, K, V) and the back-end; not on the KV layout, the other rows, the
 * tiling or the thread count. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ub_common.h"
#include "ub_compute.h"
#include "ub_matmul.h"
#include "mm_internal.h"
#include "ub_pool.h"
#include "attn_vis_kernels.h"
#include "ub_kv_quant.h"

int64_t ub_attn_count_visible(const float *mask, int64_t n_rows, int32_t n_kv) {
    if (!mask || n_rows < 0 || n_kv < 0) return -1;
    int64_t t = 0;
    for (int64_t i = 0; i < n_rows * n_kv; i++) t += mask[i] != -INFINITY;
    return t;
}

static int cmp_key(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* mask: float[ns][per][n_kv]; pos: int32[ns][n_kv]; off: int32[ns*per+1]; cells: int32[cap] (see header). */
int ub_attn_visible(const float *mask, const int32_t *pos, int32_t ns, int32_t per, int32_t n_kv,
                    int32_t *off, int32_t *cells, int64_t cap) {
    if (ns < 0 || per < 0 || n_kv < 0 || cap < 0 || !off) return UB_E_ARG;
    if ((int64_t)ns * per * n_kv > INT32_MAX) return UB_E_ARG;
    off[0] = 0;
    if ((int64_t)ns * per == 0 || n_kv == 0) {
        for (int64_t i = 0; i < (int64_t)ns * per; i++) off[i + 1] = 0;
        return UB_OK;
    }
    if (!mask || !pos || (!cells && cap > 0)) return UB_E_ARG;
    int64_t *key = malloc(sizeof(int64_t) * (size_t)n_kv);
    if (!key) return UB_E_NOMEM;
    int64_t t = 0;
    int rc = UB_OK;
    for (int32_t g = 0; g < ns && rc == UB_OK; g++) {
        /* the group's cells sorted once by (position, cell index) */
        for (int32_t j = 0; j < n_kv; j++)
            key[j] = (int64_t)pos[(int64_t)g * n_kv + j] * ((int64_t)1 << 32) + j; /* (pos, j), pos may be < 0 */
        qsort(key, (size_t)n_kv, sizeof(int64_t), cmp_key);
        for (int32_t r = 0; r < per && rc == UB_OK; r++) {
            const int64_t row = (int64_t)g * per + r;
            const float *m = mask + row * n_kv;
            for (int32_t j = 0; j < n_kv; j++) {
                const int32_t c = (int32_t)(key[j] & 0xffffffff); /* j < 2^31: the low word, whatever pos's sign */
                const float v = m[c];
                if (v == -INFINITY) continue;
                if (v != 0.0f || t >= cap) {
                    rc = UB_E_ARG;
                    break;
                }
                cells[t++] = c;
            }
            off[row + 1] = (int32_t)t;
        }
    }
    free(key);
    return rc;
}

/* 0 when UBATCH_ATTN_TILES=0: the per-cell loops on every back-end (bitwise the same results; for A/B
 * measurement and the test that the blocked loops match them). Read at every call. */
static int ub_attn_tiles_enabled(void) {
    const char *e = getenv("UBATCH_ATTN_TILES");
    return !(e && e[0] == '0' && e[1] == 0);
}

typedef struct {
    const float *q;
    const void *k, *v;
    int32_t k_type, v_type, k_f16, v_f16, k_deq, v_deq, k_min; /* *_deq: rows dequantised into scratch (bf16, q*) */
    int64_t rs_k, rs_v; /* bytes of one (cell, kv head) row of K / V */
    const int32_t *row_stream, *off, *cells;
    float *out;
    int32_t n_q, n_head, n_head_kv, hd_k, hd_v, kv_size, gqa;
    int32_t hsplit; /* parts the gqa query heads of a (row, kv head) are cut into (1, or more when rows are few) */
    float scale, softcap;
    float *scratch; /* per participant: [max_list][gqa] scores + [gqa][hd_k] rounded queries + [hd_k + hd_v] rows */
    int64_t scratch_stride;
    ub_av_kernels kern;
    atomic_llong next;
} av_job;

/* Unit u = (row i, kv head g, part p): query heads [h0, h0 + gq) of the kv head's group (each head's
 * operations are those of a single-head loop, so how the heads are cut into parts does not change them). */
static void av_unit(av_job *J, int64_t u, float *sc) {
    const int32_t p = (int32_t)(u % J->hsplit);
    u /= J->hsplit;
    const int32_t i = (int32_t)(u / J->n_head_kv), g = (int32_t)(u % J->n_head_kv);
    const int32_t st = J->row_stream[i], c0 = J->off[i], nc = J->off[i + 1] - c0;
    const int32_t h0 = (int32_t)((int64_t)p * J->gqa / J->hsplit);
    const int32_t gq = (int32_t)((int64_t)(p + 1) * J->gqa / J->hsplit) - h0, hdk = J->hd_k, hdv = J->hd_v;
    const int32_t *cl = J->cells + c0;
    float *qr = sc + (int64_t)nc * gq; /* gq rows of hd_k: the queries rounded as llama.cpp's vec_dot type of K */
    float *kd = qr + (int64_t)gq * hdk, *vd = kd + hdk; /* one dequantised K row, one V row */
    const int32_t nb = hdk / 32;
    float *qsum = vd + J->hd_v, *kmin = qsum + (int64_t)gq * nb; /* q4_1 / q5_1 K: [gq][nb] query sums, [nb] mins */
    for (int32_t h = 0; h < gq; h++) {
        const float *qs = J->q + ((int64_t)i * J->n_head + (int64_t)g * J->gqa + h0 + h) * hdk;
        ub_kv_round_query(J->k_type, qs, qr + (int64_t)h * hdk, hdk);
        if (J->k_min) ub_kv_query_sums(qs, qsum + (int64_t)h * nb, hdk);
    }
    const int64_t kbase = (int64_t)st * J->kv_size;
    const uint8_t *kb = J->k, *vb = J->v;
    const int64_t kst = (int64_t)J->n_head_kv * J->rs_k, vst = (int64_t)J->n_head_kv * J->rs_v;
    if (J->k_f16 && J->kern.scores_f16) /* blocked: bitwise the per-cell loop below */
        J->kern.scores_f16(qr, gq, hdk, kb + (kbase * J->n_head_kv + g) * J->rs_k, kst, cl, nc, sc);
    else if (!J->k_deq && !J->k_f16 && J->kern.scores_f32)
        J->kern.scores_f32(qr, gq, hdk, kb + (kbase * J->n_head_kv + g) * J->rs_k, kst, cl, nc, sc);
    else
    for (int32_t c = 0; c < nc; c++) { /* raw scores sc[h * nc + c]: K row of cell c loaded once for the gq heads */
        const uint8_t *kr = kb + ((kbase + cl[c]) * J->n_head_kv + g) * J->rs_k;
        if (J->k_min) { /* q4_1 / q5_1: d * code . query, plus sum_b m_b * half(query block sum), as llama.cpp */
            ub_kv_dequant_row_split(J->k_type, kr, kd, kmin, hdk);
            J->kern.dots_f32(qr, gq, hdk, kd, sc + c, nc);
            for (int32_t h = 0; h < gq; h++) {
                float add = 0.0f;
                for (int32_t b = 0; b < nb; b++) add += kmin[b] * qsum[(int64_t)h * nb + b];
                sc[(int64_t)h * nc + c] += add;
            }
        } else if (J->k_deq) {
            ub_kv_dequant_row(J->k_type, kr, kd, hdk);
            J->kern.dots_f32(qr, gq, hdk, kd, sc + c, nc);
        } else if (J->k_f16) {
            J->kern.dots_f16(qr, gq, hdk, (const uint16_t *)(const void *)kr, sc + c, nc);
        } else {
            J->kern.dots_f32(qr, gq, hdk, (const float *)(const void *)kr, sc + c, nc);
        }
    }
    float *o = J->out + ((int64_t)i * J->n_head + (int64_t)g * J->gqa + h0) * hdv; /* gq rows of hd_v */
    memset(o, 0, sizeof(float) * (size_t)hdv * (size_t)gq);
    if (nc == 0) return;
    if (J->kern.probs && J->v_type != UB_T_BF16)
        J->kern.probs(sc, gq, nc, J->scale, J->softcap, J->v_type == UB_T_F16);
    else
    for (int32_t h = 0; h < gq; h++) { /* per head: soft-cap, scale, max, exp, double sum, probabilities */
        float *s = sc + (int64_t)h * nc;
        float mx = -INFINITY;
        for (int32_t c = 0; c < nc; c++) {
            float x = s[c];
            if (J->softcap > 0.0f) x = J->softcap * tanhf(x / J->softcap);
            x *= J->scale;
            s[c] = x;
            mx = x > mx ? x : mx;
        }
        double sum = 0.0;
        for (int32_t c = 0; c < nc; c++) {
            s[c] = expf(s[c] - mx);
            sum += (double)s[c];
        }
        const float inv = (float)(1.0 / sum);
        /* probabilities rounded as the V product's vec_dot type (f16 / bf16 V; f32 for a quantised V, which
         * llama.cpp only runs under flash attention, accumulating in f32) */
        if (J->v_type == UB_T_F16 || J->v_type == UB_T_BF16)
            for (int32_t c = 0; c < nc; c++) ub_kv_round_query(J->v_type, (float[1]){s[c] * inv}, s + c, 1);
        else
            for (int32_t c = 0; c < nc; c++) s[c] = s[c] * inv;
    }
    if (J->v_f16 && J->kern.pv_f16) { /* blocked: bitwise the per-cell loop below */
        J->kern.pv_f16(o, gq, hdv, sc, nc, vb + (kbase * J->n_head_kv + g) * J->rs_v, vst, cl);
        return;
    }
    if (!J->v_deq && !J->v_f16 && J->kern.pv_f32) {
        J->kern.pv_f32(o, gq, hdv, sc, nc, vb + (kbase * J->n_head_kv + g) * J->rs_v, vst, cl);
        return;
    }
    for (int32_t c = 0; c < nc; c++) { /* out_h += p_h,c * V row of cell c, cells in list order */
        const uint8_t *vr = vb + ((kbase + cl[c]) * J->n_head_kv + g) * J->rs_v;
        if (J->v_deq) {
            ub_kv_dequant_row(J->v_type, vr, vd, hdv);
            J->kern.axpys_f32(o, gq, hdv, sc + c, nc, vd);
        } else if (J->v_f16) {
            J->kern.axpys_f16(o, gq, hdv, sc + c, nc, (const uint16_t *)(const void *)vr);
        } else {
            J->kern.axpys_f32(o, gq, hdv, sc + c, nc, (const float *)(const void *)vr);
        }
    }
}

static void av_work(void *ctx, int w) {
    av_job *J = ctx;
    float *sc = J->scratch + (int64_t)w * J->scratch_stride;
    const int64_t n_units = (int64_t)J->n_q * J->n_head_kv * J->hsplit;
    for (;;) {
        const long long u = atomic_fetch_add(&J->next, 1);
        if (u >= n_units) break;
        av_unit(J, u, sc);
    }
}

int ub_attention_vis(const float *q, const void *k, int32_t k_type, const void *v, int32_t v_type,
                     const int32_t *row_stream, const int32_t *off, const int32_t *cells, float *out,
                     int32_t n_q, int32_t n_head, int32_t n_head_kv, int32_t hd_k, int32_t hd_v,
                     int32_t n_stream, int32_t kv_size, float scale, float softcap, int32_t n_threads) {
    if (n_q < 0 || n_head <= 0 || n_head_kv <= 0 || n_head % n_head_kv || hd_k <= 0 || hd_v <= 0 ||
        n_stream <= 0 || kv_size <= 0 || n_threads < 1 || !(softcap >= 0.0f) || !isfinite(scale))
        return UB_E_ARG;
    if (ub_kv_row_size(k_type, hd_k) < 0 || ub_kv_row_size(v_type, hd_v) < 0) return UB_E_ARG;
    if (n_q == 0) return UB_OK;
    if (!q || !k || !v || !row_stream || !off || !cells || !out) return UB_E_ARG;
    if (off[0] != 0) return UB_E_ARG;
    int32_t max_list = 0;
    for (int32_t i = 0; i < n_q; i++) {
        if (row_stream[i] < 0 || row_stream[i] >= n_stream || off[i + 1] < off[i]) return UB_E_ARG;
        if (off[i + 1] - off[i] > max_list) max_list = off[i + 1] - off[i];
    }
    for (int32_t t = 0; t < off[n_q]; t++)
        if (cells[t] < 0 || cells[t] >= kv_size) return UB_E_ARG;
    av_job J;
    memset(&J, 0, sizeof J);
    J.q = q;
    J.k = k;
    J.v = v;
    J.k_type = k_type;
    J.v_type = v_type;
    J.k_f16 = k_type == UB_T_F16;
    J.v_f16 = v_type == UB_T_F16;
    J.k_deq = k_type != UB_T_F16 && k_type != UB_T_F32;
    J.k_min = ub_kv_has_min(k_type);
    J.v_deq = v_type != UB_T_F16 && v_type != UB_T_F32;
    J.rs_k = ub_kv_row_size(k_type, hd_k);
    J.rs_v = ub_kv_row_size(v_type, hd_v);
    J.row_stream = row_stream;
    J.off = off;
    J.cells = cells;
    J.out = out;
    J.n_q = n_q;
    J.n_head = n_head;
    J.n_head_kv = n_head_kv;
    J.hd_k = hd_k;
    J.hd_v = hd_v;
    J.kv_size = kv_size;
    J.gqa = n_head / n_head_kv;
    J.scale = scale;
    J.softcap = softcap;
    ub_av_select(&J.kern, ub_mm_backend() != UB_MM_GENERIC, hd_k, hd_v); /* AVX2 kernels on every SIMD back-end */
    if (ub_attn_tiles_enabled()) ub_av_select_tiles(&J.kern, ub_mm_backend(), hd_k, hd_v);
    int nt = n_threads > UB_POOL_MAX ? UB_POOL_MAX : n_threads;
    int64_t units = (int64_t)n_q * n_head_kv;
    J.hsplit = 1;
    if (units < nt) { /* few rows (decode): the query heads of a kv head are shared out too */
        J.hsplit = (int32_t)((nt + units - 1) / units);
        if (J.hsplit > J.gqa) J.hsplit = J.gqa;
        units *= J.hsplit;
    }
    if (nt > units) nt = (int)units;
    J.scratch_stride = ((int64_t)max_list * J.gqa + (int64_t)J.gqa * hd_k + hd_k + hd_v +
                        (int64_t)(J.gqa + 1) * (hd_k / 32) + 15) & ~(int64_t)15;
    J.scratch = malloc(sizeof(float) * (size_t)(J.scratch_stride * nt));
    if (!J.scratch) return UB_E_NOMEM;
    atomic_init(&J.next, 0);
    ub_pool_run(av_work, &J, nt);
    free(J.scratch);
    return UB_OK;
}
