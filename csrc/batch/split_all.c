/* Batch allocator: the whole split loop in one call (what llama.cpp's memory->init_batch runs: split_reset,
 * then one strategy's splits until nothing is left), so a plan costs one crossing from Python. */
#include <stdlib.h>

#include "alloc_state.h"

/* kind: 0 simple, 1 equal (sequential, n_keep_tail, strict as ub_alloc_split_equal), 2 seq.
 * On UB_OK, *out is a malloc'ed array of *n_out new ubatches in split order (the caller frees each with
 * ub_ubatch_free and the array with ub_alloc_free_ubatch_array; *out is NULL when *n_out is 0). On failure
 * returns the status (message in ub_alloc_error), frees everything it made, and leaves the allocator as after
 * ub_alloc_split_reset. */
int ub_alloc_split_all(ub_alloc *a, int32_t kind, int32_t n_ubatch, int32_t sequential, int32_t n_keep_tail,
                       int32_t strict, ub_ubatch ***out, int32_t *n_out) {
    if (!a || !out || !n_out) return UB_E_ARG;
    *out = NULL;
    *n_out = 0;
    if (kind < 0 || kind > 2) return ub_alloc_fail(a, UB_E_ARG, "unknown split kind %d", kind);
    int rc = ub_alloc_split_reset(a);
    if (rc != UB_OK) return rc;
    int32_t cap = 0, n = 0, status = UB_OK;
    ub_ubatch **arr = NULL;
    for (;;) {
        ub_ubatch *ub = kind == 0 ? ub_alloc_split_simple(a, n_ubatch, &status)
                      : kind == 1 ? ub_alloc_split_equal(a, n_ubatch, sequential, n_keep_tail, strict, &status)
                                  : ub_alloc_split_seq(a, n_ubatch, &status);
        if (!ub) break;
        if (n == cap) {
            int32_t ncap = cap ? 2 * cap : 16;
            ub_ubatch **grown = realloc(arr, sizeof(*arr) * (size_t)ncap);
            if (!grown) {
                ub_ubatch_free(ub);
                status = ub_alloc_fail(a, UB_E_NOMEM, "out of memory while collecting %d ubatches", n + 1);
                break;
            }
            arr = grown;
            cap = ncap;
        }
        arr[n++] = ub;
    }
    if (status != UB_OK) {
        for (int32_t i = 0; i < n; i++) ub_ubatch_free(arr[i]);
        free(arr);
        ub_alloc_split_reset(a);
        return status;
    }
    *out = arr;
    *n_out = n;
    return UB_OK;
}

/* Frees the array made by ub_alloc_split_all (not the ubatches it points to). */
void ub_alloc_free_ubatch_array(ub_ubatch **arr) {
    free(arr);
}
