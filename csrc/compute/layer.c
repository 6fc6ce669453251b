/* ub_layer_forward: one llama / qwen2 / gemma3 decoder layer in one call (q/k norms, attention soft-cap
 * and a mixture-of-experts FFN (moe.c) as options of any kind). Every step is one of the kernels
 * the Python reference path (forward_reference in ubatch/model/arch/) calls, in the same order, with the
 * same float operations for the glue (bias and residual adds, the Q scale), so the result is bitwise the
 * Python path's. The last layer's row selection (keep) is done before the attention-output matmul: each
 * matmul row depends on its own input row only, so the kept rows are unchanged by it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ub_common.h"
#include "ub_compute.h"
#include "ub_matmul.h"
#include "ub_layer.h"
#include "ub_kv_quant.h"
#include "ub_moe.h"
#include "lw_util.h"
#include "ub_pool.h"
#include "act_simd.h"

#include <stdatomic.h>

/* y: float[n][w->n_rows] = x: float[n][w->n_cols] @ W.T (ub_matmul). */
static int mm(const ub_lw *w, const float *x, int64_t n, float *y, int32_t nt, const char *name, char *err,
              int32_t err_len) {
    const int rc = ub_matmul(x, n, w->n_cols, w->data, w->nbytes, w->type, w->n_rows, y, nt);
    if (rc == UB_E_NOMEM) return rc;
    if (rc != UB_OK) return ub_lw_fail(err, err_len, "matmul by %s failed (status %d)", name, rc);
    return UB_OK;
}

/* y[p]: float[n][ws[p]->n_rows] = x @ W_p.T for the n_w weights of one input (ub_matmul_multi). */
static int mm_n(const ub_lw *const *ws, int32_t n_w, const float *x, int64_t n, float *const *y, int32_t nt,
                const char *name, char *err, int32_t err_len) {
    const int rc = ub_lw_matmul_multi(ws, n_w, x, n, y, nt);
    if (rc == UB_E_NOMEM) return rc;
    if (rc != UB_OK) return ub_lw_fail(err, err_len, "matmul by %s failed (status %d)", name, rc);
    return UB_OK;
}

/* y: float[rows][d] += b: float[d] per row, when b is not NULL. */
static void add_vec(float *y, const float *b, int64_t rows, int64_t d) {
    if (!b) return;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < d; j++) y[i * d + j] += b[j];
}

/* x, a: float[n] ; x += a elementwise. */
static void add_to(float *x, const float *a, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = x[i] + a[i];
}

/* a: float[n] *= s, unless s == 0 (no scale). */
static void scale_by(float *a, float s, int64_t n) {
    if (s == 0.0f) return;
    for (int64_t i = 0; i < n; i++) a[i] *= s;
}

/* The gated activation g = act(g) * u over n elements, shared out in chunks among the pool's threads when n
 * is large (prefill); elementwise, so the split changes nothing. table: the GELU table, or NULL for SiLU. */
typedef struct {
    const float *table, *u;
    float *g;
    int64_t n;
    atomic_llong next;
} gated_job;

#define GATED_CHUNK 8192

/* ctx: a gated_job (g, u float[n], caller-owned); w: the participant (unused: chunks come from a counter). */
static void gated_work(void *ctx, int w) {
    (void)w;
    gated_job *J = ctx;
    for (;;) {
        const int64_t c = atomic_fetch_add(&J->next, 1) * GATED_CHUNK;
        if (c >= J->n) break;
        const int64_t len = J->n - c < GATED_CHUNK ? J->n - c : GATED_CHUNK;
        if (J->table) ub_gelu_table_mul(J->table, J->g + c, J->u + c, J->g + c, len);
        else ub_silu_mul(J->g + c, J->u + c, J->g + c, len);
    }
}

/* g, u: float[n]; g = act(g) * u in place. */
static void gated(const float *table, float *g, const float *u, int64_t n, int32_t n_threads) {
    gated_job J;
    J.table = table;
    J.g = g;
    J.u = u;
    J.n = n;
    atomic_init(&J.next, 0);
    const int64_t chunks = (n + GATED_CHUNK - 1) / GATED_CHUNK;
    int nt = n < 4 * GATED_CHUNK ? 1 : n_threads;
    if (nt > chunks) nt = (int)chunks;
    ub_pool_run(gated_work, &J, nt);
}

