/* Matrix multiplication of f32 activations by GGUF weights kept in their block layout (F32, F16, BF16,
 * Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, IQ3_S, IQ3_XXS, IQ2_S, IQ2_XS,
 * IQ2_XXS, IQ1_S, IQ1_M, TQ1_0, TQ2_0, MXFP4, NVFP4, Q1_0, Q2_0), the embedding lookup (get_rows) and the
 * batch-invariant row-wise ops of the forward pass (rms_norm, silu*mul, gelu*mul, attention over visible
 * cells in position order). Shapes and ownership are documented at each function. */
#ifndef UB_MATMUL_H
#define UB_MATMUL_H

#include <stdint.h>

/* cdef:begin */
/* Weight types (values of ggml_type / gguf.GGMLQuantizationType). */
enum {
    UB_T_F32 = 0, UB_T_F16 = 1, UB_T_Q4_0 = 2, UB_T_Q4_1 = 3, UB_T_Q5_0 = 6, UB_T_Q5_1 = 7, UB_T_Q8_0 = 8,
    UB_T_Q2_K = 10, UB_T_Q3_K = 11, UB_T_Q4_K = 12, UB_T_Q5_K = 13, UB_T_Q6_K = 14, UB_T_BF16 = 30,
    UB_T_IQ2_XXS = 16, UB_T_IQ2_XS = 17, UB_T_IQ3_XXS = 18, UB_T_IQ1_S = 19, UB_T_IQ4_NL = 20, UB_T_IQ3_S = 21,
    UB_T_IQ2_S = 22, UB_T_IQ4_XS = 23, UB_T_IQ1_M = 29, UB_T_TQ1_0 = 34, UB_T_TQ2_0 = 35, UB_T_MXFP4 = 39,
    UB_T_NVFP4 = 40, UB_T_Q1_0 = 41, UB_T_Q2_0 = 42
};
/* Kernel back-ends (ub_mm_backend): plain C; AVX2+FMA+F16C; AVX2 + AVX-VNNI (256-bit vpdpbusd, VEX);
 * AVX-512 F/BW/VL + AVX512_VNNI. */
enum { UB_MM_GENERIC = 0, UB_MM_AVX2 = 1, UB_MM_AVXVNNI = 2, UB_MM_AVX512 = 3, UB_MM_N_BACKENDS = 4 };

/* Elements per block and bytes per block of weight type `type`. Returns 1, or 0 (outputs untouched) when
 * the type is unknown or unsupported; 2 when it is supported but needs lookup tables not set yet
 * (ub_mm_set_iq_tables; until then matmul and get_rows refuse it with UB_E_ARG). */
int ub_mm_type_info(int32_t type, int32_t *blck, int32_t *bytes);

/* The lookup tables of IQ4_NL / IQ4_XS (16 values) and the IQ2 / IQ3 / IQ1 grids, set once before the first
 * use of those types (ubatch.compute.iq_tables builds them from the gguf package; mm_iq_tables.c says the
 * shapes). Returns UB_OK, or UB_E_ARG (nothing changed) when a value lies outside its format's set. */
int ub_mm_set_iq_tables(const int8_t *kv, const uint8_t *g2xxs, const uint8_t *g2xs, const uint8_t *g2s,
                        const uint8_t *g3xxs, const uint8_t *g3s, const int8_t *g1s);

/* Bit b set (1 << UB_MM_*) for each back-end this CPU and OS can run (generic always; one cpuid probe). */
int ub_mm_cpu_backends(void);
/* The back-end in use. At first use it is UBATCH_KERNELS (generic|avx2|avxvnni|avx512) when the CPU has that
 * one, else the automatic choice: avx512, else avxvnni, else avx2, else generic (the Python layer raises on
 * an unknown or unsupported UBATCH_KERNELS; ub_mm_env_backend says what the variable asked for).
 * ub_mm_set_backend(b) selects b for later calls (-1 = the automatic choice) and returns the back-end now in
 * use, or UB_E_ARG (nothing changed) when b is unknown or the CPU lacks it. Not to be called while a matmul
 * runs. */
int ub_mm_backend(void);
int ub_mm_set_backend(int32_t b);
/* What UBATCH_KERNELS asks for: a UB_MM_* value, -1 when unset / empty / "auto", -2 when unknown. */
int ub_mm_env_backend(void);

/* y[i][j] = sum_k W[j][k] * x[i][k] for i < n, j < n_rows.
 *   x: float[n][k] (caller-owned, read only); w: n_rows rows of k / blck blocks of `type` (w_bytes bytes,
 *   caller-owned, read only, may be a memory map); y: float[n][n_rows] (caller-owned, written).
 * Activations are first quantised per row to the weight type's dot type (Q8_0, Q8_1, Q8_K, F16, BF16 or
 * F32), then each y[i][j] is one dot product in a fixed order: see matmul.c. n_threads workers share the
 * output columns. Returns UB_OK, UB_E_ARG (bad type / sizes, k not a multiple of the block) or UB_E_NOMEM;
 * on error y is untouched. */
int ub_matmul(const float *x, int64_t n, int64_t k, const uint8_t *w, int64_t w_bytes, int32_t type,
              int64_t n_rows, float *y, int32_t n_threads);

