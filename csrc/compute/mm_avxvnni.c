/* The AVX-VNNI back-end (AVX2 + VEX-encoded 256-bit vpdpbusd: Alder Lake and later, Zen 5): the kernels of
 * mm_vnni.h compiled for it. Chosen at run time (matmul.c; the CPU check is mm_cpu.c). */
#include "mm_internal.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
#define VN_TGT "avx2,fma,f16c,avxvnni"
#define VN_DPBUSD(c, u, s) _mm256_dpbusd_avx_epi32((c), (u), (s))
#define VN_DPWSSD(c, p, s) _mm256_dpwssd_avx_epi32((c), (p), (s))
#define VN_AVX512 0
#define VN_SUFFIX(x) x##_avxvnni
#include "mm_vnni.h"
ub_mm_gemm ub_mm_gemm_avxvnni(int32_t type) { return vn_gemm_lookup(type); }
#else
ub_mm_dot_fn ub_mm_dot_avxvnni(int32_t type) {
    (void)type;
    return 0;
}
ub_mm_gemm ub_mm_gemm_avxvnni(int32_t type) {
    (void)type;
    ub_mm_gemm g = {0};
    return g;
}
#endif