/* L: the layer's constants (read only); err: char[err_len] for the message. UB_OK when the sizes, weights
 * and the vectors the layer kind needs are consistent, else UB_E_ARG naming the culprit. */
static int check_layer(const ub_layer *L, char *err, int32_t err_len) {
    const int64_t E = L->n_embd, hq = (int64_t)L->n_head * L->head_dim, hk = (int64_t)L->n_head_kv * L->head_dim;
    if (L->kind != UB_LAYER_LLAMA && L->kind != UB_LAYER_GEMMA3) return ub_lw_fail(err, err_len, "unknown layer kind %d", L->kind);
    if (E <= 0 || L->n_head <= 0 || L->n_head_kv <= 0 || L->head_dim <= 0 || (!L->moe && L->n_ff <= 0) ||
        L->n_head % L->n_head_kv)
        return ub_lw_fail(err, err_len, "bad layer sizes (n_embd %d, n_head %d, n_head_kv %d, head_dim %d, n_ff %d)",
                    L->n_embd, L->n_head, L->n_head_kv, L->head_dim, L->n_ff);
    if (!ub_lw_shape_ok(&L->wq, E, hq)) return ub_lw_fail(err, err_len, "wq must map n_embd -> n_head*head_dim");
    if (!ub_lw_shape_ok(&L->wk, E, hk)) return ub_lw_fail(err, err_len, "wk must map n_embd -> n_head_kv*head_dim");
    if (!ub_lw_shape_ok(&L->wv, E, hk)) return ub_lw_fail(err, err_len, "wv must map n_embd -> n_head_kv*head_dim");
    if (!ub_lw_shape_ok(&L->wo, hq, E)) return ub_lw_fail(err, err_len, "wo must map n_head*head_dim -> n_embd");
    if (L->moe) {
        if (L->moe->n_embd != E) return ub_lw_fail(err, err_len, "moe: n_embd %d != the layer's %d", L->moe->n_embd, L->n_embd);
    } else {
        if (!ub_lw_shape_ok(&L->w_gate, E, L->n_ff)) return ub_lw_fail(err, err_len, "w_gate must map n_embd -> n_ff");
        if (!ub_lw_shape_ok(&L->w_up, E, L->n_ff)) return ub_lw_fail(err, err_len, "w_up must map n_embd -> n_ff");
        if (!ub_lw_shape_ok(&L->w_down, L->n_ff, E)) return ub_lw_fail(err, err_len, "w_down must map n_ff -> n_embd");
    }
    if (!(L->attn_softcap >= 0.0f)) return ub_lw_fail(err, err_len, "attn_softcap must be >= 0");
    if (!L->q_norm != !L->k_norm) return ub_lw_fail(err, err_len, "q_norm and k_norm go together");
    if (L->qk_norm_full != 0 && L->qk_norm_full != 1) return ub_lw_fail(err, err_len, "qk_norm_full must be 0 or 1");
    if (L->kind == UB_LAYER_GEMMA3 && (!L->attn_norm || !L->ffn_norm || !L->post_attn_norm || !L->post_ffw_norm ||
                                       !L->gelu_table))
        return ub_lw_fail(err, err_len, "gemma layer: pre / post norms and gelu_table are required");
    if (L->rope_mode != UB_ROPE_NORM && L->rope_mode != UB_ROPE_NEOX)
        return ub_lw_fail(err, err_len, "rope_mode %d is not supported by the fused layer", L->rope_mode);
    return UB_OK;
}

