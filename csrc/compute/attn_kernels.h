/* Inner loops of the attention kernel (internal, not exported to Python). A "chunk" is UB_ATTN_CB
 * consecutive KV cells; a "query group" is up to UB_ATTN_QB query vectors sharing one KV head.
 * Scores/probabilities of a query group live in s: float[UB_ATTN_QB][UB_ATTN_CB] (row i = query i). */
#ifndef UB_ATTN_KERNELS_H
#define UB_ATTN_KERNELS_H

#include <stdint.h>

#define UB_ATTN_CB 32   /* cells per chunk (multiple of 8) */
#define UB_ATTN_QB 4    /* query vectors per group */

/* s[i][c] = dot(q[i], k + c * ks) for i < nq (nq <= UB_ATTN_QB), c < cb (cb <= UB_ATTN_CB);
 *   q: nq pointers to float[hd] (caller-owned); k: cb rows of hd floats, row c at k + c * ks (read only);
 *   s: float[UB_ATTN_QB][UB_ATTN_CB]; entries c >= cb may be overwritten with finite values */
typedef void (*ub_attn_scores_fn)(const float *const *q, int nq, const float *k, int64_t ks, int cb, int hd,
                                  float *s);
/* One online-softmax step for a chunk, for each query i < nq:
 *   x[c] = s[i][c] * scale + mrow[i][c] for c < cb (mrow[i]: cb mask values, -inf hides a cell; read only)
 *   if every x is -inf: s[i][c] = 0 for c < cb, corr[i] = 1, m[i] and l[i] unchanged;
 *   else m' = max(m[i], max x), corr[i] = exp(m[i] - m') (1 when m' == m[i]), s[i][c] = exp(x[c] - m'),
 *        l[i] = l[i] * corr[i] + sum_c s[i][c], m[i] = m'.
 * s: float[QB][CB] in/out; m, l: float[nq] running max / denominator (in/out); corr: float[nq] (out).
 * Returns 1 when some query saw a cell of the chunk, else 0. */
typedef int (*ub_attn_softmax_fn)(float *s, int nq, const float *const *mrow, int cb, float scale,
                                  float *m, float *l, float *corr);
/* acc[i][d] = acc[i][d] * corr[i] + sum_{c < cb} p[i][c] * (v + c * vs)[d] for i < nq, d < hd.
 *   p: float[QB][CB]; corr: float[nq]; v: cb rows of hd floats at stride vs; acc: nq pointers to float[hd] */
typedef void (*ub_attn_pv_fn)(const float *p, int nq, const float *corr, const float *v, int64_t vs, int cb,
                              int hd, float *const *acc);
/* dst[c][d] = half src[c * ss + d] as float, c < cb, d < hd. src: cb rows of IEEE half (uint16 bits) at
 * stride ss; dst: float[cb][hd] (contiguous). */
typedef void (*ub_attn_h2f_fn)(const uint16_t *src, int64_t ss, int cb, int hd, float *dst);
/* flags[ci] |= 1 for every chunk ci (cells [ci * CB, ci * CB + CB) of row) holding a cell that is not -inf.
 *   row: float[n] (read only); flags: uint8[(n + CB - 1) / CB] */
typedef void (*ub_attn_scan_fn)(const float *row, int n, uint8_t *flags);

void ub_attn_scores_generic(const float *const *q, int nq, const float *k, int64_t ks, int cb, int hd, float *s);
int ub_attn_softmax_generic(float *s, int nq, const float *const *mrow, int cb, float scale, float *m, float *l,
                            float *corr);
void ub_attn_pv_generic(const float *p, int nq, const float *corr, const float *v, int64_t vs, int cb, int hd,
                        float *const *acc);
void ub_attn_h2f_generic(const uint16_t *src, int64_t ss, int cb, int hd, float *dst);
void ub_attn_scan_generic(const float *row, int n, uint8_t *flags);

/* x86-64 SIMD versions (attention_avx2.c), compiled with function-level target attributes (no -march):
 * scores/softmax/pv/scan need AVX2+FMA (scores and pv also hd % 8 == 0), h2f needs F16C (hd % 8 == 0).
 * ub_attn_cpu() returns a bit set of what was compiled in AND the running CPU supports. */
enum { UB_CPU_AVX2_FMA = 1, UB_CPU_F16C = 2 };
int ub_attn_cpu(void);
void ub_attn_scores_avx2(const float *const *q, int nq, const float *k, int64_t ks, int cb, int hd, float *s);
int ub_attn_softmax_avx2(float *s, int nq, const float *const *mrow, int cb, float scale, float *m, float *l,
                         float *corr);
void ub_attn_pv_avx2(const float *p, int nq, const float *corr, const float *v, int64_t vs, int cb, int hd,
                     float *const *acc);
void ub_attn_h2f_f16c(const uint16_t *src, int64_t ss, int cb, int hd, float *dst);
void ub_attn_scan_avx2(const float *row, int n, uint8_t *flags);

#endif