/* Several matmuls of one input: y[p] = x @ W_p.T for p < n_w (1 <= n_w <= UB_MM_MAXW), each weight p given
 * as ub_matmul takes it (w[p], w_bytes[p], types[p], n_rows[p]; y[p]: float[n][n_rows[p]]), all with n_cols
 * = k. x is quantised once per distinct activation kind and all the weights' column chunks run as one job
 * on the workers; every y[p] is bitwise what ub_matmul gives for that weight alone. Returns as ub_matmul. */
enum { UB_MM_MAXW = 4 };
int ub_matmul_multi(const float *x, int64_t n, int64_t k, int32_t n_w, const uint8_t *const *w,
                    const int64_t *w_bytes, const int32_t *types, const int64_t *n_rows, float *const *y,
                    int32_t n_threads);

/* The activation row quantisation used by ub_matmul (exported for tests): x: float[k] -> out (bytes as
 * ub_mm_act_bytes(type, k) says; layout in mm_internal.h). Returns UB_OK or UB_E_ARG. */
int64_t ub_mm_act_bytes(int32_t type, int64_t k);
int ub_mm_quantize_act(const float *x, int64_t k, int32_t type, uint8_t *out);

/* Memory read bandwidth probe (a STREAM-like read kernel, mm_membw.c): reads buf (bytes bytes, read only)
 * once on n_threads participants; *sum = the sum of its 8-byte words. Returns UB_OK or UB_E_ARG. */
int ub_mem_read(const uint8_t *buf, int64_t bytes, int32_t n_threads, uint64_t *sum);

/* out[r][:] = dequantised row ids[r] of W, r < m. w: n_rows x n_cols of `type` (w_bytes bytes, read only);
 * ids: int32[m]; out: float[m][n_cols] (written). Returns UB_OK or UB_E_ARG (an id out of [0, n_rows),
 * bad sizes; out untouched). */
int ub_get_rows(const uint8_t *w, int64_t w_bytes, int32_t type, int64_t n_rows, int64_t n_cols,
                const int32_t *ids, int64_t m, float *out);

/* RMS norm of each row: y[i] = x[i] / sqrt(mean(x[i]^2) + eps) (* g when g != NULL).
 * x, y: float[n][k] (may alias); g: float[k] or NULL. The sum of squares is accumulated in double in
 * index order, so a row's result depends on that row alone. Returns UB_OK or UB_E_ARG. */
int ub_rms_norm(const float *x, int64_t n, int64_t k, const float *g, float eps, float *y);

/* Gated activations, elementwise and per element independent: y = act(g) * u.
 * silu(g) = g / (1 + exp(-g)); gelu(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))), evaluated as
 * ggml-cpu's geglu does: on the f16-rounded gate, result rounded to f16, 0 below -10, g above 10 (ops.c).
 * g, u, y: float[n] (y may alias g or u). */
void ub_silu_mul(const float *g, const float *u, float *y, int64_t n);
void ub_gelu_mul(const float *g, const float *u, float *y, int64_t n);

/* Per-row visible-cell lists of one placement, each in ascending position order (ties by cell index).
 *   mask: float[ns][per][n_kv] (0 = visible, -inf = hidden; any other value -> UB_E_ARG);
 *   pos: int32[ns][n_kv]: position of cell column j of group k's stream;
 *   off: int32[ns*per + 1] (written): row i's cells are cells[off[i] .. off[i+1]);
 *   cells: int32[cap] (written) cell indices, cap >= total visible (ub_attn_count_visible gives it).
 * Returns UB_OK, UB_E_ARG or UB_E_NOMEM. */
int64_t ub_attn_count_visible(const float *mask, int64_t n_rows, int32_t n_kv);
int ub_attn_visible(const float *mask, const int32_t *pos, int32_t ns, int32_t per, int32_t n_kv,
                    int32_t *off, int32_t *cells, int64_t cap);

/* Batch-invariant attention: for each query row i and head h, over the cells of row i's list in order,
 *   s_c = scale * q_i,h . K[st][c][h / gqa]   (then s_c = softcap * tanh(s_c / softcap) when softcap > 0)
 *   p = softmax(s) (max, exp, double sum in list order), out_i,h = sum_c p_c V[st][c][h / gqa] in order.
 * q: float[n_q][n_head][hd_k]; k: [n_stream][kv_size][n_head_kv][hd_k], v: [..][hd_v], f32 or f16
 * (k_type/v_type UB_T_F32/UB_T_F16); row_stream: int32[n_q]; off, cells: lists as ub_attn_visible
 * builds them; out: float[n_q][n_head][hd_v]. An f16 K rounds q to f16 first, an f16 V rounds p to f16
 * (llama.cpp's non-flash path). A row with no visible cell gets zeros. Work is split over (row, kv head)
 * among n_threads; each output element is computed by one thread by the same operations whatever the
 * split. Returns UB_OK, UB_E_ARG or UB_E_NOMEM. */
int ub_attention_vis(const float *q, const void *k, int32_t k_type, const void *v, int32_t v_type,
                     const int32_t *row_stream, const int32_t *off, const int32_t *cells, float *out,
                     int32_t n_q, int32_t n_head, int32_t n_head_kv, int32_t hd_k, int32_t hd_v,
                     int32_t n_stream, int32_t kv_size, float scale, float softcap, int32_t n_threads);
/* cdef:end */

#endif
