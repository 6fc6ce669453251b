/* The KV cache's cell metadata (llama_kv_cache + llama_kv_cells): streams of cells, slot search, ubatch
 * placement with an exact dry run, sequence operations and the KQ mask. No K/V data lives here (the
 * runner owns it); cross-stream copies and the pending K-shift are handed out by ub_kv_take_update.
 * One handle per Python KVCache; all state is owned by the handle. */
#ifndef UB_KV_H
#define UB_KV_H

#include "ub_common.h"

/* cdef:begin */
/* SWA types (llama_swa_type). */
enum { UB_SWA_NONE = 0, UB_SWA_STANDARD = 1, UB_SWA_CHUNKED = 2, UB_SWA_SYMMETRIC = 3 };

typedef struct ub_kv ub_kv;
typedef struct ub_kv_snap ub_kv_snap;

/* n_stream >= 1 streams of `size` cells. Sequence ids 0..n_seq-1 are valid, where n_seq = 256 when
 * n_stream == 1 (every id maps to stream 0) and n_seq = n_stream otherwise (id s -> stream s).
 * Returns NULL on a bad argument or OOM. */
ub_kv *ub_kv_new(int32_t n_stream, int32_t size, int32_t swa_type, int32_t n_swa);
void ub_kv_free(ub_kv *kv);
/* Bytes of metadata per cell (the arrays ub_kv_new allocates per cell, plus one position-map node):
 * what Python's size checks use (ubatch.common.limits.KV_CELL_BYTES). */
int32_t ub_kv_cell_bytes(void);
const char *ub_kv_error(const ub_kv *kv);         /* message of the last failure ("" if none) */

int32_t ub_kv_n_stream(const ub_kv *kv);
int32_t ub_kv_size(const ub_kv *kv);
int32_t ub_kv_n_seq(const ub_kv *kv);
/* Per-stream scalars; -1 for a bad stream. */
int32_t ub_kv_used(ub_kv *kv, int32_t stream);
int32_t ub_kv_head(ub_kv *kv, int32_t stream);
int32_t ub_kv_used_max_p1(ub_kv *kv, int32_t stream);
int32_t ub_kv_has_shift(ub_kv *kv, int32_t stream);

/* Position bounds of a sequence (-1 if empty). Returns UB_E_ARG for a bad id (*out untouched). */
int ub_kv_seq_pos_min(ub_kv *kv, int32_t s, int32_t *out);
int ub_kv_seq_pos_max(ub_kv *kv, int32_t s, int32_t *out);
/* mn, mx: int32[n] caller-owned; ids >= n_seq get -1. */
int ub_kv_seq_pos_bounds(ub_kv *kv, int32_t n, int32_t *mn, int32_t *mx);
/* counts int32[n] caller-owned: the number of cells holding each sequence 0..n-1 (0 for ids >= n_seq). */
int ub_kv_seq_counts(ub_kv *kv, int32_t n, int32_t *counts);
/* Neighbours in s's position map, O(log n): the smallest position >= p (seq_pos_ge) and the largest
 * position < p (seq_pos_lt); *out = -1 when there is none. UB_E_ARG for a bad id. */
int ub_kv_seq_pos_ge(ub_kv *kv, int32_t s, int32_t p, int32_t *out);
int ub_kv_seq_pos_lt(ub_kv *kv, int32_t s, int32_t p, int32_t *out);
/* Two-cache memory: the smallest position of s in [t, p) that `full` holds and `swa` does not (*out; -1
 * when every one is held). Walks full's map over the range, O(k log n) for k positions in range. */
int ub_kv_window_hole(ub_kv *full, ub_kv *swa, int32_t s, int32_t t, int32_t p, int32_t *out);

/* The non-empty cells of a stream, ascending index. Caller-owned outputs with room for `size` cells:
 * idx int32[size], pos int32[size], seq uint64[size*4], shift int32[size] (may be NULL), ext int32[size*2]
 * as (x, y) pairs (may be NULL). Returns the number of cells written, or -1 for a bad stream. */
int32_t ub_kv_cells(ub_kv *kv, int32_t stream, int32_t *idx, int32_t *pos, uint64_t *seq, int32_t *shift,
                    int32_t *ext);

/* Sequence operations (llama_memory_seq_*). s == -1 is accepted by seq_rm only. A negative p0 means 0,
 * a negative p1 means +inf. Return UB_OK, or UB_E_ARG with a message (nothing changed). */
int ub_kv_seq_rm(ub_kv *kv, int32_t s, int32_t p0, int32_t p1);
int ub_kv_seq_cp(ub_kv *kv, int32_t src, int32_t dst, int32_t p0, int32_t p1);
int ub_kv_seq_keep(ub_kv *kv, int32_t s);
int ub_kv_seq_add(ub_kv *kv, int32_t s, int32_t p0, int32_t p1, int32_t delta);
int ub_kv_seq_div(ub_kv *kv, int32_t s, int32_t p0, int32_t p1, int32_t d);
void ub_kv_clear(ub_kv *kv);

