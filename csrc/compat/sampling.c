/* Vocabulary-wide sampler kernels with llama.cpp's accumulation order (llama-sampling.cpp):
 * d[n] is a caller-owned llama_token_data array {id, logit, p} (often the caller's own ctypes memory). */
#include "ub_compat.h"

#include <float.h>
#include <math.h>

/* Largest logit of d[n] (n >= 1), scanning in order. */
float ub_compat_max_logit(const ub_token_data *d, size_t n) {
    float m = d[0].logit;
    for (size_t i = 1; i < n; ++i) {
        m = d[i].logit > m ? d[i].logit : m;
    }
    return m;
}

/* llama_sampler_softmax_impl without the sort: p_i = expf(logit_i - max) (max = d[0].logit when sorted),
 * summed in float, then p_i /= sum. d[n], n >= 1, modified in place. */
void ub_compat_softmax(ub_token_data *d, size_t n, bool sorted) {
    if (n == 0) {
        return;
    }
    const float max_l = sorted ? d[0].logit : ub_compat_max_logit(d, n);
    float cum = 0.0f;
    for (size_t i = 0; i < n; ++i) {
        const float p = expf(d[i].logit - max_l);
        d[i].p = p;
        cum += p;
    }
    for (size_t i = 0; i < n; ++i) {
        d[i].p /= cum;
    }
}

/* The dist sampler's single pass: p_i = expf(logit_i - max) in float, summed in double; the first i whose
 * running double sum reaches sum * rnd is selected; every p_i is normalised by the double sum. d[n] modified in
 * place; rnd in [0, 1) from the caller's mt19937 stream. Returns the selected index (-1 for n == 0). */
int64_t ub_compat_dist(ub_token_data *d, size_t n, bool sorted, double rnd) {
    if (n == 0) {
        return -1;
    }
    if (n == 1) {
        d[0].p = 1.0f;
        return 0;
    }
    const float max_l = sorted ? d[0].logit : ub_compat_max_logit(d, n);
    double sum_cum = 0.0;
    for (size_t i = 0; i < n; ++i) {
        const float p = expf(d[i].logit - max_l);
        d[i].p = p;
        sum_cum += p;
    }
    const double target = sum_cum * rnd;
    double run = 0.0;
    int64_t sel = -1;
    for (size_t i = 0; i < n; ++i) {
        if (sel < 0) {
            run += d[i].p;
            if (run >= target) {
                sel = (int64_t)i;
            }
        }
        d[i].p = (float)(d[i].p / sum_cum);
    }
    return sel < 0 ? (int64_t)n - 1 : sel;
}
