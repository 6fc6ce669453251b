/* A KV cache's cell metadata as bytes (ubatch's own format, docs/compat.md "State format"): what
 * llama_state_get_data / llama_state_save_file / Llama.save_state serialise for the metadata half of a
 * context (the K/V data half is the runner's numpy arrays). Reading validates everything before it
 * changes anything: a truncated, corrupt or foreign buffer is refused with a message, the cache untouched. */
#ifndef UB_KV_STATE_H
#define UB_KV_STATE_H

#include "ub_kv.h"

/* cdef:begin */
/* Bytes ub_kv_state_write needs for this cache's current state. */
int64_t ub_kv_state_size(const ub_kv *kv);
/* Writes the state to buf (uint8[cap], caller-owned). Returns the bytes written, or -1 when cap is too
 * small (nothing written). */
int64_t ub_kv_state_write(const ub_kv *kv, uint8_t *buf, int64_t cap);
/* Replaces the cache's state with the one in buf (uint8[n], caller-owned, read only). UB_OK, or UB_E_ARG
 * (bad magic / version / geometry / length / cell contents; message in ub_kv_error), UB_E_NOMEM, UB_E_ORDER
 * (inside a transaction); on failure the cache is unchanged. */
int ub_kv_state_read(ub_kv *kv, const uint8_t *buf, int64_t n);
/* cdef:end */

#endif
