/* The AVX-VNNI panel kernels (AVX2 + VEX vpdpbusd): rp_ymm.h compiled with vpdpbusd for the integer sums.
 * Chosen at run time (matmul.c via ub_rp_panel_for). */
#include "rp_internal.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
#define RP_TGT "avx2,fma,f16c,avxvnni"
#define RP_VNNI 1
#define RP_DPBUSD(c, u, s) _mm256_dpbusd_avx_epi32((c), (u), (s))
#define RP_NAME rp_panel_iq4nl_avxvnni
#include "rp_ymm.h"
ub_rp_panel_fn ub_rp_panel_avxvnni(int32_t type) { return type == UB_T_IQ4_NL ? rp_panel_iq4nl_avxvnni : 0; }
#else
ub_rp_panel_fn ub_rp_panel_avxvnni(int32_t type) {
    (void)type;
    return 0;
}
#endif
