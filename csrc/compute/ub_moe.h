/* The mixture-of-experts feed-forward block (moe.c): router logits -> softmax -> top-k experts -> each row's
 * expert SwiGLU FFNs -> the weighted sum in slot order, plus an optional shared expert with a sigmoid gate
 * (qwen2moe). Batch-invariant: a row's result is bitwise independent of which other rows are in the call
 * and of which experts they chose (see moe.c). Shapes and ownership at each declaration. */
#ifndef UB_MOE_H
#define UB_MOE_H

#include <stdint.h>

#include "ub_layer.h"

/* cdef:begin */
enum { UB_MOE_GATING_SOFTMAX = 1 };

/* The constants of one layer's MoE block (read only; the weights as ub_layer takes them).
 *   gate_inp:  n_embd -> n_expert (router; ffn_gate_inp.weight).
 *   gate_exps, up_exps: n_embd -> n_expert * n_ff_exp rows (expert e: rows [e * n_ff_exp, (e + 1) * n_ff_exp),
 *              the GGUF tensors {n_embd, n_ff_exp, n_expert}); down_exps: n_ff_exp -> n_expert * n_embd rows.
 *   norm_w:    1: the selected experts' weights are divided by their sum (clamped to >= 6.103515625e-5).
 *   w_scale:   the weights are multiplied by it unless it is 0 or 1.
 *   n_ff_shexp > 0: a shared expert (gate_shexp, up_shexp: n_embd -> n_ff_shexp; down_shexp: n_ff_shexp ->
 *              n_embd) added to every row, scaled by sigmoid(x . gate_inp_shexp) when gate_inp_shexp.data is
 *              set (n_embd -> 1). */
typedef struct ub_moe {
    int32_t n_embd, n_expert, n_used, n_ff_exp, gating, norm_w;
    float w_scale;
    ub_lw gate_inp, gate_exps, up_exps, down_exps;
    int32_t n_ff_shexp;
    ub_lw gate_inp_shexp, gate_shexp, up_shexp, down_shexp;
} ub_moe;

/* out: float[n][n_embd] = the MoE FFN of h: float[n][n_embd] (caller-owned; out must not alias h).
 * sel: NULL or int32[n][n_used] receives each row's experts in slot order (descending router probability,
 * the lower index first on ties); wts: NULL or float[n][n_used] their final weights. n_threads workers
 * share each matmul's output columns. Returns UB_OK, UB_E_NOMEM, or UB_E_ARG with a message naming the
 * culprit in err (char[err_len]); on error out / sel / wts are unspecified. */
int ub_moe_ffn(const ub_moe *M, const float *h, int32_t n, float *out, int32_t *sel, float *wts,
               int32_t n_threads, char *err, int32_t err_len);
/* cdef:end */

#endif
