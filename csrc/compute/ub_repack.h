/* Weights repacked at load into interleaved panels (repack.c): one C call per eligible tensor converts its
 * GGUF blocks into a panel layout owned by C; ub_matmul / ub_matmul_multi / ub_get_rows take the result in
 * place of the GGUF bytes when the type argument carries UB_MM_REPACKED. Shapes and ownership at each
 * function; the layouts are described in rp_internal.h and docs/kernels.md ("Repacked panels"). */
#ifndef UB_REPACK_H
#define UB_REPACK_H

#include <stdint.h>

/* cdef:begin */
/* A type argument of ub_matmul / ub_matmul_multi / ub_get_rows (or ub_lw.type) with this bit set says that
 * the weight pointer is a ub_rp (cast to const uint8_t *) and not GGUF bytes; w_bytes stays the GGUF size
 * (n_rows * row_bytes) and type & 0xFFFF the GGUF type. A mismatch of type, rows, cols or bytes with the
 * ub_rp is UB_E_ARG. */
enum { UB_MM_REPACKED = 0x10000 };
typedef struct ub_rp ub_rp;

/* Rows per panel of weight type `type`'s repacked layout (a multiple of 8), or 0 when the type has none. */
int32_t ub_rp_panel_rows(int32_t type);

/* A repacked copy of a weight: w: n_rows x n_cols of `type` in GGUF layout (w_bytes bytes, read only, may be a
 * memory map). The first n_rows - n_rows % P rows become panels (P = ub_rp_panel_rows(type)); the remaining
 * rows are copied in GGUF layout (the tail, computed by the type's dot kernels). Returned object owned by
 * the caller, freed by ub_rp_free. drop != 0: afterwards the whole pages inside [w, w + w_bytes) are
 * released with madvise(MADV_RANDOM, then MADV_DONTNEED: no fault-around brings them back) - only for a read-only file mapping (the pages are read back from
 * the file if touched again); never for anonymous memory, whose contents it would zero. Returns NULL when
 * the type has no layout, n_rows < P, the sizes disagree or memory is short (nothing dropped then). */
ub_rp *ub_rp_new(const uint8_t *w, int64_t w_bytes, int32_t type, int64_t n_rows, int64_t n_cols, int32_t drop);
/* Frees rp and everything it owns (NULL: nothing). */
void ub_rp_free(ub_rp *rp);
/* Bytes rp owns (panels + tail); bytes of the source range released by drop (0 when none). */
int64_t ub_rp_bytes(const ub_rp *rp);
int64_t ub_rp_dropped(const ub_rp *rp);
/* The GGUF bytes back from the panels (round trip): out: uint8[out_bytes], out_bytes = n_rows * row_bytes.
 * Returns UB_OK or UB_E_ARG. */
int ub_rp_unpack(const ub_rp *rp, uint8_t *out, int64_t out_bytes);
/* cdef:end */

#endif
