/* Row-wise and elementwise ops of the forward pass, each output element computed from its own row /
 * element alone in a fixed order (batch-invariant by construction). */
#include <math.h>

#include "ub_common.h"
#include "ub_matmul.h"

/* x, y: float[n][k] (y may alias x); g: float[k] or NULL. Per row: ss = sum of x^2 in double, index order;
 * scale = 1 / sqrtf((float)(ss / k) + eps); y = (x * scale) * g. */
int ub_rms_norm(const float *x, int64_t n, int64_t k, const float *g, float eps, float *y) {
    if (n < 0 || k <= 0 || !(eps >= 0.0f)) return UB_E_ARG;
    if (n == 0) return UB_OK;
    if (!x || !y) return UB_E_ARG;
    for (int64_t i = 0; i < n; i++) {
        const float *xi = x + i * k;
        float *yi = y + i * k;
        double ss = 0.0;
        for (int64_t j = 0; j < k; j++) ss += (double)(xi[j] * xi[j]);
        const float scale = 1.0f / sqrtf((float)(ss / (double)k) + eps);
        if (g)
            for (int64_t j = 0; j < k; j++) yi[j] = (xi[j] * scale) * g[j];
        else
            for (int64_t j = 0; j < k; j++) yi[j] = xi[j] * scale;
    }
    return UB_OK;
}

/* g, u, y: float[n]; y may alias g or u. */
void ub_silu_mul(const float *g, const float *u, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float a = g[i];
        y[i] = (a / (1.0f + expf(-a))) * u[i];
    }
}

/* g, u, y: float[n]; y may alias g or u. tanh-approximated GELU as ggml_gelu_f32. */
void ub_gelu_mul(const float *g, const float *u, float *y, int64_t n) {
    const float c = 0.79788456080286535587989211986876f, a3 = 0.044715f;
    for (int64_t i = 0; i < n; i++) {
        const float a = g[i];
        y[i] = (0.5f * a * (1.0f + tanhf(c * a * (1.0f + a3 * a * a)))) * u[i];
    }
}
