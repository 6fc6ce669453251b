/* The SIMD dot kernels of NVFP4, Q1_0 and Q2_0 against Q8_0 activations: ONE source compiled twice, by
 * mm_fp4_avx2.c (AVX2: maddubs + madd; also what the avxvnni back-end runs) and by mm_fp4_avx512.c (AVX-512
 * F/BW/VL + AVX512_VNNI: vpdpbusd, the Q1_0 bits through an opmask). Block layouts and the plain-C kernels:
 * mm_fp4_bits.c.
 *
 * The including file defines, before including it:
 *   FS_TGT         the target attribute string of every function here;
 *   FS_DOTI(u, s)  8 int32 lanes, lane i = sum of the 4 products of bytes 4i..4i+3 of u (unsigned) and s (signed);
 *   FS_AVX512      1 when AVX-512 BW/VL may be used (opmask registers), else 0;
 *   FS_SUFFIX(x)   the name of the exported lookup (x ## _avx2 / x ## _avx512).
 *
 * Results are BITWISE the plain-C kernels' (mm_fp4_bits.c): per activation row, the exact int32 sum of each
 * 16-element sub-block (NVFP4) or 32-element activation block (Q1_0, Q2_0) — from int32 lanes of products
 * of |w| <= 12 and |x| <= 127, added in any order (exact) — then the same float32 operations in the same
 * order: NVFP4 acc += (d_x[k] * sc[s]) * isum_s, s = 0..3 in order per block; Q1_0 / Q2_0 t = 0 + d_x[k] *
 * isum_k, k ascending, acc += d_w * t; blocks in index order, one scalar accumulator per row (float products
 * taken four at a time in a vector are the same single-precision products, no FMA anywhere). So every
 * back-end gives the generic back-end's bits, for any row count, tile or thread split. Every row's
 * operations are the same whatever nr is: the weight block is decoded once and shared, nothing else is.
 *
 * Shapes of the work: the dot kernels take rows in groups of 2..4, a row per 32-bit lane (the int32 lanes of
 * the rows reduced by a tree of hadds straight into that layout; pad lanes zero and discarded), and a single
 * row (nr % 4 == 1) with the same operations on scalars; Q1_0 and Q2_0 also have a decode tile (4 weight rows
 * x the rows left alone, a weight row per lane), NVFP4 none (measured slower than its dot kernel). NVFP4's
 * e4m3 scales come from a 256-entry table (ub_ue4m3_half, mm_iq_tables.c). GCC compiles this with
 * -std=c99, so no float expression is contracted into an FMA. */
#include <immintrin.h>
#include <string.h>

#include "mm_internal.h"
#include "mm_iq.h"
#include "ub_matmul.h"

#define FS static __attribute__((target(FS_TGT)))
#define FS_INL static inline __attribute__((always_inline, target(FS_TGT)))
#define FS_UNR _Pragma("GCC unroll 8")

FS_INL __m256i fs_ld(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
FS_INL float fs_h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}
/* w (signed, |w| <= 12; wa = |w|) . x (Q8_0 codes, never -128): 8 exact int32 lanes */
FS_INL __m256i fs_sdot(__m256i w, __m256i wa, __m256i x) { return FS_DOTI(wa, _mm256_sign_epi8(x, w)); }
/* [sum of lanes 0..3 of u, of lanes 4..7 of u, of lanes 0..3 of v, of lanes 4..7 of v] (exact) */
FS_INL __m128i fs_quarters(__m256i u, __m256i v) {
    __m256i h = _mm256_hadd_epi32(u, v);
    h = _mm256_hadd_epi32(h, h); /* 128-bit half 0: [u 0..3, v 0..3, .., ..]; half 1: [u 4..7, v 4..7, .., ..] */
    return _mm_unpacklo_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}
/* [sum of u, sum of v, sum of w, sum of z] (8 lanes each; exact) */
FS_INL __m128i fs_sums4(__m256i u, __m256i v, __m256i w, __m256i z) {
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(u, v), _mm256_hadd_epi32(w, z));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}
FS_INL float fs_lane(__m128 v, const int i) {
    return i == 0 ? _mm_cvtss_f32(v) : i == 1 ? _mm_cvtss_f32(_mm_movehdup_ps(v))
           : i == 2 ? _mm_cvtss_f32(_mm_movehl_ps(v, v)) : _mm_cvtss_f32(_mm_shuffle_ps(v, v, 3));
}

