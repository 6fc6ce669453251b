/* AVX2 + FMA + F16C matmul kernels, compiled with per-function target attributes and chosen at run time
 * (matmul.c). Contracts: mm_internal.h. On other compilers / architectures nothing is compiled in and
 * ub_mm_cpu_avx2() returns 0. */
#include "mm_internal.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
int ub_mm_cpu_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}
ub_mm_dot_fn ub_mm_dot_avx2(int32_t type) {
    (void)type;
    return 0;
}
void ub_mm_quant_row_avx2(int32_t act, const float *x, int64_t k, uint8_t *out) {
    ub_mm_quant_row_generic(act, x, k, out);
}
#else
int ub_mm_cpu_avx2(void) { return 0; }
ub_mm_dot_fn ub_mm_dot_avx2(int32_t type) {
    (void)type;
    return 0;
}
void ub_mm_quant_row_avx2(int32_t act, const float *x, int64_t k, uint8_t *out) {
    ub_mm_quant_row_generic(act, x, k, out);
}
#endif
