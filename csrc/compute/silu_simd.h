/* One vector width of silu_simd.c's loop, compiled once per SL_* macro set (see there). */

/* x: the lanes' exponent arguments; ub_gexp (ub_gexp.h) lane by lane, the same operations in order. */
static inline __attribute__((always_inline, target(SL_TGT))) SL_V SL_SFX(gexp)(SL_V x) {
    const SL_V shift = SL_SET1(0x1.8p23f);
    const SL_V z = SL_FMA(x, SL_SET1(0x1.715476p+0f), shift);
    const SL_V nf = SL_SUB(z, shift);
    const SL_V b = SL_FNMA(nf, SL_SET1(0x1.7f7d1cp-20f), SL_FNMA(nf, SL_SET1(0x1.62e4p-1f), x));
    const SL_V u = SL_MUL(b, b);
    const SL_V hi = SL_FMA(SL_FMA(SL_SET1(0x1.0e4020p-7f), b, SL_SET1(0x1.573e2ep-5f)), u,
                           SL_FMA(SL_SET1(0x1.555e66p-3f), b, SL_SET1(0x1.fffdb6p-2f)));
    const SL_V j = SL_FMA(hi, u, SL_FMA(SL_SET1(0x1.ffffecp-1f), b, SL_SET1(1.0f)));
    /* scalbnf(j, n) for n in [-192, 192] (other lanes replaced below; clamped so that they stay harmless) */
    const SL_V nc = SL_MIN(SL_MAX(nf, SL_SET1(-192.0f)), SL_SET1(192.0f));
    const SL_M big = SL_CMP(nc, SL_SET1(126.0f), _CMP_GT_OQ), small = SL_CMP(nc, SL_SET1(-126.0f), _CMP_LT_OQ);
    SL_V n1 = SL_BLEND(big, nc, SL_SUB(nc, SL_SET1(100.0f)));
    n1 = SL_BLEND(small, n1, SL_ADD(nc, SL_SET1(100.0f)));
    SL_V s2 = SL_BLEND(big, SL_SET1(1.0f), SL_SET1(0x1p100f));
    s2 = SL_BLEND(small, s2, SL_SET1(0x1p-100f));
    SL_V r = SL_MUL(SL_MUL(j, SL_I2F_BITS(SL_CVT(n1))), s2);
    /* |n| > 192: 0 or +inf; NaN in, NaN out (x + x) */
    const SL_M far = SL_CMP(nf, SL_SET1(192.0f), _CMP_GT_OQ), near0 = SL_CMP(nf, SL_SET1(-192.0f), _CMP_LT_OQ);
    r = SL_BLEND(far, r, SL_SET1(__builtin_inff()));
    r = SL_BLEND(near0, r, SL_SET1(0.0f));
    return SL_BLEND(SL_CMP(nf, nf, _CMP_UNORD_Q), r, SL_ADD(x, x));
}

/* g, u, y: float[n] (y may alias g or u): the first n - n % SL_W elements of y = g / (1 + exp(-g)) * u;
 * returns that count. */
static __attribute__((target(SL_TGT))) int64_t SL_SFX(silu_mul)(const float *g, const float *u, float *y, int64_t n) {
    const int64_t m = n - n % SL_W;
    const SL_V one = SL_SET1(1.0f);
    for (int64_t i = 0; i < m; i += SL_W) {
        const SL_V a = SL_LOAD(g + i), v = SL_LOAD(u + i);
        const SL_V e = SL_SFX(gexp)(SL_NEG(a));
        SL_STORE(y + i, SL_MUL(SL_DIV(a, SL_ADD(one, e)), v));
    }
    return m;
}