/* Pending update (llama.cpp's memory_update): queued cross-stream copies and the per-cell K-shift.
 * ub_kv_n_copies: number of queued (src, dst) stream copies. ub_kv_take_update writes them to
 * copies int32[2*n_copies] (may be NULL when 0), and when any stream has a pending shift writes every
 * cell's shift to shift int32[n_stream*size] and sets *has_shift = 1 (else 0, shift untouched); then the
 * queue and all shifts are cleared (journaled inside a transaction: a rollback makes them pending again). */
int32_t ub_kv_n_copies(const ub_kv *kv);
int32_t ub_kv_has_update(const ub_kv *kv);          /* 1 when copies are queued or a shift is pending */
int ub_kv_take_update(ub_kv *kv, int32_t *copies, int32_t *shift, int32_t *has_shift);

/* Transactions: every change made between begin and commit/rollback is journaled; rollback restores
 * the state of begin exactly (cells, heads, used counts, shifts, sequence bounds, copy queue).
 * begin while a transaction is open returns UB_E_ARG. */
int ub_kv_begin(ub_kv *kv);
int ub_kv_commit(ub_kv *kv);
int ub_kv_rollback(ub_kv *kv);

/* Planning. prepare: dry run of the n_ub ubatches in order (find_slot + apply each), then restore the
 * state exactly; the slots found are kept in the handle (plan) until the next prepare / clear.
 * Returns UB_OK, UB_E_KVFULL (no slot for ubatch *failed_ub, message set) or UB_E_ARG (ubatch shape
 * unusable for this cache). The state is identical to before in every case. */
int ub_kv_prepare(ub_kv *kv, const ub_ubatch *const *ubs, int32_t n_ub, int32_t *failed_ub);
int32_t ub_kv_plan_n(const ub_kv *kv);
/* Slot i of the plan: ns groups of per cells. strm int32[ns], idxs int32[ns*per]; NULL / 0 for bad i. */
int32_t ub_kv_plan_ns(const ub_kv *kv, int32_t i);
int32_t ub_kv_plan_per(const ub_kv *kv, int32_t i);
const int32_t *ub_kv_plan_strm(const ub_kv *kv, int32_t i);
const int32_t *ub_kv_plan_idxs(const ub_kv *kv, int32_t i);
/* apply_ubatch of plan slot i to ub (which must be the ubatch it was planned for). */
int ub_kv_apply(ub_kv *kv, int32_t i, const ub_ubatch *ub);
/* llama.cpp's n_kv for plan slot i in the current state: max over its streams of
 * min(size, max(256, roundup(used_max_p1, 256))). -1 for bad i. */
int32_t ub_kv_n_kv(ub_kv *kv, int32_t i);
/* KQ mask of plan slot i for ub in the current state: out float[ns * per * n_kv] (caller-owned),
 * out[(k*per + r)*n_kv + j] = 0 if ubatch row k*per + r may attend cell j of stream strm[k], else -inf. */
int ub_kv_mask(ub_kv *kv, int32_t i, const ub_ubatch *ub, int32_t causal, float *out, int32_t n_kv);
/* The visible-cell lists of plan slot i for ub in the current state (what the visible-cell attention
 * consumes; the same rule as ub_kv_mask, without the dense mask): row r sees cells[off[r] .. off[r+1]) of
 * stream row_stream[r], ascending (position, cell index). swa_type < 0: this cache's window; otherwise
 * that window (UB_SWA_*, n_swa >= 1 unless NONE). On UB_OK *out = one malloc'd block owned by the caller,
 * freed with ub_kv_vis_free: int32 row_stream[n], off[n + 1], cells[*n_cells] back to back (n =
 * ub->n_tokens). On failure *out = NULL and nothing changes. */
int ub_kv_visible(ub_kv *kv, int32_t i, const ub_ubatch *ub, int32_t causal, int32_t n_kv, int32_t swa_type,
                  int32_t n_swa, int32_t **out, int64_t *n_cells);
void ub_kv_vis_free(int32_t *block);

/* Whole-state snapshots (for tests and rollback). snap_equal: 1 if the current state equals the
 * snapshot (cells, heads, used, shifts, sequence bounds, copy queue), else 0. */
ub_kv_snap *ub_kv_snapshot(ub_kv *kv);
int ub_kv_restore(ub_kv *kv, const ub_kv_snap *snap);
int ub_kv_snap_equal(ub_kv *kv, const ub_kv_snap *snap);
void ub_kv_snap_free(ub_kv_snap *snap);
/* cdef:end */

#endif
