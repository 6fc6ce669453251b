/* The AVX-512 dot kernels of NVFP4, Q1_0 and Q2_0 (mm_fp4_simd.h compiled with AVX512_VNNI vpdpbusd and the
 * Q1_0 bits expanded through an opmask). Bitwise the plain-C kernels of mm_fp4_bits.c. Chosen at run time by
 * matmul.c for the avx512 back-end (the avxvnni back-end runs the AVX2 build, mm_fp4_avx2.c). */
#include "mm_internal.h"
#include "mm_iq.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
#define FS_TGT "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
#define FS_DOTI(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), (u), (s))
#define FS_AVX512 1
#define FS_SUFFIX(x) x##_avx512
#include "mm_fp4_simd.h"
#else
ub_mm_dot_fn ub_mm_dot_fp4_avx512(int32_t type) {
    (void)type;
    return 0;
}
ub_mm_gemm ub_mm_gemm_fp4_avx512(int32_t type) {
    (void)type;
    ub_mm_gemm g = {0};
    return g;
}
#endif
