/* The VNNI dot and GEMM kernels of the 32-element block types (Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4 against Q8_0;
 * Q4_1, Q5_1 against Q8_1) and the dot kernels of Q4_K / Q5_K / Q6_K (against Q8_K): ONE source compiled
 * twice, by mm_avxvnni.c (AVX2 + AVX-VNNI, VEX vpdpbusd / vpdpwssd, 16 ymm registers) and by mm_avx512.c (AVX-512 F/BW/VL + AVX512_VNNI: EVEX vpdpbusd, opmask bit
 * expansion, 32 registers, and 512-bit tiles), so that whichever of the two a machine has tests this code.
 *
 * The including file defines, before including it:
 *   VN_TGT            the target attribute string of every function here;
 *   VN_DPBUSD(c,u,s)  c + vpdpbusd(u (unsigned bytes), s (signed bytes)) on 256 bits;
 *   VN_DPWSSD(c,p,s)  c + vpdpwssd(p, s) (int16 pairs times int16, summed into int32 lanes) on 256 bits;
 *   VN_AVX512         1 when AVX-512 BW/VL may be used (mask registers, 512-bit tiles), else 0;
 *   VN_SUFFIX(x)      the name of an exported function (x ## _avxvnni / x ## _avx512).
 *
 * The operations per output element are the AVX2 kernels' (mm_avx2.c): per block, 8 int32 lanes, lane i the
 * exact sum of the 4 products of elements 4i..4i+3 (vpdpbusd sums the same four products maddubs + madd
 * sum; integers are exact, so the lanes are equal); one f32 product dw * dx and one FMA of the lanes into the
 * row's even-block or odd-block 8-lane accumulator; hsum(acc_even + acc_odd) at the end (the Q8_1 kinds:
 * one chain of every block, then hsum(acc) + the scalar fmaf chain of mw * s in block order, as ggml-cpu's x86
 * vec_dot_q{4,5}_1_q8_1; Q5_K: its mins as one exact int per block into a scalar fmaf chain added after the
 * hsum, as vec_dot_q5_K_q8_K). So these back-ends give bitwise the AVX2 back-end's results,
 * for 1 row or a tile of rows x columns alike (the tests check both). */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "mm_internal.h"
#include "mm_iq.h"
#include "ub_matmul.h"

#define VN static __attribute__((target(VN_TGT)))
#define VN_INL static inline __attribute__((always_inline, target(VN_TGT)))
#define VN_UNR _Pragma("GCC unroll 8")

static const int vn_bytes[7] = {18, 22, 34, 20, 24, 18, 17}; /* block bytes of kinds 0..6 */
/* kinds against Q8_0 (signed weights): 0 Q4_0, 1 Q5_0, 2 Q8_0, 5 IQ4_NL, 6 MXFP4; against Q8_1: 3 Q4_1, 4 Q5_1 */
#define VN_Q80(kind) ((kind) <= 2 || (kind) >= 5)

#define Q81_MFMA_X(m, s, acc) (fmaf((m), (s), (acc)))
#ifndef Q81_ONE_CHAIN
#define Q81_ONE_CHAIN(kind) ((kind) == 3 || (kind) == 4)
#define Q81_MFMA(m, s, acc) Q81_MFMA_X(m, s, acc)
#endif

VN_INL float vn_h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}
VN_INL float vn_hsum(__m256 a) { /* the AVX2 kernels' horizontal sum, same order */
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
VN_INL int32_t vn_hsum_i32(__m256i a) { /* the sum of 8 int32 lanes (exact: any order) */
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 1)));
}
VN_INL __m256i vn_ld(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
VN_INL uint32_t vn_rd32(const uint8_t *p) {
    uint32_t h;
    memcpy(&h, p, 4);
    return h;
}
/* 16 packed nibble bytes -> 32 bytes: low nibbles (elements 0..15) then high nibbles (16..31) */
VN_INL __m256i vn_nib(const uint8_t *p) {
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
    return _mm256_and_si256(_mm256_srlv_epi64(b, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(0x0F));
}
#if !VN_AVX512
/* 32 bytes: 0xFF where bit j of the uint32 h is set */
VN_INL __m256i vn_bits(uint32_t h) {
    const __m256i sel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)h), sel), bit), bit);
}
#endif

/* the block scale: f16 d, or MXFP4's e8m0 exponent byte */
VN_INL float vn_dw(const uint8_t *b, const int kind) { return kind == 6 ? ub_e8m0_half(b[0]) : vn_h2f(b); }
/* IQ4_NL's 16 values (kind 5) or twice the e2m1 values (kind 6), in both 128-bit lanes */
VN_INL __m256i vn_kv(const int kind) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(kind == 5 ? ub_iq4nl_kv : ub_mxfp4_kv)));
}