/* [lanes 0..3 of v_l summed, l = 0..3 | lanes 4..7 of v_l summed, l = 0..3] (exact) */
FS_INL __m256i fs_rows4(const __m256i *v) {
    return _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
}
/* two fs_rows4 results X, Y -> [X's halves added | Y's halves added]: the full 8-lane sums per row (exact) */
FS_INL __m256i fs_join(__m256i x, __m256i y) {
    return _mm256_add_epi32(_mm256_permute2x128_si256(x, y, 0x20), _mm256_permute2x128_si256(x, y, 0x31));
}

/* y[r * ys] for r < nr: groups of 4 rows in the lanes of acc[0], acc[1] (nr / 4 + (nr % 4 >= 2) groups), then
 * the single row (when nr % 4 == 1) in s1 */
FS_INL void fs_store(const __m128 *acc, float s1, const int nr, float *y, int64_t ys) {
    float t[8];
    _mm_storeu_ps(t, acc[0]);
    _mm_storeu_ps(t + 4, acc[1]);
    const int ng = nr % 4 == 1 ? nr - 1 : nr;
    for (int r = 0; r < ng; r++) y[r * ys] = t[r];
    if (nr % 4 == 1) y[(nr - 1) * ys] = s1;
}

/* ---- NVFP4: 36-byte blocks of 64 (d[4] e4m3, qs[32]); weight block ib spans activation blocks 2ib, 2ib + 1 ---- */

/* The 4 sub-block scales of a block (d: its 4 scale bytes, read only), as mm_fp4_bits.c's ue4m3_half: the table */
FS_INL __m128 fs_ue4m3_half4(const uint8_t *d) {
    return _mm_setr_ps(ub_ue4m3_half[d[0]], ub_ue4m3_half[d[1]], ub_ue4m3_half[d[2]], ub_ue4m3_half[d[3]]);
}
/* The 64 values of an NVFP4 block's qs (b: the block, read only): elements 0..31 in *w0, 32..63 in *w1. */
FS_INL void fs_nv_values(const uint8_t *b, __m256i *w0, __m256i *w1) {
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)ub_mxfp4_kv));
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    /* sub-block s = qs[8s .. 8s + 7]: low nibbles (its elements 0..7), then high nibbles (8..15) */
    const __m256i raw = fs_ld(b + 4);
    const __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
    const __m256i u = _mm256_unpacklo_epi64(lo, hi), v = _mm256_unpackhi_epi64(lo, hi); /* [sb0 | sb2], [sb1 | sb3] */
    *w0 = _mm256_shuffle_epi8(kv, _mm256_permute2x128_si256(u, v, 0x20));
    *w1 = _mm256_shuffle_epi8(kv, _mm256_permute2x128_si256(u, v, 0x31));
}

/* Rows r0 .. r0 + G - 1 (2 <= G <= 4) of block ib, the rows in the 4 lanes of acc (lanes >= G: zeros, unused):
 * acc += (dx_k * sc_s) * isum_s for s = 0..3 in order, the plain C's operations lane by lane. w0 / w1: the
 * block's values of elements 0..31 / 32..63 (a0 / a1: their magnitudes); sc01 = [sc0 x 4 | sc1 x 4], sc23 alike. */
