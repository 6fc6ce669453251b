/* Row-wise and elementwise ops of the forward pass, each output element computed from its own row /
 * element alone in a fixed order (batch-invariant by construction). */
#include <math.h>

#include "ub_common.h"
#include "ub_compute.h"
#include "ub_matmul.h"
#include "ub_gexp.h"
#include "ub_silu_simd.h"

/* x, y: float[n][k] (y may alias x); g: float[k] or NULL. Per row: ss = sum of x^2 in double, index order;
 * scale = 1 / sqrtf((float)(ss / k) + eps); y = (x * scale) * g. */
int ub_rms_norm(const float *x, int64_t n, int64_t k, const float *g, float eps, float *y) {
    if (n < 0 || k <= 0 || !(eps >= 0.0f)) return UB_E_ARG;
    if (n == 0) return UB_OK;
    if (!x || !y) return UB_E_ARG;
    /* the sums of 4 rows at a time: 4 independent chains, each its row's index-order double sum (the same
     * bits), so the adds' latency overlaps (one chain ran at one add per 4 cycles: ~3 % of a prefill) */
    double ss4[4];
    for (int64_t i = 0; i < n; i++) {
        const float *xi = x + i * k;
        float *yi = y + i * k;
        if (i % 4 == 0 && i + 4 <= n) {
            double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
            const float *x1 = xi + k, *x2 = xi + 2 * k, *x3 = xi + 3 * k;
            for (int64_t j = 0; j < k; j++) {
                s0 += (double)(xi[j] * xi[j]);
                s1 += (double)(x1[j] * x1[j]);
                s2 += (double)(x2[j] * x2[j]);
                s3 += (double)(x3[j] * x3[j]);
            }
            ss4[0] = s0, ss4[1] = s1, ss4[2] = s2, ss4[3] = s3;
        }
        double ss = 0.0;
        if (i - i % 4 + 4 <= n) ss = ss4[i % 4]; /* the row's group of 4 is whole: its sum is made */
        else
            for (int64_t j = 0; j < k; j++) ss += (double)(xi[j] * xi[j]);
        const float scale = 1.0f / sqrtf((float)(ss / (double)k) + eps);
        if (g)
            for (int64_t j = 0; j < k; j++) yi[j] = (xi[j] * scale) * g[j];
        else
            for (int64_t j = 0; j < k; j++) yi[j] = xi[j] * scale;
    }
    return UB_OK;
}

/* g, u, y: float[n]; y may alias g or u. silu(g) * u as ggml-cpu's swiglu on an AVX-512 build:
 * g / (1 + exp(-g)) with ggml's vector exp (ub_gexp.h), then times u. (ggml runs libm's expf on the last
 * n_ff % 16 elements of a row; every n_ff of the supported models is a multiple of 16.) The SIMD back-ends
 * run the bulk in vectors, bitwise this loop (silu_simd.c); the loop does the tail. */
void ub_silu_mul(const float *g, const float *u, float *y, int64_t n) {
    for (int64_t i = n > 0 ? ub_silu_mul_simd(ub_mm_backend(), g, u, y, n) : 0; i < n; i++) {
        const float a = g[i];
        y[i] = (a / (1.0f + ub_gexp(-a))) * u[i];
    }
}

/* g, u, y: float[n]; y may alias g or u. tanh-approximated GELU the way ggml-cpu's geglu evaluates it
 * (GGML_GELU_FP16 builds, the default): g <= -10 -> 0, g >= 10 -> g, else the gate is rounded to f16,
 * gelu is computed in f32 and its result rounded to f16 (ggml reads it from a 64K-entry f16 table). */
void ub_gelu_mul(const float *g, const float *u, float *y, int64_t n) {
    const float c = 0.79788456080286535587989211986876f, a3 = 0.044715f;
    for (int64_t i = 0; i < n; i++) {
        const float a = g[i];
        float act;
        if (a <= -10.0f) act = 0.0f;
        else if (a >= 10.0f) act = a;
        else {
            const float h = ub_h2f(ub_f2h(a));
            act = ub_h2f(ub_f2h(0.5f * h * (1.0f + tanhf(c * h * (1.0f + a3 * h * h)))));
        }
        y[i] = act * u[i];
    }
}