/* Writes row i of k, v (float[n][n_head_kv*head_dim]) into the cells kv->dst[i] (checked in range). */
static int write_kv(const ub_layer_kv *kv, const float *k, const float *v, int64_t n, int64_t row, char *err,
                    int32_t err_len) {
    const int64_t cap = (int64_t)kv->n_stream * kv->kv_size;
    for (int64_t i = 0; i < n; i++)
        if (kv->dst[i] < 0 || kv->dst[i] >= cap)
            return ub_lw_fail(err, err_len, "kv dst[%lld] = %lld out of range [0, %lld)", (long long)i,
                        (long long)kv->dst[i], (long long)cap);
    /* one codec call per buffer: row i quantised (f16 / bf16 / q*) or copied into cell dst[i] */
    ub_kv_store_rows(kv->k_type, k, n, (int32_t)row, kv->k, cap, kv->dst);
    ub_kv_store_rows(kv->v_type, v, n, (int32_t)row, kv->v, cap, kv->dst);
    return UB_OK;
}

/* Copies rows keep[j] of a (float[n][d]) to rows j (keep strictly ascending, so keep[j] >= j). */
static void compact(float *a, int64_t d, const int32_t *keep, int32_t n_keep) {
    for (int32_t j = 0; j < n_keep; j++)
        if (keep[j] != j) memmove(a + (int64_t)j * d, a + (int64_t)keep[j] * d, sizeof(float) * (size_t)d);
}