/* The 32 weight values of block b of kind k as bytes: signed for kinds 0..2 (Q4_0 nib - 8, Q5_0 nib5 - 16,
 * Q8_0 as stored) and 5..6 (the table value of the nibble), unsigned for kinds 3..4 (Q4_1 nib, Q5_1 nib5). */
VN_INL __m256i vn_weights(const uint8_t *b, const int kind) {
    if (kind == 0) return _mm256_sub_epi8(vn_nib(b + 2), _mm256_set1_epi8(8));
    if (kind >= 5) return _mm256_shuffle_epi8(vn_kv(kind), vn_nib(b + (kind == 5 ? 2 : 1)));
    if (kind == 2) return vn_ld(b + 2);
    if (kind == 3) return vn_nib(b + 4);
    const uint32_t h = vn_rd32(b + (kind == 1 ? 2 : 4));
    const __m256i n = vn_nib(b + (kind == 1 ? 6 : 8));
#if VN_AVX512
    if (kind == 1) /* nib - 16 where the fifth bit is clear */
        return _mm256_mask_sub_epi8(n, _cvtu32_mask32(~h), n, _mm256_set1_epi8(16));
    return _mm256_mask_add_epi8(n, _cvtu32_mask32(h), n, _mm256_set1_epi8(0x10)); /* nib < 16: + 16 is | 16 */
#else
    if (kind == 1) return _mm256_add_epi8(n, _mm256_andnot_si256(vn_bits(h), _mm256_set1_epi8(-16)));
    return _mm256_or_si256(n, _mm256_and_si256(vn_bits(h), _mm256_set1_epi8(0x10)));
#endif
}

/* The 8 int32 lanes of one block: w (as vn_weights gives it; wa = |w| for the signed kinds) . x */
VN_INL __m256i vn_isum(__m256i w, __m256i wa, __m256i x, const int kind) {
    if (VN_Q80(kind)) return VN_DPBUSD(_mm256_setzero_si256(), wa, _mm256_sign_epi8(x, w));
    (void)wa;
    return VN_DPBUSD(_mm256_setzero_si256(), w, x);
}

/* One block ib of the nr rows of a tile into acc[] (even or odd chain; accm[] for the Q8_1 kinds). */
VN_INL void vn_block(const uint8_t *w, const uint8_t *a, int64_t as, const int nr, int64_t ib, const int kind,
                     __m256 *acc, float *accm) {
    const uint8_t *b = w + ib * vn_bytes[kind];
    const __m256i q = vn_weights(b, kind);
    const __m256i qa = VN_Q80(kind) ? _mm256_sign_epi8(q, q) : q;
    const float dw = vn_dw(b, kind);
    const __m256 dwv = _mm256_set1_ps(dw);
    if (VN_Q80(kind)) {
        VN_UNR for (int r = 0; r < nr; r++) {
            const ub_act_q8_0 *x = (const ub_act_q8_0 *)(a + r * as) + ib;
            const __m256 sc = nr == 1 ? _mm256_set1_ps(dw * x->d) : _mm256_mul_ps(dwv, _mm256_broadcast_ss(&x->d));
            acc[r] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(vn_isum(q, qa, vn_ld(x->qs), kind)), acc[r]);
        }
    } else {
        const float mw = vn_h2f(b + 2);
        VN_UNR for (int r = 0; r < nr; r++) {
            const ub_act_q8_1 *x = (const ub_act_q8_1 *)(a + r * as) + ib;
            const __m256 sc = nr == 1 ? _mm256_set1_ps(dw * x->d) : _mm256_mul_ps(dwv, _mm256_broadcast_ss(&x->d));
            acc[r] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(vn_isum(q, qa, vn_ld(x->qs), kind)), acc[r]);
            accm[r] = Q81_MFMA(mw, x->s, accm[r]);
        }
    }
}

