/* ub_moe_ffn: the mixture-of-experts FFN of one layer in one call (llama.cpp's build_moe_ffn with softmax
 * gating and SwiGLU experts; qwen2moe's shared expert).
 *
 * Per row: router logits (ub_matmul), softmax (max, expf, double sum, scaled by the float reciprocal), the
 * n_used largest probabilities in descending order, their weights (optionally normalised by their float sum,
 * optionally scaled). Per expert e, in ascending order: the rows that chose it are gathered and run through
 * ub_matmul_multi (gate, up) -> ub_silu_mul -> ub_matmul (down) on the expert's slice of the stacked
 * weights. Each output row of ub_matmul is one dot-kernel call per weight row over that activation row alone
 * (matmul.c: the result is bitwise independent of the call's row count, tiling and threads), so a row's expert
 * products do not depend on which or how many other rows chose the same expert. The row's output is then
 * y_0 * w_0 + y_1 * w_1 + ... in slot order, and the shared expert's y_s * gate is added last (llama.cpp's
 * order of adds). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ub_common.h"
#include "ub_matmul.h"
#include "ub_repack.h"
#include "ub_moe.h"
#include "lw_util.h"

#define MOE_MAX_EXPERTS 1024

/* w: a weight (read only). 1 when it has data, maps n_cols -> n_rows and its bytes split into whole rows. */
static int lw_ok(const ub_lw *w, int64_t n_cols, int64_t n_rows) {
    return ub_lw_shape_ok(w, n_cols, n_rows) && w->nbytes > 0 && w->nbytes % n_rows == 0;
}

/* The sub-matrix of rows [r0, r0 + rows) of w (same type and columns; data points into w's bytes). */
static ub_lw lw_rows(const ub_lw *w, int64_t r0, int64_t rows) {
    const int64_t rb = w->nbytes / w->n_rows;
    ub_lw s = *w;
    s.data = w->data + r0 * rb;
    s.nbytes = rows * rb;
    s.n_rows = rows;
    return s;
}

/* M: the block's constants (read only). UB_OK when the sizes and weights are consistent, else UB_E_ARG. */
static int moe_check(const ub_moe *M, char *err, int32_t err_len) {
    const int64_t E = M->n_embd, X = M->n_expert, F = M->n_ff_exp, S = M->n_ff_shexp;
    if (E <= 0 || X <= 0 || X > MOE_MAX_EXPERTS || M->n_used <= 0 || M->n_used > X || F <= 0 || S < 0)
        return ub_lw_fail(err, err_len, "moe: bad sizes (n_embd %d, n_expert %d, n_used %d, n_ff_exp %d, "
                        "n_ff_shexp %d)", M->n_embd, M->n_expert, M->n_used, M->n_ff_exp, M->n_ff_shexp);
    if (M->gating != UB_MOE_GATING_SOFTMAX)
        return ub_lw_fail(err, err_len, "moe: gating function %d is not supported (softmax only)", M->gating);
    if (!isfinite(M->w_scale)) return ub_lw_fail(err, err_len, "moe: w_scale is not finite");
    if (!lw_ok(&M->gate_inp, E, X)) return ub_lw_fail(err, err_len, "moe: gate_inp must map n_embd -> n_expert");
    if (!lw_ok(&M->gate_exps, E, X * F) || !lw_ok(&M->up_exps, E, X * F))
        return ub_lw_fail(err, err_len, "moe: gate_exps / up_exps must map n_embd -> n_expert * n_ff_exp");
    if (!lw_ok(&M->down_exps, F, X * E))
        return ub_lw_fail(err, err_len, "moe: down_exps must map n_ff_exp -> n_expert * n_embd");
    if ((M->gate_exps.type | M->up_exps.type | M->down_exps.type) & UB_MM_REPACKED) /* sliced per expert */
        return ub_lw_fail(err, err_len, "moe: the expert stacks must be in GGUF layout (not repacked)");
    if (S > 0) {
        if (!lw_ok(&M->gate_shexp, E, S) || !lw_ok(&M->up_shexp, E, S) || !lw_ok(&M->down_shexp, S, E))
            return ub_lw_fail(err, err_len, "moe: the shared expert's gate / up / down must map n_embd -> "
                            "n_ff_shexp -> n_embd");
        if (M->gate_inp_shexp.data && !lw_ok(&M->gate_inp_shexp, E, 1))
            return ub_lw_fail(err, err_len, "moe: gate_inp_shexp must map n_embd -> 1");
    }
    return UB_OK;
}

