/* The AVX-512 back-end (F/BW/VL + AVX512_VNNI: Ice Lake and later Xeons, Sapphire Rapids, Zen 4/5): the
 * kernels of mm_vnni.h compiled for it (EVEX vpdpbusd, opmask bit expansion). Chosen at run time (matmul.c;
 * the CPU check is mm_cpu.c). */
#include "mm_internal.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
#define VN_TGT "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
#define VN_DPBUSD(c, u, s) _mm256_dpbusd_epi32((c), (u), (s))
#define VN_AVX512 1
#define VN_SUFFIX(x) x##_avx512
#include "mm_vnni.h"
#else
ub_mm_dot_fn ub_mm_dot_avx512(int32_t type) {
    (void)type;
    return 0;
}
ub_mm_gemm ub_mm_gemm_avx512(int32_t type) {
    (void)type;
    ub_mm_gemm g = {0, 0, 0};
    return g;
}
#endif
