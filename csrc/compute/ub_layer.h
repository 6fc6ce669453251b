/* One decoder layer of a forward pass in a single C call (llama / qwen2 and gemma3), composed of the same
 * kernels the Python reference path calls one by one (matmul, rms_norm, RoPE, attention over visible cells,
 * the gated activations), in the same order with the same element operations, so its results are bitwise
 * those of the Python path (forward_reference in ubatch/model/arch/). Shapes and ownership are given at
 * each declaration; every buffer is caller-owned. */
#ifndef UB_LAYER_H
#define UB_LAYER_H

#include <stdint.h>

#include "ub_compute.h"

/* cdef:begin */
struct ub_moe;
/* A weight matrix as ub_matmul takes it: n_rows rows of n_cols / blck blocks of `type` (nbytes bytes). */
typedef struct {
    const uint8_t *data;
    int64_t nbytes, n_rows, n_cols;
    int32_t type;
} ub_lw;

enum { UB_LAYER_LLAMA = 0, UB_LAYER_GEMMA3 = 1 };

/* The constant part of one layer (weights, hyperparameters); the pointers are read only.
 *   llama:  attn_norm, ffn_norm float[n_embd]; bq float[n_head*head_dim], bk/bv float[n_head_kv*head_dim],
 *           bo float[n_embd] (each NULL when absent); SwiGLU.
 *   gemma3: also q_norm/k_norm float[head_dim], post_attn_norm/post_ffw_norm float[n_embd] (no biases),
 *           gelu_table float[65536] (the GELU of every f16 bit pattern, as ubatch.model.ops builds it);
 *           Q scaled by q_scale after RoPE; GeGLU.
 *   The general options (any kind; each off when NULL / 0):
 *     attn_norm / ffn_norm NULL: no pre-norm (olmo2), the block's input is the residual stream itself;
 *     q_norm / k_norm: RMSNorm of Q / K after the biases, before RoPE, per head (qk_norm_full 0:
 *       float[head_dim]) or over the whole row (qk_norm_full 1: q_norm float[n_head*head_dim], k_norm
 *       float[n_head_kv*head_dim]); gemma3 requires them;
 *     post_attn_norm / post_ffw_norm float[n_embd]: RMSNorm of the block output before the residual add;
 *     q_scale != 1: Q multiplied by it after RoPE (phi3);
 *     residual_scale != 0: block outputs multiplied by it before the residual add (granite, minicpm);
 *     no_rope 1: Q / K are not rotated (smollm3's NoPE layers, granite without rope);
 *     yarn: RoPE's YaRN / frequency factors (ub_rope_ext), read only, or NULL;
 *     attn_softcap > 0: attention scores soft-capped (ub_attention_vis);
 *     moe (ub_moe.h) not NULL: the feed-forward block is that mixture of experts (ub_moe_ffn) and
 *       w_gate / w_up / w_down / n_ff are not used. */
typedef struct {
    int32_t kind;
    int32_t n_embd, n_head, n_head_kv, head_dim, n_ff, n_rot, rope_mode;
    float eps, rope_base, rope_scale, q_scale, kq_scale;
    const float *attn_norm, *ffn_norm, *bq, *bk, *bv, *bo;
    const float *q_norm, *k_norm, *post_attn_norm, *post_ffw_norm, *gelu_table;
    ub_lw wq, wk, wv, wo, w_gate, w_up, w_down;
    int32_t qk_norm_full, no_rope;
    float residual_scale;
    const ub_rope_yarn *yarn;
    float attn_softcap;
    const struct ub_moe *moe;
} ub_layer;

/* The step's attention inputs of one layer: its K/V data k, v: [n_stream][kv_size][n_head_kv][head_dim]
 * of k_type / v_type (UB_T_F32 / UB_T_F16), written at the ubatch rows' cells and read by attention;
 * dst: int64[n] flat cell (stream * kv_size + cell) receiving row i's K and V; row_stream int32[n],
 * off int32[n + 1], cells int32[off[n]]: each row's visible cells in ascending position order
 * (ub_attn_visible). */
typedef struct {
    void *k, *v;
    int32_t k_type, v_type, n_stream, kv_size;
    const int64_t *dst;
    const int32_t *row_stream, *off, *cells;
} ub_layer_kv;

/* x: float[n][n_embd], the residual stream, updated in place; pos: int32[n_pos][n] (row 0 is used);
 * keep: NULL, or int32[n_keep] strictly ascending rows of [0, n): after the attention output the layer
 * continues on those rows only and leaves them in x[0 .. n_keep) (the last layer's output rows).
 * Returns UB_OK, UB_E_NOMEM or UB_E_ARG with a message naming the culprit in err (char[err_len]). */
int ub_layer_forward(const ub_layer *L, const ub_layer_kv *kv, float *x, int32_t n, const int32_t *pos,
                     int32_t n_pos, const int32_t *keep, int32_t n_keep, int32_t n_threads, char *err,
                     int32_t err_len);

/* y = (g >= 10 ? g : g <= -10 ? 0 : table[f16 bits of g]) * u elementwise: GeGLU through a 65536-entry
 * table (float[65536], read only). g, u, y: float[n]; y may alias g or u. */
void ub_gelu_table_mul(const float *table, const float *g, const float *u, float *y, int64_t n);
/* cdef:end */

#endif