/* y[r * ys] for r < nr: the dot of weight row w (nb blocks) with activation rows a + r * as. */
VN_INL void vn_body(int64_t nb, const uint8_t *w, const uint8_t *a, int64_t as, const int nr, float *y,
                    int64_t ys, const int kind) {
    __m256 acc0[UB_MM_RT], acc1[UB_MM_RT];
    float accm[UB_MM_RT];
    VN_UNR for (int r = 0; r < nr; r++) {
        acc0[r] = acc1[r] = _mm256_setzero_ps();
        accm[r] = 0.0f;
    }
    int64_t ib = 0;
    if (Q81_ONE_CHAIN(kind)) /* Q4_1 / Q5_1: one chain, as ggml-cpu's x86 vec_dot_q{4,5}_1_q8_1 */
        for (; ib < nb; ib++) vn_block(w, a, as, nr, ib, kind, acc0, accm);
    for (; ib + 2 <= nb; ib += 2) {
        vn_block(w, a, as, nr, ib, kind, acc0, accm);
        vn_block(w, a, as, nr, ib + 1, kind, acc1, accm);
    }
    if (ib < nb) vn_block(w, a, as, nr, ib, kind, acc0, accm);
    VN_UNR for (int r = 0; r < nr; r++) {
        const float s = vn_hsum((Q81_ONE_CHAIN(kind) ? acc0[r] : _mm256_add_ps(acc0[r], acc1[r])));
        y[r * ys] = VN_Q80(kind) ? s : s + accm[r];
    }
}

#define VN_DISPATCH(NAME, KIND)                                                                             \
    VN void NAME(int64_t nb, const uint8_t *w, const uint8_t *a, int64_t as, int nr, float *y, int64_t ys) { \
        switch (nr) {                                                                                       \
        case 1: vn_body(nb, w, a, as, 1, y, ys, KIND); break;                                               \
        case 2: vn_body(nb, w, a, as, 2, y, ys, KIND); break;                                               \
        case 3: vn_body(nb, w, a, as, 3, y, ys, KIND); break;                                               \
        case 4: vn_body(nb, w, a, as, 4, y, ys, KIND); break;                                               \
        case 5: vn_body(nb, w, a, as, 5, y, ys, KIND); break;                                               \
        default: vn_body(nb, w, a, as, 6, y, ys, KIND); break;                                              \
        }                                                                                                   \
    }
VN_DISPATCH(vn_dot_q4_0, 0)
VN_DISPATCH(vn_dot_q5_0, 1)
VN_DISPATCH(vn_dot_q8_0, 2)
VN_DISPATCH(vn_dot_q4_1, 3)
VN_DISPATCH(vn_dot_q5_1, 4)
VN_DISPATCH(vn_dot_iq4_nl, 5)
VN_DISPATCH(vn_dot_mxfp4, 6)

/* ---- Q4_K / Q5_K / Q6_K against Q8_K: the AVX2 kernels (mm_avx2.c body_q45k / body_q6k) with each
 * madd-by-scale + add of the int32 lanes fused into one VN_DPWSSD (vpdpwssd: lane += p0 * s + p1 * s of the
 * two int16 maddubs pairs, no saturation — exactly madd then add), so the block's 8 int32 lanes are the same
 * integers; the f32 products dw * dx, dmin * dx, the FMA / FNMA into the row's accumulator in block order
 * and the hsum are the AVX2 kernel's, hence bitwise its results. ---- */
/* The 8 sub-block scales and 8 mins of a Q4_K / Q5_K block (6-bit, packed in the 12 bytes at s) without a
 * store / reload (the AVX2 kernel's int16 arrays cost a store-forwarding stall per block): returns the scales,
 * byte j = scale j, and sets *mins to the 16 int16 lanes min 0, min 0, min 1, min 1, ..., min 7, min 7. The
 * same integers as mm_avx2.c scale_min_k4: scale j < 4 = s[j] & 63, min j < 4 = s[j + 4] & 63; for j >= 4
 * scale = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4, min = (s[j + 4] >> 4) | (s[j] >> 6) << 4, per byte. */
VN_INL uint64_t vn_scale_min_k4(const uint8_t *s, __m256i *mins) {
    const uint32_t u0 = vn_rd32(s), u1 = vn_rd32(s + 4), u2 = vn_rd32(s + 8);
    const uint32_t sc_lo = u0 & 0x3F3F3F3Fu, mn_lo = u1 & 0x3F3F3F3Fu;
    const uint32_t sc_hi = (u2 & 0x0F0F0F0Fu) | (((u0 >> 6) & 0x03030303u) << 4);
    const uint32_t mn_hi = ((u2 >> 4) & 0x0F0F0F0Fu) | (((u1 >> 6) & 0x03030303u) << 4);
    const __m128i mn8 = _mm_cvtsi64_si128((long long)(((uint64_t)mn_hi << 32) | mn_lo));
    const __m128i twice = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    *mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(mn8, twice));
    return ((uint64_t)sc_hi << 32) | sc_lo;
}

