/* exp(x) rounded as ggml-cpu's AVX-512 vector exp (the one llama.cpp's soft_max and swiglu run on an
 * AVX-512 build): x = n*ln2 + b with n = round(x / ln2) by the 1.5*2^23 shift, ln2 split in two
 * constants, a degree-5 polynomial in b evaluated as fused multiply-adds in a fixed tree, and the result
 * scaled by 2^n (one rounding, gradual underflow); |n| > 192 gives 0 or +inf. Scalar code with explicit
 * fmaf: the same bits on every back-end, one element at a time (no dependence on neighbours). */
#ifndef UB_GEXP_H
#define UB_GEXP_H

#include <math.h>

static inline float ub_gexp(float x) {
    const float shift = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, shift);
    const float n = z - shift;
    if (n != n) return x + x; /* NaN in, NaN out */
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    if (fabsf(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
    const float u = b * b;
    const float hi = fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f));
    const float j = fmaf(hi, u, fmaf(0x1.ffffecp-1f, b, 1.0f));
    return scalbnf(j, (int)n);
}

#endif
