/* What layer.c and moe.c share: a formatted argument error, a weight's shape test and the multi-weight matmul
 * over ub_lw weights. Internal to compute/ (no cdef block). */
#ifndef UB_LW_UTIL_H
#define UB_LW_UTIL_H

#include <stdint.h>

#include "ub_layer.h"

/* err: char[err_len] or NULL (caller-owned); receives the formatted message, truncated to fit. Returns
 * UB_E_ARG. */
int ub_lw_fail(char *err, int32_t err_len, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* w: one weight (read only). 1 when it has data and maps n_cols -> n_rows, else 0. */
int ub_lw_shape_ok(const ub_lw *w, int64_t n_cols, int64_t n_rows);

/* y[p]: float[m][ws[p]->n_rows] (caller-owned) = x: float[m][ws[0]->n_cols] @ W_p.T for the n_w (1 ..
 * UB_MM_MAXW) weights ws[p] (read only) of one input: ub_matmul_multi's status. */
int ub_lw_matmul_multi(const ub_lw *const *ws, int32_t n_w, const float *x, int64_t m, float *const *y, int32_t nt);

#endif