FS_INL __m128 fs_nv_group(__m256i w0, __m256i a0, __m256i w1, __m256i a1, __m256 sc01, __m256 sc23,
                          const uint8_t *a, int64_t as, int r0, const int G, int64_t ib, __m128 acc) {
    __m256i i0[4], i1[4];
    float d0[4], d1[4];
    FS_UNR for (int l = 0; l < 4; l++) {
        if (l < G) {
            const ub_act_q8_0 *x = (const ub_act_q8_0 *)(a + (r0 + l) * as) + 2 * ib;
            i0[l] = fs_sdot(w0, a0, fs_ld(x[0].qs));
            i1[l] = fs_sdot(w1, a1, fs_ld(x[1].qs));
            d0[l] = x[0].d;
            d1[l] = x[1].d;
        } else {
            i0[l] = i1[l] = _mm256_setzero_si256();
            d0[l] = d1[l] = 0.0f;
        }
    }
    /* [isum_0 of the 4 rows | isum_1 of the 4 rows], [isum_2 | isum_3] (exact) */
    const __m256i s01 = _mm256_hadd_epi32(_mm256_hadd_epi32(i0[0], i0[1]), _mm256_hadd_epi32(i0[2], i0[3]));
    const __m256i s23 = _mm256_hadd_epi32(_mm256_hadd_epi32(i1[0], i1[1]), _mm256_hadd_epi32(i1[2], i1[3]));
    const __m128 x0 = _mm_setr_ps(d0[0], d0[1], d0[2], d0[3]), x1 = _mm_setr_ps(d1[0], d1[1], d1[2], d1[3]);
    const __m256 p01 = _mm256_mul_ps(_mm256_mul_ps(_mm256_set_m128(x0, x0), sc01), _mm256_cvtepi32_ps(s01));
    const __m256 p23 = _mm256_mul_ps(_mm256_mul_ps(_mm256_set_m128(x1, x1), sc23), _mm256_cvtepi32_ps(s23));
    acc = _mm_add_ps(acc, _mm256_castps256_ps128(p01));
    acc = _mm_add_ps(acc, _mm256_extractf128_ps(p01, 1));
    acc = _mm_add_ps(acc, _mm256_castps256_ps128(p23));
    return _mm_add_ps(acc, _mm256_extractf128_ps(p23, 1));
}

/* Rows in groups of 4 lanes (fs_nv_group), a last single row by itself (the same operations, scalar). */
FS_INL void fs_body_nvfp4(int64_t nb, const uint8_t *w, const uint8_t *a, int64_t as, const int nr, float *y,
                          int64_t ys) {
    const int ng = nr / 4 + (nr % 4 >= 2), single = nr % 4 == 1; /* groups of 2..4 rows; a row alone */
    __m128 accg[2] = {_mm_setzero_ps(), _mm_setzero_ps()};
    float acc1 = 0.0f;
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = w + ib * 36;
        const __m128 sc = fs_ue4m3_half4(b);
        __m256i w0, w1;
        fs_nv_values(b, &w0, &w1);
        const __m256i a0 = _mm256_sign_epi8(w0, w0), a1 = _mm256_sign_epi8(w1, w1);
        if (ng) {
            const __m256 sc01 = _mm256_set_m128(_mm_shuffle_ps(sc, sc, 0x55), _mm_shuffle_ps(sc, sc, 0x00));
            const __m256 sc23 = _mm256_set_m128(_mm_shuffle_ps(sc, sc, 0xFF), _mm_shuffle_ps(sc, sc, 0xAA));
            FS_UNR for (int g = 0; g < ng; g++) {
                const int G = nr - 4 * g >= 4 ? 4 : nr - 4 * g;
                accg[g] = fs_nv_group(w0, a0, w1, a1, sc01, sc23, a, as, 4 * g, G, ib, accg[g]);
            }
        }
        if (single) {
            const ub_act_q8_0 *x = (const ub_act_q8_0 *)(a + (nr - 1) * as) + 2 * ib;
            const __m128i is = fs_quarters(fs_sdot(w0, a0, fs_ld(x[0].qs)), fs_sdot(w1, a1, fs_ld(x[1].qs)));
            const __m128 dx = _mm_unpacklo_ps(_mm_set1_ps(x[0].d), _mm_set1_ps(x[1].d)); /* [d0, d1, d0, d1] */
            const __m128 p = _mm_mul_ps(_mm_mul_ps(_mm_shuffle_ps(dx, dx, 0x50), sc), _mm_cvtepi32_ps(is));
            acc1 += fs_lane(p, 0);
            acc1 += fs_lane(p, 1);
            acc1 += fs_lane(p, 2);
            acc1 += fs_lane(p, 3);
        }
    }
    fs_store(accg, acc1, nr, y, ys);
}