/* p: float[X] the router logits of one row, replaced by their softmax (ggml's soft_max: max, expf of the
 * differences, their sum in double, each multiplied by the float of 1 / sum). */
static void softmax_row(float *p, int64_t X) {
    float mx = -INFINITY;
    for (int64_t e = 0; e < X; e++) mx = p[e] > mx ? p[e] : mx;
    double sum = 0.0;
    for (int64_t e = 0; e < X; e++) {
        p[e] = expf(p[e] - mx);
        sum += (double)p[e];
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t e = 0; e < X; e++) p[e] *= inv;
}

/* p: float[X] probabilities (read only); sel: int32[k] (written) the k largest in descending order, the lower
 * index first on ties; w: float[k] (written) their probabilities. NaN-safe: every sel entry is a distinct
 * index of [0, X). taken: uint8[X] scratch. */
static void top_k(const float *p, int64_t X, int32_t k, int32_t *sel, float *w, unsigned char *taken) {
    memset(taken, 0, (size_t)X);
    for (int32_t s = 0; s < k; s++) {
        int64_t best = -1;
        for (int64_t e = 0; e < X; e++) {
            if (taken[e]) continue;
            if (best < 0 || p[e] > p[best]) best = e;
        }
        taken[best] = 1;
        sel[s] = (int32_t)best;
        w[s] = p[best];
    }
}

/* w: float[k] one row's selected weights, normalised (by their sum, as ggml's sum_rows: double, rounded to
 * float, clamped to >= 2^-14) and scaled as M says. */
static void finish_weights(const ub_moe *M, float *w, int32_t k) {
    if (M->norm_w) {
        double s = 0.0;
        for (int32_t j = 0; j < k; j++) s += (double)w[j];
        float sum = (float)s;
        if (!(sum >= 6.103515625e-5f)) sum = 6.103515625e-5f;
        for (int32_t j = 0; j < k; j++) w[j] = w[j] / sum;
    }
    if (M->w_scale != 0.0f && M->w_scale != 1.0f)
        for (int32_t j = 0; j < k; j++) w[j] *= M->w_scale;
}

/* y[p]: float[m][rows of ws[p]] = x: float[m][n_cols] @ W_p.T, n_w weights of one input. */
static int mm_w(const ub_lw *const *ws, int32_t n_w, const float *x, int64_t m, float *const *y, int32_t nt) {
    if (n_w == 1)
        return ub_matmul(x, m, ws[0]->n_cols, ws[0]->data, ws[0]->nbytes, ws[0]->type, ws[0]->n_rows, y[0], nt);
    return ub_lw_matmul_multi(ws, n_w, x, m, y, nt);
}

/* One SwiGLU FFN over m rows: d: float[m][E] = down(silu(x @ gate.T) * (x @ up.T)); g, u: float[m][F]
 * scratch; x: float[m][E]. */
static int swiglu_ffn(const ub_lw *gate, const ub_lw *up, const ub_lw *down, const float *x, int64_t m,
                      float *g, float *u, float *d, int32_t nt) {
    const ub_lw *ws[2] = {gate, up};
    float *ys[2] = {g, u};
    int rc = mm_w(ws, 2, x, m, ys, nt);
    if (rc != UB_OK) return rc;
    ub_silu_mul(g, u, g, m * gate->n_rows);
    const ub_lw *wd[1] = {down};
    float *yd[1] = {d};
    return mm_w(wd, 1, g, m, yd, nt);
}

/* Buffers (one allocation): logits[n][X], wt[n][k], Y[n][k][E] (each (row, slot)'s expert output), xg[n][E]
 * (gathered rows), g, u[n][Fmax], dg[n][E]; ints: sel[n][k], rows[n], slots[n]; taken[X]. */
