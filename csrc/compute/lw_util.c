/* The helpers shared by the one-call layer (layer.c) and its mixture-of-experts FFN (moe.c). */
#include <stdarg.h>
#include <stdio.h>

#include "ub_common.h"
#include "ub_matmul.h"
#include "lw_util.h"

/* err: char[err_len] or NULL (caller-owned); receives the formatted message. Returns UB_E_ARG. */
int ub_lw_fail(char *err, int32_t err_len, const char *fmt, ...) {
    if (err && err_len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, (size_t)err_len, fmt, ap);
        va_end(ap);
    }
    return UB_E_ARG;
}

/* w: one weight (read only). 1 when it has data and maps n_cols -> n_rows, else 0. */
int ub_lw_shape_ok(const ub_lw *w, int64_t n_cols, int64_t n_rows) {
    return w->data && w->n_cols == n_cols && w->n_rows == n_rows;
}

/* y[p]: float[m][ws[p]->n_rows] (caller-owned) = x: float[m][ws[0]->n_cols] @ W_p.T for the n_w weights ws[p]
 * (read only) of one input: ub_matmul_multi's status. */
int ub_lw_matmul_multi(const ub_lw *const *ws, int32_t n_w, const float *x, int64_t m, float *const *y, int32_t nt) {
    const uint8_t *w[UB_MM_MAXW];
    int64_t bytes[UB_MM_MAXW], rows[UB_MM_MAXW];
    int32_t types[UB_MM_MAXW];
    if (n_w < 1 || n_w > UB_MM_MAXW) return UB_E_ARG;
    for (int32_t p = 0; p < n_w; p++) {
        w[p] = ws[p]->data;
        bytes[p] = ws[p]->nbytes;
        rows[p] = ws[p]->n_rows;
        types[p] = ws[p]->type;
    }
    return ub_matmul_multi(x, m, ws[0]->n_cols, n_w, w, bytes, types, rows, y, nt);
}