/* y[r * ys] for r < nr: weight row w (nb Q4_K / Q5_K blocks) . activation rows a + r * as (Q8_K). */
VN_INL void vn_body_q45k(int64_t nb, const uint8_t *w, const uint8_t *a, int64_t as, const int nr, float *y,
                         int64_t ys, const int five) {
    __m256 acc[UB_MM_RT];
    float summ[UB_MM_RT];
    VN_UNR for (int r = 0; r < nr; r++) {
        acc[r] = _mm256_setzero_ps();
        summ[r] = 0.0f;
    }
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = w + ib * (five ? 176 : 144);
        const uint8_t *qs = b + (five ? 48 : 16);
        __m256i mins;
        const uint64_t sc = vn_scale_min_k4(b + 4, &mins);
        const float dw = vn_h2f(b), dmw = vn_h2f(b + 2);
        const __m256i qh = five ? vn_ld(b + 16) : _mm256_setzero_si256();
        __m256i sumi[UB_MM_RT];
        VN_UNR for (int r = 0; r < nr; r++) sumi[r] = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i raw = vn_ld(qs + 32 * c);
            __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
            if (five) {
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one), 4));
            }
            const __m256i s_lo = _mm256_set1_epi16((short)((sc >> (16 * c)) & 0xFF));
            const __m256i s_hi = _mm256_set1_epi16((short)((sc >> (16 * c + 8)) & 0xFF));
            VN_UNR for (int r = 0; r < nr; r++) {
                const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
                sumi[r] = VN_DPWSSD(sumi[r], _mm256_maddubs_epi16(lo, vn_ld(x->qs + 64 * c)), s_lo);
                sumi[r] = VN_DPWSSD(sumi[r], _mm256_maddubs_epi16(hi, vn_ld(x->qs + 64 * c + 32)), s_hi);
            }
        }
        VN_UNR for (int r = 0; r < nr; r++) {
            const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
            const __m256i mv = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)x->bsums), mins);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * x->d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
            if (five) /* Q5_K: the mins as ggml-cpu's x86 vec_dot_q5_K_q8_K, one exact int per block, a scalar FMA */
                summ[r] = fmaf(-(dmw * x->d), (float)vn_hsum_i32(mv), summ[r]);
            else
                acc[r] = _mm256_fnmadd_ps(_mm256_set1_ps(dmw * x->d), _mm256_cvtepi32_ps(mv), acc[r]);
        }
    }
    VN_UNR for (int r = 0; r < nr; r++) y[r * ys] = five ? vn_hsum(acc[r]) + summ[r] : vn_hsum(acc[r]);
}

/* y[r * ys] for r < nr: weight row w (nb Q6_K blocks; e in [0, 63], value e - 32, the -32 folded in exactly
 * via the bsums) . activation rows a + r * as (Q8_K). */
VN_INL void vn_body_q6k(int64_t nb, const uint8_t *w, const uint8_t *a, int64_t as, const int nr, float *y,
                        int64_t ys) {
    __m256 acc[UB_MM_RT];
    VN_UNR for (int r = 0; r < nr; r++) acc[r] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = w + ib * 210;
        const int8_t *sc = (const int8_t *)(b + 192);
        const float dw = vn_h2f(b + 208);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
        __m256i sumi[UB_MM_RT];
        VN_UNR for (int r = 0; r < nr; r++) sumi[r] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = vn_ld(b + 64 * h), ql1 = vn_ld(b + 64 * h + 32), qh = vn_ld(b + 128 + 32 * h);
            for (int i = 0; i < 4; i++) {
                const __m256i l = i == 0 ? _mm256_and_si256(ql0, m4)
                                  : i == 1 ? _mm256_and_si256(ql1, m4)
                                  : i == 2 ? _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4)
                                           : _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4);
                const __m256i hb = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * i), m2), 4);
                const __m256i e = _mm256_or_si256(l, hb);
                const int s0 = 8 * h + 2 * i;
                const __m256i sv = _mm256_set_m128i(_mm_set1_epi16(sc[s0 + 1]), _mm_set1_epi16(sc[s0]));
                VN_UNR for (int r = 0; r < nr; r++) {
                    const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
                    sumi[r] = VN_DPWSSD(sumi[r], _mm256_maddubs_epi16(e, vn_ld(x->qs + 128 * h + 32 * i)), sv);
                }
            }
        }
        VN_UNR for (int r = 0; r < nr; r++) {
            const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
            const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)x->bsums), sc16), 5);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * x->d), _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[r], corr)), acc[r]);
        }
    }
    VN_UNR for (int r = 0; r < nr; r++) y[r * ys] = vn_hsum(acc[r]);
}