/* ---- Q2_0: 18-byte blocks of 64 (f16 d, 16 bytes of 2-bit codes, element j = bits 2 (j % 4) of byte j / 4) ---- */

/* The 32 codes - 1 of activation block k (0, 1) of a block whose codes are c (16 bytes), in element order. */
FS_INL __m256i fs_q2_half(__m256i c, const int k) {
    /* dword lane 4L + f holds code bytes 8k + 4L .. + 3 shifted right by 2f: after & 3 its byte i is element
     * 4 (4L + i) + f of the half; the byte shuffle puts element 4i + f (of the 128-bit lane) at 4i + f */
    const __m256i rep = _mm256_permutevar8x32_epi32(c, _mm256_setr_epi32(2 * k, 2 * k, 2 * k, 2 * k, 2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1));
    const __m256i f = _mm256_and_si256(_mm256_srlv_epi32(rep, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)), _mm256_set1_epi8(3));
    const __m256i nat = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
                                         0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm256_sub_epi8(_mm256_shuffle_epi8(f, nat), _mm256_set1_epi8(1));
}

/* Rows r0 .. r0 + G - 1 (2 <= G <= 4) of block ib in the lanes of acc: t = (0 + dx_0 * isum_0) + dx_1 * isum_1,
 * acc += dw * t, lane by lane the plain C's operations. */
FS_INL __m128 fs_q2_group(__m256i w0, __m256i a0, __m256i w1, __m256i a1, __m128 dw, const uint8_t *a, int64_t as,
                          int r0, const int G, int64_t ib, __m128 acc) {
    __m256i i0[4], i1[4];
    float d[8];
    FS_UNR for (int l = 0; l < 4; l++) {
        if (l < G) {
            const ub_act_q8_0 *x = (const ub_act_q8_0 *)(a + (r0 + l) * as) + 2 * ib;
            i0[l] = fs_sdot(w0, a0, fs_ld(x[0].qs));
            i1[l] = fs_sdot(w1, a1, fs_ld(x[1].qs));
            d[l] = x[0].d;
            d[4 + l] = x[1].d;
        } else {
            i0[l] = i1[l] = _mm256_setzero_si256();
            d[l] = d[4 + l] = 0.0f;
        }
    }
    const __m256i s = fs_join(fs_rows4(i0), fs_rows4(i1)); /* [isum_0 of the rows | isum_1 of the rows] */
    const __m256 p = _mm256_mul_ps(_mm256_setr_ps(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]), _mm256_cvtepi32_ps(s));
    const __m128 t = _mm_add_ps(_mm_add_ps(_mm_setzero_ps(), _mm256_castps256_ps128(p)), _mm256_extractf128_ps(p, 1));
    return _mm_add_ps(acc, _mm_mul_ps(dw, t));
}

FS_INL void fs_body_q2_0(int64_t nb, const uint8_t *w, const uint8_t *a, int64_t as, const int nr, float *y,
                         int64_t ys) {
    const int ng = nr / 4 + (nr % 4 >= 2), single = nr % 4 == 1;
    __m128 accg[2] = {_mm_setzero_ps(), _mm_setzero_ps()};
    float acc1 = 0.0f;
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = w + ib * 18;
        const __m256i c = _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(b + 2)));
        const __m256i w0 = fs_q2_half(c, 0), w1 = fs_q2_half(c, 1);
        const __m256i a0 = _mm256_sign_epi8(w0, w0), a1 = _mm256_sign_epi8(w1, w1);
        const float dw = fs_h2f(b);
        FS_UNR for (int g = 0; g < ng; g++) {
            const int G = nr - 4 * g >= 4 ? 4 : nr - 4 * g;
            accg[g] = fs_q2_group(w0, a0, w1, a1, _mm_set1_ps(dw), a, as, 4 * g, G, ib, accg[g]);
        }
        if (single) {
            const ub_act_q8_0 *x = (const ub_act_q8_0 *)(a + (nr - 1) * as) + 2 * ib;
            const __m256i i0 = fs_sdot(w0, a0, fs_ld(x[0].qs)), i1 = fs_sdot(w1, a1, fs_ld(x[1].qs));
            const __m256i h = _mm256_hadd_epi32(i0, i1); /* half 0: [i0 01, i0 23, i1 01, i1 23], half 1: 45, 67 */
            __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
            s = _mm_hadd_epi32(s, s); /* [isum 0, isum 1, ..] */
            const __m128 p = _mm_mul_ps(_mm_unpacklo_ps(_mm_set1_ps(x[0].d), _mm_set1_ps(x[1].d)), _mm_cvtepi32_ps(s));
            float t = 0.0f;
            t += fs_lane(p, 0);
            t += fs_lane(p, 1);
            acc1 += dw * t;
        }
    }
    fs_store(accg, acc1, nr, y, ys);
}