int ub_moe_ffn(const ub_moe *M, const float *h, int32_t n, float *out, int32_t *sel_out, float *wts_out,
               int32_t n_threads, char *err, int32_t err_len) {
    if (!M) return ub_lw_fail(err, err_len, "moe: constants missing");
    int rc = moe_check(M, err, err_len);
    if (rc != UB_OK) return rc;
    if (n < 0 || (n > 0 && (!h || !out))) return ub_lw_fail(err, err_len, "moe: h / out missing or n = %d < 0", n);
    if (n_threads < 1) return ub_lw_fail(err, err_len, "moe: n_threads = %d < 1", n_threads);
    if (n == 0) return UB_OK;
    const int64_t E = M->n_embd, X = M->n_expert, F = M->n_ff_exp, S = M->n_ff_shexp, k = M->n_used;
    const int64_t Fm = S > F ? S : F;
    const size_t nf = (size_t)n * (size_t)(X + k + k * E + E + 2 * Fm + E + 1);
    float *fb = malloc(sizeof(float) * nf);
    int32_t *ib = malloc(sizeof(int32_t) * (size_t)n * (size_t)(k + 2));
    unsigned char *taken = malloc((size_t)X);
    if (!fb || !ib || !taken) {
        free(fb);
        free(ib);
        free(taken);
        return UB_E_NOMEM;
    }
    float *logits = fb, *wt = logits + n * X, *Y = wt + n * k, *xg = Y + n * k * E, *g = xg + n * E;
    float *u = g + n * Fm, *dg = u + n * Fm, *gs = dg + n * E;
    int32_t *sel = ib, *rows = sel + n * k, *slots = rows + n;
    /* routing */
    {
        const ub_lw *ws[1] = {&M->gate_inp};
        float *ys[1] = {logits};
        rc = mm_w(ws, 1, h, n, ys, n_threads);
        if (rc != UB_OK) goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        softmax_row(logits + i * X, X);
        top_k(logits + i * X, X, (int32_t)k, sel + i * k, wt + i * k, taken);
        finish_weights(M, wt + i * k, (int32_t)k);
    }
    /* experts in ascending order, each over the rows that chose it */
    for (int64_t e = 0; e < X; e++) {
        int64_t m = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t s = 0; s < k; s++)
                if (sel[i * k + s] == e) {
                    rows[m] = (int32_t)i;
                    slots[m] = (int32_t)s;
                    memcpy(xg + m * E, h + i * E, sizeof(float) * (size_t)E);
                    m++;
                }
        if (!m) continue;
        const ub_lw ge = lw_rows(&M->gate_exps, e * F, F), ue = lw_rows(&M->up_exps, e * F, F);
        const ub_lw de = lw_rows(&M->down_exps, e * E, E);
        rc = swiglu_ffn(&ge, &ue, &de, xg, m, g, u, dg, n_threads);
        if (rc != UB_OK) goto done;
        for (int64_t j = 0; j < m; j++)
            memcpy(Y + ((int64_t)rows[j] * k + slots[j]) * E, dg + j * E, sizeof(float) * (size_t)E);
    }
    /* weighted sum in slot order */
    for (int64_t i = 0; i < n; i++) {
        float *o = out + i * E;
        const float *y = Y + i * k * E, *w = wt + i * k;
        for (int64_t c = 0; c < E; c++) o[c] = y[c] * w[0];
        for (int64_t s = 1; s < k; s++) {
            const float *ys = y + s * E;
            const float ws = w[s];
            for (int64_t c = 0; c < E; c++) {
                const float t = ys[c] * ws;
                o[c] = o[c] + t;
            }
        }
    }
    /* shared expert: out += ffn_shexp(h) * sigmoid(h . gate_inp_shexp), the sigmoid as ggml's silu(x) / x */
    if (S > 0) {
        rc = swiglu_ffn(&M->gate_shexp, &M->up_shexp, &M->down_shexp, h, n, g, u, dg, n_threads);
        if (rc != UB_OK) goto done;
        if (M->gate_inp_shexp.data) {
            const ub_lw *ws[1] = {&M->gate_inp_shexp};
            float *ys[1] = {gs};
            rc = mm_w(ws, 1, h, n, ys, n_threads);
            if (rc != UB_OK) goto done;
        }
        for (int64_t i = 0; i < n; i++) {
            float gate = 1.0f;
            if (M->gate_inp_shexp.data) {
                const float x = gs[i], si = x / (1.0f + expf(-x));
                gate = si / x;
            }
            float *o = out + i * E;
            const float *d = dg + i * E;
            for (int64_t c = 0; c < E; c++) {
                const float t = d[c] * gate;
                o[c] = o[c] + t;
            }
        }
    }
    if (sel_out) memcpy(sel_out, sel, sizeof(int32_t) * (size_t)(n * k));
    if (wts_out) memcpy(wts_out, wt, sizeof(float) * (size_t)(n * k));
done:
    if (rc != UB_OK && rc != UB_E_NOMEM && err && err_len > 0 && !err[0])
        ub_lw_fail(err, err_len, "moe: matmul failed (status %d)", rc);
    free(fb);
    free(ib);
    free(taken);
    return rc;
}