#define VN_DISPATCH_K(NAME, BODY, ...)                                                                      \
    VN void NAME(int64_t nb, const uint8_t *w, const uint8_t *a, int64_t as, int nr, float *y, int64_t ys) { \
        switch (nr) {                                                                                       \
        case 1: BODY(nb, w, a, as, 1, y, ys __VA_ARGS__); break;                                            \
        case 2: BODY(nb, w, a, as, 2, y, ys __VA_ARGS__); break;                                            \
        case 3: BODY(nb, w, a, as, 3, y, ys __VA_ARGS__); break;                                            \
        case 4: BODY(nb, w, a, as, 4, y, ys __VA_ARGS__); break;                                            \
        case 5: BODY(nb, w, a, as, 5, y, ys __VA_ARGS__); break;                                            \
        default: BODY(nb, w, a, as, 6, y, ys __VA_ARGS__); break;                                           \
        }                                                                                                   \
    }
VN_DISPATCH_K(vn_dot_q4_k, vn_body_q45k, , 0)
VN_DISPATCH_K(vn_dot_q5_k, vn_body_q45k, , 1)
VN_DISPATCH_K(vn_dot_q6_k, vn_body_q6k)

ub_mm_dot_fn VN_SUFFIX(ub_mm_dot)(int32_t type) {
    switch (type) {
    case UB_T_Q4_0: return vn_dot_q4_0;
    case UB_T_Q5_0: return vn_dot_q5_0;
    case UB_T_Q8_0: return vn_dot_q8_0;
    case UB_T_Q4_1: return vn_dot_q4_1;
    case UB_T_Q5_1: return vn_dot_q5_1;
    case UB_T_IQ4_NL: return vn_dot_iq4_nl;
    case UB_T_MXFP4: return vn_dot_mxfp4;
    case UB_T_Q4_K: return vn_dot_q4_k;
    case UB_T_Q5_K: return vn_dot_q5_k;
    case UB_T_Q6_K: return vn_dot_q6_k;
    }
    return 0; /* Q2_K / Q3_K, the other i-quants and the float types: the AVX2 kernels */
}

/* ---- GEMM tiles (kinds 0..2, 5, 6: Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4): VN_GC weight rows x VN_GR activation rows per call ----
 * AVX-512 only (32 registers: a 4 x 4 tile of zmm accumulators; on AVX-VNNI's 16 ymm registers every tile
 * larger than the dot kernels' 1 x 6 spilled and measured slower on Zen 4, so that back-end has none).
 * A "pair" holds blocks ib (even) and ib + 1 (odd) of one row in one zmm (the even block in the low 256
 * bits): its halves are exactly the dot kernel's acc0 / acc1 chains.
 * Integer lanes by the offset trick: u = w + off is unsigned (Q4_0 nib, Q5_0 nib5, Q8_0 w ^ 0x80), and
 * vpdpbusd(-off * lanesum(x), u, x) = sum of w * x per lane, exactly the dot kernel's lanes; -off * lanesum(x)
 * is computed once per activation row and shared by the tile's columns. The scale is the same f32 product
 * dw * dx, then one FMA per block as in the dot kernel. */
#if VN_AVX512
#define VN_GC 4
#define VN_GR 4
typedef __m512 vp_f;
typedef __m512i vp_i;
VN_INL vp_i vp_join(__m256i e, __m256i o) { return _mm512_inserti64x4(_mm512_castsi256_si512(e), o, 1); }
VN_INL vp_f vp_set2(float e, float o) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm256_set1_ps(e))),
                                               _mm256_castps_pd(_mm256_set1_ps(o)), 1));
}
VN_INL vp_f vp_zero(void) { return _mm512_setzero_ps(); }
VN_INL vp_i vp_corr(vp_i x, const int off) { /* -off * (sum of each lane's 4 bytes of x) */
    return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)off), x));
}
VN_INL vp_f vp_step(vp_f acc, vp_f dw, vp_f dx, vp_i corr, vp_i u, vp_i x) {
    return _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(corr, u, x)), acc);
}
VN_INL vp_f vp_step_even(vp_f acc, vp_f dw, vp_f dx, vp_i corr, vp_i u, vp_i x) { /* the odd half unchanged */
    return _mm512_mask3_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(corr, u, x)), acc, 0x00FF);
}
VN_INL float vp_final(vp_f acc) {
    return vn_hsum(_mm256_add_ps(_mm512_castps512_ps256(acc), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1))));
}