/* ---- Q1_0: 18-byte blocks of 128 (f16 d, 16 bytes of bits, element j = bit j % 8 of byte j / 8: +1 / -1) ---- */

/* The 32 values (+1 where the bit is set, -1 where clear) of the 4 bytes at p (read only). */
FS_INL __m256i fs_q1_quarter(const uint8_t *p) {
    uint32_t h;
    memcpy(&h, p, 4);
#if FS_AVX512
    return _mm256_mask_blend_epi8(_cvtu32_mask32(h), _mm256_set1_epi8(-1), _mm256_set1_epi8(1));
#else
    const __m256i sel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)h), sel), bit), bit);
    return _mm256_or_si256(_mm256_andnot_si256(set, _mm256_set1_epi8(-1)), _mm256_set1_epi8(1)); /* clear: -1, set: 1 */
#endif
}

/* Rows r0 .. r0 + G - 1 (2 <= G <= 4) of block ib in the lanes of acc: t = (((0 + dx_0 isum_0) + dx_1 isum_1)
 * + dx_2 isum_2) + dx_3 isum_3, acc += dw * t, lane by lane the plain C's operations. q: the 4 quarters' +-1. */
FS_INL __m128 fs_q1_group(const __m256i *q, __m128 dw, const uint8_t *a, int64_t as, int r0, const int G,
                          int64_t ib, __m128 acc) {
    const __m256i one = _mm256_set1_epi8(1);
    __m256i i[4][4];
    float d[16];
    FS_UNR for (int l = 0; l < 4; l++) {
        FS_UNR for (int k = 0; k < 4; k++) {
            if (l < G) {
                const ub_act_q8_0 *x = (const ub_act_q8_0 *)(a + (r0 + l) * as) + 4 * ib + k;
                i[k][l] = fs_sdot(q[k], one, fs_ld(x->qs));
                d[4 * k + l] = x->d;
            } else {
                i[k][l] = _mm256_setzero_si256();
                d[4 * k + l] = 0.0f;
            }
        }
    }
    const __m256i s01 = fs_join(fs_rows4(i[0]), fs_rows4(i[1])), s23 = fs_join(fs_rows4(i[2]), fs_rows4(i[3]));
    const __m256 p01 = _mm256_mul_ps(_mm256_setr_ps(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]), _mm256_cvtepi32_ps(s01));
    const __m256 p23 = _mm256_mul_ps(_mm256_setr_ps(d[8], d[9], d[10], d[11], d[12], d[13], d[14], d[15]), _mm256_cvtepi32_ps(s23));
    __m128 t = _mm_add_ps(_mm_setzero_ps(), _mm256_castps256_ps128(p01));
    t = _mm_add_ps(t, _mm256_extractf128_ps(p01, 1));
    t = _mm_add_ps(t, _mm256_castps256_ps128(p23));
    t = _mm_add_ps(t, _mm256_extractf128_ps(p23, 1));
    return _mm_add_ps(acc, _mm_mul_ps(dw, t));
}

