/* Inner loops of the attention kernel (internal, not exported to Python). A "chunk" is UB_ATTN_CB
 * consecutive KV cells; a "query group" is up to UB_ATTN_QB query vectors sharing one KV head. */
#ifndef UB_ATTN_KERNELS_H
#define UB_ATTN_KERNELS_H

#include <stdint.h>

#define UB_ATTN_CB 16   /* cells per chunk */
#define UB_ATTN_QB 4    /* query vectors per group */

/* s[i][c] = dot(q[i], k + c * ks) for i < nq (nq <= UB_ATTN_QB), c < cb (cb <= UB_ATTN_CB);
 *   q: nq pointers to float[hd] (caller-owned); k: cb rows of hd floats, row c at k + c * ks (read only);
 *   s: float[nq][UB_ATTN_CB] (entries c >= cb are left unspecified) */
typedef void (*ub_attn_scores_fn)(const float *const *q, int nq, const float *k, int64_t ks, int cb, int hd,
                                  float *s);
/* acc[i][d] += sum_{c < cb} p[i][c] * (v + c * vs)[d] for i < nq, d < hd.
 *   p: float[nq][UB_ATTN_CB]; v: cb rows of hd floats at stride vs; acc: nq pointers to float[hd] */
typedef void (*ub_attn_pv_fn)(const float *p, int nq, const float *v, int64_t vs, int cb, int hd,
                              float *const *acc);
/* x[c] = exp(x[c]) for c < UB_ATTN_CB, in place; exp(-inf) = 0. */
typedef void (*ub_attn_exp_fn)(float *x);

void ub_attn_scores_generic(const float *const *q, int nq, const float *k, int64_t ks, int cb, int hd, float *s);
void ub_attn_pv_generic(const float *p, int nq, const float *v, int64_t vs, int cb, int hd, float *const *acc);
void ub_attn_exp_generic(float *x);

/* x86-64 AVX2+FMA versions (attention_avx2.c); only valid when hd % 8 == 0 and the CPU has AVX2 and FMA.
 * ub_attn_have_avx2() tells whether they were compiled in and the running CPU supports them. */
int ub_attn_have_avx2(void);
void ub_attn_scores_avx2(const float *const *q, int nq, const float *k, int64_t ks, int cb, int hd, float *s);
void ub_attn_pv_avx2(const float *p, int nq, const float *v, int64_t vs, int cb, int hd, float *const *acc);
void ub_attn_exp_avx2(float *x);

#endif