/* Buffers (one allocation): h[n][E], q/o[n][hq], k, v[n][hk], a[n][E], g, u[n][n_ff]. */
int ub_layer_forward(const ub_layer *L, const ub_layer_kv *kv, float *x, int32_t n, const int32_t *pos,
                     int32_t n_pos, const int32_t *keep, int32_t n_keep, int32_t n_threads, char *err,
                     int32_t err_len) {
    if (!L || !kv) return ub_lw_fail(err, err_len, "layer / kv missing");
    int rc = check_layer(L, err, err_len);
    if (rc != UB_OK) return rc;
    if (n <= 0 || !x || !pos || n_pos < 1) return ub_lw_fail(err, err_len, "x / pos missing or n = %d <= 0", n);
    if (n_threads < 1) return ub_lw_fail(err, err_len, "n_threads = %d < 1", n_threads);
    if (!kv->k || !kv->v || !kv->dst || !kv->row_stream || !kv->off || !kv->cells || kv->n_stream < 1 ||
        kv->kv_size < 1 || ub_kv_row_size(kv->k_type, L->head_dim) < 0 ||
        ub_kv_row_size(kv->v_type, L->head_dim) < 0)
        return ub_lw_fail(err, err_len, "kv: missing buffer, bad type or size");
    int32_t m = n;
    if (keep) {
        if (n_keep < 0 || n_keep > n) return ub_lw_fail(err, err_len, "n_keep = %d out of [0, %d]", n_keep, n);
        for (int32_t j = 0; j < n_keep; j++)
            if (keep[j] < 0 || keep[j] >= n || (j && keep[j] <= keep[j - 1]))
                return ub_lw_fail(err, err_len, "keep must be strictly ascending rows of [0, %d); keep[%d] = %d", n, j,
                            keep[j]);
        m = n_keep;
    }
    const int64_t E = L->n_embd, H = L->n_head, Hk = L->n_head_kv, hd = L->head_dim, F = L->n_ff;
    const int64_t hq = H * hd, hk = Hk * hd;
    const int gemma = L->kind == UB_LAYER_GEMMA3;
    const int64_t Fb = L->moe ? 0 : F;
    float *buf = malloc(sizeof(float) * (size_t)n * (size_t)(2 * E + 2 * hq + 2 * hk + 2 * Fb));
    if (!buf) return UB_E_NOMEM;
    float *h = buf, *q = h + n * E, *k = q + n * hq, *v = k + n * hk, *o = v + n * hk, *a = o + n * hq;
    float *g = a + n * E, *u = g + n * Fb;
    const float eps = L->eps;
#define TRY(expr) do { rc = (expr); if (rc != UB_OK) goto done; } while (0)
    /* attention block */
    if (L->attn_norm) TRY(ub_rms_norm(x, n, E, L->attn_norm, eps, h));
    else memcpy(h, x, sizeof(float) * (size_t)(n * E));
    {
        const ub_lw *ws[3] = {&L->wq, &L->wk, &L->wv};
        float *ys[3] = {q, k, v};
        TRY(mm_n(ws, 3, h, n, ys, n_threads, "wq / wk / wv", err, err_len));
    }
    add_vec(q, L->bq, n, hq);
    add_vec(k, L->bk, n, hk);
    if (L->q_norm) {
        const int64_t dq = L->qk_norm_full ? hq : hd, dk = L->qk_norm_full ? hk : hd;
        TRY(ub_rms_norm(q, n * hq / dq, dq, L->q_norm, eps, q));
        TRY(ub_rms_norm(k, n * hk / dk, dk, L->k_norm, eps, k));
    }
    add_vec(v, L->bv, n, hk);
    if (!L->no_rope) {
        TRY(ub_rope_ext(q, n, (int32_t)H, (int32_t)hd, L->n_rot, pos, n_pos, L->rope_mode, L->rope_base,
                        L->rope_scale, NULL, L->yarn));
        TRY(ub_rope_ext(k, n, (int32_t)Hk, (int32_t)hd, L->n_rot, pos, n_pos, L->rope_mode, L->rope_base,
                        L->rope_scale, NULL, L->yarn));
    }
    if (gemma || L->q_scale != 1.0f)
        for (int64_t i = 0; i < n * hq; i++) q[i] *= L->q_scale;
    TRY(write_kv(kv, k, v, n, hk, err, err_len));
    rc = ub_attention_vis(q, kv->k, kv->k_type, kv->v, kv->v_type, kv->row_stream, kv->off, kv->cells, o, n,
                          (int32_t)H, (int32_t)Hk, (int32_t)hd, (int32_t)hd, kv->n_stream, kv->kv_size,
                          L->kq_scale, L->attn_softcap, n_threads);
    if (rc == UB_E_ARG) rc = ub_lw_fail(err, err_len, "attention: invalid visible-cell lists");
    if (rc != UB_OK) goto done;
    if (keep) {
        compact(o, hq, keep, n_keep);
        compact(x, E, keep, n_keep);
    }
    if (m == 0) goto done;
    TRY(mm(&L->wo, o, m, a, n_threads, "wo", err, err_len));
    add_vec(a, L->bo, m, E);
    if (L->post_attn_norm) TRY(ub_rms_norm(a, m, E, L->post_attn_norm, eps, a));
    scale_by(a, L->residual_scale, m * E);
    add_to(x, a, m * E);
    /* feed-forward block */
    if (L->ffn_norm) TRY(ub_rms_norm(x, m, E, L->ffn_norm, eps, h));
    else memcpy(h, x, sizeof(float) * (size_t)(m * E));
    if (L->moe) {
        TRY(ub_moe_ffn(L->moe, h, m, a, NULL, NULL, n_threads, err, err_len));
    } else {
        const ub_lw *ws[2] = {&L->w_gate, &L->w_up};
        float *ys[2] = {g, u};
        TRY(mm_n(ws, 2, h, m, ys, n_threads, "w_gate / w_up", err, err_len));
        gated(gemma ? L->gelu_table : NULL, g, u, m * F, n_threads);
        TRY(mm(&L->w_down, g, m, a, n_threads, "w_down", err, err_len));
    }
    if (L->post_ffw_norm) TRY(ub_rms_norm(a, m, E, L->post_ffw_norm, eps, a));
    scale_by(a, L->residual_scale, m * E);
    add_to(x, a, m * E);
#undef TRY
done:
    free(buf);
    if (rc == UB_E_ARG && err && err_len > 0 && !err[0]) ub_lw_fail(err, err_len, "invalid arguments");
    return rc;
}

/* table: float[65536]; g, u, y: float[n] (y may alias g or u). */
void ub_gelu_table_mul(const float *table, const float *g, const float *u, float *y, int64_t n) {
    /* the SIMD back-ends: the same per lane, 8 at a time (act_simd.c); the tail here */
    for (int64_t i = n > 0 ? ub_gelu_table_mul_simd(table, g, u, y, n, ub_mm_backend()) : 0; i < n; i++) {
        const float a = g[i];
        const float act = a >= 10.0f ? a : a <= -10.0f ? 0.0f : table[ub_f2h(a)];
        y[i] = act * u[i];
    }
}