FS_INL void fs_body_q1_0(int64_t nb, const uint8_t *w, const uint8_t *a, int64_t as, const int nr, float *y,
                         int64_t ys) {
    const int ng = nr / 4 + (nr % 4 >= 2), single = nr % 4 == 1;
    __m128 accg[2] = {_mm_setzero_ps(), _mm_setzero_ps()};
    float acc1 = 0.0f;
    const __m256i one = _mm256_set1_epi8(1);
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = w + ib * 18;
        __m256i q[4];
        for (int k = 0; k < 4; k++) q[k] = fs_q1_quarter(b + 2 + 4 * k);
        const float dw = fs_h2f(b);
        FS_UNR for (int g = 0; g < ng; g++) {
            const int G = nr - 4 * g >= 4 ? 4 : nr - 4 * g;
            accg[g] = fs_q1_group(q, _mm_set1_ps(dw), a, as, 4 * g, G, ib, accg[g]);
        }
        if (single) {
            const ub_act_q8_0 *x = (const ub_act_q8_0 *)(a + (nr - 1) * as) + 4 * ib;
            const __m128i s = fs_sums4(fs_sdot(q[0], one, fs_ld(x[0].qs)), fs_sdot(q[1], one, fs_ld(x[1].qs)),
                                       fs_sdot(q[2], one, fs_ld(x[2].qs)), fs_sdot(q[3], one, fs_ld(x[3].qs)));
            const __m128 dx = _mm_setr_ps(x[0].d, x[1].d, x[2].d, x[3].d);
            const __m128 p = _mm_mul_ps(dx, _mm_cvtepi32_ps(s));
            float t = 0.0f;
            t += fs_lane(p, 0);
            t += fs_lane(p, 1);
            t += fs_lane(p, 2);
            t += fs_lane(p, 3);
            acc1 += dw * t;
        }
    }
    fs_store(accg, acc1, nr, y, ys);
}

/* ---- The decode tiles: FS_GC weight rows x 1 activation row (for the single rows of a call: B = 1 decode),
 * the columns in the 4 lanes of a vector: per lane the plain C's float operations for that column alone (the
 * dot kernels' results bit for bit), so the rows' serial accumulator chains run side by side. w: FS_GC weight
 * rows ws bytes apart (nb blocks each), a: one Q8_0 activation row, y[c] for c < FS_GC (all read only but y). ---- */
#define FS_GC 4

/* 4 little-endian dwords (read only), one per column c at p + c * st, in the 4 lanes */
FS_INL __m128i fs_dw4(const uint8_t *p, int64_t st) {
    uint32_t u0, u1, u2, u3;
    memcpy(&u0, p, 4);
    memcpy(&u1, p + st, 4);
    memcpy(&u2, p + 2 * st, 4);
    memcpy(&u3, p + 3 * st, 4);
    return _mm_setr_epi32((int)u0, (int)u1, (int)u2, (int)u3);
}
/* the 4 columns' f16 block scales (the low 16 bits of fs_dw4's lanes) */
FS_INL __m128 fs_h4(const uint8_t *p, int64_t st) {
    const __m128i v = _mm_shuffle_epi8(fs_dw4(p, st), _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1));
    return _mm_cvtph_ps(v);
}

FS void fs_gemv_q2_0(int64_t nb, const uint8_t *w, int64_t ws, const uint8_t *a, int64_t as, float *y, int64_t ys) {
    (void)as;
    (void)ys;
    const ub_act_q8_0 *x = (const ub_act_q8_0 *)a;
    __m128 acc = _mm_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = w + ib * 18;
        const __m256i x0 = fs_ld(x[2 * ib].qs), x1 = fs_ld(x[2 * ib + 1].qs);
        __m256i i0[4], i1[4];
        FS_UNR for (int c = 0; c < 4; c++) {
            const __m256i cc = _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(b + c * ws + 2)));
            const __m256i w0 = fs_q2_half(cc, 0), w1 = fs_q2_half(cc, 1);
            i0[c] = fs_sdot(w0, _mm256_sign_epi8(w0, w0), x0);
            i1[c] = fs_sdot(w1, _mm256_sign_epi8(w1, w1), x1);
        }
        const __m256i s = fs_join(fs_rows4(i0), fs_rows4(i1)); /* [isum_0 of the columns | isum_1] */
        const __m256 dx = _mm256_set_m128(_mm_set1_ps(x[2 * ib + 1].d), _mm_set1_ps(x[2 * ib].d));
        const __m256 p = _mm256_mul_ps(dx, _mm256_cvtepi32_ps(s));
        const __m128 t = _mm_add_ps(_mm_add_ps(_mm_setzero_ps(), _mm256_castps256_ps128(p)), _mm256_extractf128_ps(p, 1));
        acc = _mm_add_ps(acc, _mm_mul_ps(fs_h4(b, ws), t));
    }
    _mm_storeu_ps(y, acc);
}

