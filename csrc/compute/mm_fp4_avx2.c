/* The AVX2 dot kernels of NVFP4, Q1_0 and Q2_0 (mm_fp4_simd.h compiled with maddubs + madd); the avx2 and
 * avxvnni back-ends run them. Bitwise the plain-C kernels of mm_fp4_bits.c. Chosen at run time (matmul.c via
 * ub_mm_dot_iq_avx2); without AVX2 support in the compiler nothing is compiled in and the plain C runs. */
#include "mm_internal.h"
#include "mm_iq.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
#define FS_TGT "avx2,fma,f16c"
#define FS_DOTI(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1))
#define FS_AVX512 0
#define FS_SUFFIX(x) x##_avx2
#include "mm_fp4_simd.h"
#else
ub_mm_dot_fn ub_mm_dot_fp4_avx2(int32_t type) {
    (void)type;
    return 0;
}
ub_mm_gemm ub_mm_gemm_fp4_avx2(int32_t type) {
    (void)type;
    ub_mm_gemm g = {0};
    return g;
}
#endif
