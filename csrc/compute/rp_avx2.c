/* The AVX2 panel kernels (AVX2 + FMA + F16C): rp_ymm.h compiled with maddubs + madd for the integer sums.
 * Chosen at run time (matmul.c via ub_rp_panel_for; also the avxvnni / avx512 fallback). The Q4_K / Q6_K panel
 * kernels are rp_kq_avx2.c's. */
#include "rp_kquant.h"
#include "rp_iq4xs.h"
#include "rp_q5_0.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
#define RP_TGT "avx2,fma,f16c"
#define RP_VNNI 0
#define RP_NAME rp_panel_iq4nl_avx2
#include "rp_ymm.h"
ub_rp_panel_fn ub_rp_panel_avx2(int32_t type) {
    if (type == UB_T_Q5_0) return ub_rp_q5_avx2(type);
    if (type == UB_T_IQ4_NL) return rp_panel_iq4nl_avx2;
    return type == UB_T_IQ4_XS ? ub_rp_xs_avx2(type) : ub_rp_kq_avx2(type);
}
#else
ub_rp_panel_fn ub_rp_panel_avx2(int32_t type) {
    (void)type;
    return 0;
}
#endif
