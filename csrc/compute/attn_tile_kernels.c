/* The blocked (several heads x several cells) inner loops of the visible-cell attention, for f32 / f16 K and
 * V: one source (attn_tile_simd.h) compiled for AVX2+FMA+F16C (the avx2 and avxvnni back-ends) and for
 * AVX-512 F/VL (the avx512 back-end: 32 vector registers, 512-bit P.V accumulators). Bitwise the results of
 * the per-cell loops of attn_vis_kernels.c on every SIMD back-end (see attn_tile_simd.h). */
#include <math.h>

#include "ub_compute.h"
#include "ub_matmul.h"
#include "attn_vis_kernels.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
#include <immintrin.h>

#define AT_TGT "avx2,fma,f16c"
#define AT_SFX(x) x##_at2
#define AT_HB 2
#define AT_512 0
#include "attn_tile_simd.h"
#undef AT_TGT
#undef AT_SFX
#undef AT_HB
#undef AT_512

#define AT_TGT "avx2,fma,f16c,avx512f,avx512vl"
#define AT_SFX(x) x##_at5
#define AT_HB 4
#define AT_512 1
#include "attn_tile_simd.h"
#undef AT_TGT
#undef AT_SFX
#undef AT_HB
#undef AT_512
#define HAVE_AT 1
#else
#define HAVE_AT 0
#endif

/* kern: filled in its blocked entries (NULL where none applies: the caller keeps the per-cell loops). */
void ub_av_select_tiles(ub_av_kernels *kern, int backend, int32_t hd_k, int32_t hd_v) {
    kern->scores_f32 = kern->scores_f16 = NULL;
    kern->pv_f32 = kern->pv_f16 = NULL;
    kern->probs = NULL;
#if HAVE_AT
    if (backend == UB_MM_GENERIC) return;
    const int b512 = backend == UB_MM_AVX512;
    kern->probs = b512 ? probs_at5 : probs_at2;
    if (hd_k % 8 == 0) {
        kern->scores_f32 = b512 ? scores_f32_at5 : scores_f32_at2;
        kern->scores_f16 = b512 ? scores_f16_at5 : scores_f16_at2;
    }
    if (b512 && hd_v % 16 == 0) {
        kern->pv_f32 = pv_f32_at5;
        kern->pv_f16 = pv_f16_at5;
    } else if (hd_v % 8 == 0) {
        kern->pv_f32 = pv_f32_at2;
        kern->pv_f16 = pv_f16_at2;
    }
#else
    (void)backend; (void)hd_k; (void)hd_v;
#endif
}
