/* K/V cache row codecs: the element types llama.cpp offers for type_k / type_v (ggml's type ids), rows
 * quantised when written (blocks of 32 along the row, at ggml's reference rounding) and dequantised when
 * read by the visible-cell attention. */
#ifndef UB_KV_QUANT_H
#define UB_KV_QUANT_H

#include <stdint.h>

#include "ub_matmul.h" /* the UB_T_* types (ggml's ids) */

/* cdef:begin */
/* Bytes of one row of n elements of `type`; -1 when the type is unknown or n <= 0 or n is not a multiple
 * of the type's block (32 for the quantised types, 1 for f32 / f16 / bf16). */
int64_t ub_kv_row_size(int32_t type, int32_t n);

/* Quantise n_rows rows of n floats (src: float[n_rows][n], read only) into dst (caller-owned bytes):
 * row i goes to dst + idx[i] * ub_kv_row_size(type, n) (idx: int64[n_rows], each in [0, dst_rows); NULL
 * means idx[i] = i and n_rows <= dst_rows). Returns UB_OK or UB_E_ARG (nothing written). */
int ub_kv_store_rows(int32_t type, const float *src, int64_t n_rows, int32_t n, void *dst, int64_t dst_rows,
                     const int64_t *idx);

/* Dequantise n_rows rows of n elements: src: bytes of n_rows rows (read only) -> dst float[n_rows][n].
 * Returns UB_OK or UB_E_ARG. */
int ub_kv_load_rows(int32_t type, const void *src, int64_t n_rows, int32_t n, float *dst);
/* cdef:end */

/* Internal: one row (n a valid row length for type, checked by the caller). */
void ub_kv_quant_row(int32_t type, const float *x, void *y, int32_t n);
void ub_kv_dequant_row(int32_t type, const void *x, float *y, int32_t n);
/* The query row as llama.cpp rounds it for a dot with a K row of k_type (its vec_dot type): f16 / bf16
 * rounding, a q8_0 round trip for the quantised types, unchanged for f32. q, out: float[n]. */
void ub_kv_round_query(int32_t k_type, const float *q, float *out, int32_t n);
/* 1 for the block-quantised types (not f32 / f16 / bf16). */
int ub_kv_is_quant(int32_t type);

#endif