/* The unsigned weight bytes u = w + off of block b (kind 0: off 8, 1: 16, 2, 5, 6: 128). */
VN_INL __m256i vn_uweights(const uint8_t *b, const int kind) {
    if (kind == 0) return vn_nib(b + 2);
    if (kind >= 5) return _mm256_xor_si256(vn_weights(b, kind), _mm256_set1_epi8((char)0x80));
    if (kind == 2) return _mm256_xor_si256(vn_ld(b + 2), _mm256_set1_epi8((char)0x80));
    const uint32_t h = vn_rd32(b + 2);
    const __m256i n = vn_nib(b + 6);
    return _mm256_mask_add_epi8(n, _cvtu32_mask32(h), n, _mm256_set1_epi8(0x10));
}

VN_INL void vn_gemm_body(int64_t nb, const uint8_t *w, int64_t ws, const uint8_t *a, int64_t as, float *y,
                         int64_t ys, const int kind) {
    const int bytes = vn_bytes[kind], off = kind == 0 ? 8 : kind == 1 ? 16 : 128;
    vp_f acc[VN_GC][VN_GR];
    VN_UNR for (int c = 0; c < VN_GC; c++) VN_UNR for (int r = 0; r < VN_GR; r++) acc[c][r] = vp_zero();
    int64_t ib = 0;
    for (; ib + 2 <= nb; ib += 2) {
        vp_i x[VN_GR], corr[VN_GR];
        vp_f dx[VN_GR];
        VN_UNR for (int r = 0; r < VN_GR; r++) {
            const ub_act_q8_0 *xb = (const ub_act_q8_0 *)(a + r * as) + ib;
            x[r] = vp_join(vn_ld(xb[0].qs), vn_ld(xb[1].qs));
            corr[r] = vp_corr(x[r], off);
            dx[r] = vp_set2(xb[0].d, xb[1].d);
        }
        VN_UNR for (int c = 0; c < VN_GC; c++) {
            const uint8_t *b = w + c * ws + ib * bytes;
            const vp_i u = vp_join(vn_uweights(b, kind), vn_uweights(b + bytes, kind));
            const vp_f dw = vp_set2(vn_dw(b, kind), vn_dw(b + bytes, kind));
            VN_UNR for (int r = 0; r < VN_GR; r++) acc[c][r] = vp_step(acc[c][r], dw, dx[r], corr[r], u, x[r]);
        }
    }
    if (ib < nb) { /* the last, even block: the even half only */
        vp_i x[VN_GR], corr[VN_GR];
        vp_f dx[VN_GR];
        VN_UNR for (int r = 0; r < VN_GR; r++) {
            const ub_act_q8_0 *xb = (const ub_act_q8_0 *)(a + r * as) + ib;
            x[r] = vp_join(vn_ld(xb[0].qs), _mm256_setzero_si256());
            corr[r] = vp_corr(x[r], off);
            dx[r] = vp_set2(xb[0].d, 0.0f);
        }
        VN_UNR for (int c = 0; c < VN_GC; c++) {
            const uint8_t *b = w + c * ws + ib * bytes;
            const vp_i u = vp_join(vn_uweights(b, kind), _mm256_setzero_si256());
            const vp_f dw = vp_set2(vn_dw(b, kind), 0.0f);
            VN_UNR for (int r = 0; r < VN_GR; r++) acc[c][r] = vp_step_even(acc[c][r], dw, dx[r], corr[r], u, x[r]);
        }
    }
    VN_UNR for (int c = 0; c < VN_GC; c++) VN_UNR for (int r = 0; r < VN_GR; r++) y[r * ys + c] = vp_final(acc[c][r]);
}

/* ---- The decode tile (AVX-512 back-end): VN_VC weight rows x 1 activation row, for a call's rows fewer than a
 * GEMM tile (B = 1 decode). Per element the dot kernel's operations for that row alone: the block's 8 int32
 * lanes by the offset trick (u = w + off, vpdpbusd(-off * lanesum(x), u, x): the same exact integers as
 * vpdpbusd(|w|, sign(x, w))), the same f32 product dw * dx, one FMA into the row's even-block or odd-block
 * accumulator, the same hsum of their sum. What the tile saves per weight block: -off * lanesum(x) and the x
 * loads are shared by its VN_VC columns; the products dw * dx are formed 8 blocks at a time (the f16 scales
 * gathered through a general register, one vcvtph2ps) into a small table read back by the FMA's broadcast
 * operand; Q5_0's fifth bit is one masked byte add. Each call prefetches the tile after next (the weights
 * stream in from memory ahead of the decode: +5-10 % from DRAM; a prefetch past the weights' end is a hint,
 * not a read, and cannot fault). ---- */