FS void fs_gemv_q1_0(int64_t nb, const uint8_t *w, int64_t ws, const uint8_t *a, int64_t as, float *y, int64_t ys) {
    (void)as;
    (void)ys;
    const ub_act_q8_0 *x = (const ub_act_q8_0 *)a;
    const __m256i one = _mm256_set1_epi8(1);
    __m128 acc = _mm_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = w + ib * 18;
        __m256i i[4][4];
        FS_UNR for (int k = 0; k < 4; k++) {
            const __m256i xv = fs_ld(x[4 * ib + k].qs);
            FS_UNR for (int c = 0; c < 4; c++) i[k][c] = fs_sdot(fs_q1_quarter(b + c * ws + 2 + 4 * k), one, xv);
        }
        const __m256i s01 = fs_join(fs_rows4(i[0]), fs_rows4(i[1])), s23 = fs_join(fs_rows4(i[2]), fs_rows4(i[3]));
        const __m256 dx01 = _mm256_set_m128(_mm_set1_ps(x[4 * ib + 1].d), _mm_set1_ps(x[4 * ib].d));
        const __m256 dx23 = _mm256_set_m128(_mm_set1_ps(x[4 * ib + 3].d), _mm_set1_ps(x[4 * ib + 2].d));
        const __m256 p01 = _mm256_mul_ps(dx01, _mm256_cvtepi32_ps(s01)), p23 = _mm256_mul_ps(dx23, _mm256_cvtepi32_ps(s23));
        __m128 t = _mm_add_ps(_mm_setzero_ps(), _mm256_castps256_ps128(p01));
        t = _mm_add_ps(t, _mm256_extractf128_ps(p01, 1));
        t = _mm_add_ps(t, _mm256_castps256_ps128(p23));
        t = _mm_add_ps(t, _mm256_extractf128_ps(p23, 1));
        acc = _mm_add_ps(acc, _mm_mul_ps(fs_h4(b, ws), t));
    }
    _mm_storeu_ps(y, acc);
}

/* The decode tile of a type here: fn NULL (no multi-row tile: the dot kernels take 2..6 rows), gr 2 (so the
 * driver hands fn1 exactly the rows left alone), FS_GC columns; {NULL} for the other types and NVFP4 (its
 * 4-column tile measured 0.7-0.95x its dot kernel at B = 1, on both builds: not kept). */
ub_mm_gemm FS_SUFFIX(ub_mm_gemm_fp4)(int32_t type) {
    ub_mm_gemm g = {0};
    g.gc = FS_GC, g.gr = 2;
    if (type == UB_T_Q1_0) g.fn1 = fs_gemv_q1_0;
    else if (type == UB_T_Q2_0) g.fn1 = fs_gemv_q2_0;
    else g.gc = g.gr = 0;
    return g;
}

#define FS_DISPATCH(NAME, BODY) UB_DOT_BY_ROWS(FS, NAME, BODY)
FS_DISPATCH(fs_dot_nvfp4, fs_body_nvfp4)
FS_DISPATCH(fs_dot_q1_0, fs_body_q1_0)
FS_DISPATCH(fs_dot_q2_0, fs_body_q2_0)

ub_mm_dot_fn FS_SUFFIX(ub_mm_dot_fp4)(int32_t type) {
    switch (type) {
    case UB_T_NVFP4: return fs_dot_nvfp4;
    case UB_T_Q1_0: return fs_dot_q1_0;
    case UB_T_Q2_0: return fs_dot_q2_0;
    }
    return 0;
}