#define VN_VC VN_GC /* the GEMM tile's columns: the driver steps both by gc */
#define VN_VSEG 32 /* blocks per segment of the scale table (even) */

/* The 4 f16 scales at b, b + st, b + 2 st, b + 3 st (read only) as one 64-bit word. */
VN_INL uint64_t vn_d4(const uint8_t *b, int64_t st) {
    uint16_t h0, h1, h2, h3;
    memcpy(&h0, b, 2);
    memcpy(&h1, b + st, 2);
    memcpy(&h2, b + 2 * st, 2);
    memcpy(&h3, b + 3 * st, 2);
    return (uint64_t)h0 | (uint64_t)h1 << 16 | (uint64_t)h2 << 32 | (uint64_t)h3 << 48;
}

/* sc[c][i] = dw(column c, block ib0 + i) * dx(block ib0 + i) for i < len <= VN_VSEG (the dot kernel's f32
 * product): w: VN_VC weight rows ws bytes apart; x: the activation row's blocks (both read only). */
VN_INL void vn_vscales(const uint8_t *w, int64_t ws, const ub_act_q8_0 *x, int64_t ib0, int len, const int kind,
                       float sc[VN_VC][VN_VSEG]) {
    const int bytes = vn_bytes[kind];
    float dx[VN_VSEG];
    for (int i = 0; i < len; i++) dx[i] = x[ib0 + i].d;
    VN_UNR for (int c = 0; c < VN_VC; c++) {
        const uint8_t *b = w + c * ws + ib0 * bytes;
        int i = 0;
        if (kind != 6)
            for (; i + 8 <= len; i += 8) {
                const __m128i h = _mm_set_epi64x((long long)vn_d4(b + (i + 4) * bytes, bytes), (long long)vn_d4(b + i * bytes, bytes));
                _mm256_storeu_ps(sc[c] + i, _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_loadu_ps(dx + i)));
            }
        for (; i < len; i++) sc[c][i] = vn_dw(b + i * bytes, kind) * dx[i];
    }
}

/* The unsigned weight bytes u = w + off of block b (kind 0..2 / 5 / 6; b: one block, read only). */
VN_INL __m256i vn_uw(const uint8_t *b, const int kind) {
    if (kind != 1) return vn_uweights(b, kind);
    const __m256i n = vn_nib(b + 6);
    return _mm256_mask_add_epi8(n, _cvtu32_mask32(vn_rd32(b + 2)), n, _mm256_set1_epi8(0x10));
}

/* y[c] for c < VN_VC: weight row c at w + c * ws (nb blocks of kind, read only) . the one activation row a
 * (nb ub_act_q8_0 blocks, read only); sc: the segment's scale table, on the stack. */
VN_INL void vn_gemv_body(int64_t nb, const uint8_t *w, int64_t ws, const uint8_t *a, float *y, const int kind) {
    const int bytes = vn_bytes[kind], off = kind == 0 ? 8 : kind == 1 ? 16 : 128;
    const ub_act_q8_0 *x = (const ub_act_q8_0 *)a;
    const __m256i offv = _mm256_set1_epi8((char)off);
    __m256 acc0[VN_VC], acc1[VN_VC];
    VN_UNR for (int c = 0; c < VN_VC; c++) acc0[c] = acc1[c] = _mm256_setzero_ps();
    float sc[VN_VC][VN_VSEG];
    for (int64_t p = 0; p < VN_VC * ws; p += 64) _mm_prefetch((const char *)(w + 2 * VN_VC * ws + p), _MM_HINT_T0);
    for (int64_t s0 = 0; s0 < nb; s0 += VN_VSEG) {
        const int len = nb - s0 < VN_VSEG ? (int)(nb - s0) : VN_VSEG;
        vn_vscales(w, ws, x, s0, len, kind, sc);
        int i = 0;
        for (; i + 2 <= len; i += 2) {
            VN_UNR for (int e = 0; e < 2; e++) {
                const __m256i xv = vn_ld(x[s0 + i + e].qs);
                const __m256i corr = _mm256_sub_epi32(_mm256_setzero_si256(), VN_DPBUSD(_mm256_setzero_si256(), offv, xv));
                VN_UNR for (int c = 0; c < VN_VC; c++) {
                    const __m256i u = vn_uw(w + c * ws + (s0 + i + e) * bytes, kind);
                    const __m256 f = _mm256_cvtepi32_ps(VN_DPBUSD(corr, u, xv));
                    if (e == 0) acc0[c] = _mm256_fmadd_ps(_mm256_broadcast_ss(&sc[c][i]), f, acc0[c]);
                    else acc1[c] = _mm256_fmadd_ps(_mm256_broadcast_ss(&sc[c][i + 1]), f, acc1[c]);
                }
            }
        }
        if (i < len) { /* the last block of an odd nb (segments are even): the even chain */
            const __m256i xv = vn_ld(x[s0 + i].qs);
            const __m256i corr = _mm256_sub_epi32(_mm256_setzero_si256(), VN_DPBUSD(_mm256_setzero_si256(), offv, xv));
            VN_UNR for (int c = 0; c < VN_VC; c++) {
                const __m256i u = vn_uw(w + c * ws + (s0 + i) * bytes, kind);
                acc0[c] = _mm256_fmadd_ps(_mm256_broadcast_ss(&sc[c][i]), _mm256_cvtepi32_ps(VN_DPBUSD(corr, u, xv)), acc0[c]);
            }
        }
    }
    VN_UNR for (int c = 0; c < VN_VC; c++) y[c] = vn_hsum(_mm256_add_ps(acc0[c], acc1[c]));
}

#define VN_GEMV(NAME, KIND)                                                                                   \
    VN void vn_gemv_##NAME(int64_t nb, const uint8_t *w, int64_t ws, const uint8_t *a, int64_t as, float *y, \
                           int64_t ys) {                                                                      \
        (void)as;                                                                                             \
        (void)ys;                                                                                             \
        vn_gemv_body(nb, w, ws, a, y, KIND);                                                                  \
    }
VN_GEMV(q4_0, 0)
VN_GEMV(q5_0, 1)
VN_GEMV(q8_0, 2)
VN_GEMV(iq4_nl, 5)
VN_GEMV(mxfp4, 6)

VN void vn_gemm_q4_0(int64_t nb, const uint8_t *w, int64_t ws, const uint8_t *a, int64_t as, float *y, int64_t ys) {
    vn_gemm_body(nb, w, ws, a, as, y, ys, 0);
}
VN void vn_gemm_q5_0(int64_t nb, const uint8_t *w, int64_t ws, const uint8_t *a, int64_t as, float *y, int64_t ys) {
    vn_gemm_body(nb, w, ws, a, as, y, ys, 1);
}
VN void vn_gemm_q8_0(int64_t nb, const uint8_t *w, int64_t ws, const uint8_t *a, int64_t as, float *y, int64_t ys) {
    vn_gemm_body(nb, w, ws, a, as, y, ys, 2);
}
VN void vn_gemm_iq4_nl(int64_t nb, const uint8_t *w, int64_t ws, const uint8_t *a, int64_t as, float *y, int64_t ys) {
    vn_gemm_body(nb, w, ws, a, as, y, ys, 5);
}
VN void vn_gemm_mxfp4(int64_t nb, const uint8_t *w, int64_t ws, const uint8_t *a, int64_t as, float *y, int64_t ys) {
    vn_gemm_body(nb, w, ws, a, as, y, ys, 6);
}

#endif

/* The GEMM tile of the 32-block types here ({NULL} for the others; the including file exports its lookup). */
static ub_mm_gemm vn_gemm_lookup(int32_t type) {
    ub_mm_gemm g = {0};
#if VN_AVX512
    g.gc = VN_GC;
    g.gr = VN_GR;
    if (type == UB_T_Q4_0) g.fn = vn_gemm_q4_0, g.fn1 = vn_gemv_q4_0;
    else if (type == UB_T_Q5_0) g.fn = vn_gemm_q5_0, g.fn1 = vn_gemv_q5_0;
    else if (type == UB_T_Q8_0) g.fn = vn_gemm_q8_0, g.fn1 = vn_gemv_q8_0;
    else if (type == UB_T_IQ4_NL) g.fn = vn_gemm_iq4_nl, g.fn1 = vn_gemv_iq4_nl;
    else if (type == UB_T_MXFP4) g.fn = vn_gemm_mxfp4, g.fn1 = vn_gemv_mxfp4;
    else g.gc = g.gr = 0;
#else
    (void)type; /* 16 ymm registers hold no tile larger than the dot kernels' 1 x 6 (measured slower on Zen 4) */
#endif
    return g;
}
