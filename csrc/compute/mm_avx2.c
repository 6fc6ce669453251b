/* AVX2 + FMA + F16C matmul dot kernels, compiled with per-function target attributes and chosen at run
 * time (matmul.c; the CPU check is mm_cpu.c). Contracts: mm_internal.h. On other compilers / architectures
 * nothing is compiled in (mm_cpu.c then never reports AVX2).
 *
 * Every kernel body is instantiated for nr = 1..6 (row tile); for each activation row it keeps its own
 * accumulators and performs the same operations in the same order whatever nr is: the weight block is
 * decoded once and shared, nothing else is. Integer products inside a block are exact (maddubs pairs
 * stay below 2^15 for every format: |w| <= 128 or w <= 63 against |a| <= 127); one FMA per block (and
 * one for the mins) folds them into the row's 8-lane float accumulator, blocks in index order; a fixed
 * horizontal sum ends the row. */
#include <math.h>
#include <string.h>

#include "mm_internal.h"
#include "mm_iq.h"
#include "ub_matmul.h"

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
#include "mm_avx2_util.h"

/* Q8_0 / Q8_1 activation blocks with AVX2, byte for byte the generic quantiser's (mm_act.c): the same
 * max, the same f32 division and product, round half to even; a block holding a NaN or an infinity is
 * handed to the generic code. The float kinds use the generic code (cheap next to the dots). */
static AVX2 void quant_q8_avx2(const float *x, int64_t nblk, uint8_t *out, const int q81) {
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 fmax = _mm256_set1_ps(3.4028234663852886e38f);
    const size_t bs = q81 ? sizeof(ub_act_q8_1) : sizeof(ub_act_q8_0);
    for (int64_t ib = 0; ib < nblk; ib++) {
        const float *xb = x + 32 * ib;
        uint8_t *ob = out + (size_t)ib * bs;
        __m256 v[4], a[4];
        int ok = 1;
        for (int j = 0; j < 4; j++) {
            v[j] = _mm256_loadu_ps(xb + 8 * j);
            a[j] = _mm256_and_ps(v[j], absm);
            ok &= _mm256_movemask_ps(_mm256_cmp_ps(a[j], fmax, _CMP_LE_OQ)) == 0xff;
        }
        if (!ok) {
            ub_mm_quant_row_generic(q81 ? UB_ACT_Q8_1 : UB_ACT_Q8_0, xb, 32, ob);
            continue;
        }
        __m256 m = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
        const float amax = _mm_cvtss_f32(m4);
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        const __m256 idv = _mm256_set1_ps(id);
        __m256i q[4];
        for (int j = 0; j < 4; j++)
            q[j] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[j], idv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        /* pack 4 x 8 int32 to 32 int8 in element order */
        const __m256i p01 = _mm256_packs_epi32(q[0], q[1]), p23 = _mm256_packs_epi32(q[2], q[3]);
        __m256i b = _mm256_packs_epi16(p01, p23);
        b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        uint16_t dh = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        const float d16 = _cvtsh_ss(dh);
        if (q81) {
            ub_act_q8_1 *o = (ub_act_q8_1 *)ob;
            o->d = d16;
            _mm256_storeu_si256((__m256i *)o->qs, b);
            const __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
            __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
            o->s = _cvtsh_ss(_cvtss_sh(d * (float)_mm_cvtsi128_si32(s4), _MM_FROUND_TO_NEAREST_INT));
        } else {
            ub_act_q8_0 *o = (ub_act_q8_0 *)ob;
            o->d = d16;
            _mm256_storeu_si256((__m256i *)o->qs, b);
        }
    }
}

/* Q8_K blocks (256) with AVX2, byte for byte the generic quantiser's: m = the first element of largest
 * magnitude, iscale = -127 / m, q = min(127, round-half-even(iscale * x)), d = 1 / iscale, bsums per 16; a
 * block holding a NaN or an infinity, all zeros, or so small that iscale overflows is handed to the generic
 * code. */
static AVX2 void quant_q8k_avx2(const float *x, int64_t nblk, uint8_t *out) {
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 fmax = _mm256_set1_ps(3.4028234663852886e38f);
    for (int64_t ib = 0; ib < nblk; ib++) {
        const float *xb = x + 256 * ib;
        ub_act_q8_k *o = (ub_act_q8_k *)out + ib;
        __m256 m = _mm256_setzero_ps();
        int ok = 1;
        for (int j = 0; j < 32; j++) {
            const __m256 a = _mm256_and_ps(_mm256_loadu_ps(xb + 8 * j), absm);
            ok &= _mm256_movemask_ps(_mm256_cmp_ps(a, fmax, _CMP_LE_OQ)) == 0xff;
            m = _mm256_max_ps(m, a);
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
        const float amax = _mm_cvtss_f32(m4);
        if (!ok || amax == 0.0f) {
            ub_mm_quant_row_generic(UB_ACT_Q8_K, xb, 256, (uint8_t *)o);
            continue;
        }
        float mx = 0.0f; /* the first element whose magnitude is amax */
        const __m256 am = _mm256_set1_ps(amax);
        for (int j = 0; j < 32; j++) {
            const int bits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(xb + 8 * j), absm), am, _CMP_EQ_OQ));
            if (bits) {
                mx = xb[8 * j + __builtin_ctz((unsigned)bits)];
                break;
            }
        }
        const float iscale = -127.0f / mx;
        if (!(fabsf(iscale) <= 3.4028234663852886e38f)) { /* |m| below ~4e-37: the generic code's int casts */
            ub_mm_quant_row_generic(UB_ACT_Q8_K, xb, 256, (uint8_t *)o);
            continue;
        }
        const __m256 isv = _mm256_set1_ps(iscale);
        const __m256i cap = _mm256_set1_epi32(127);
        for (int j = 0; j < 8; j++) { /* 32 elements per round: 4 x 8 int32 packed to 32 int8 in order */
            __m256i q[4];
            for (int t = 0; t < 4; t++)
                q[t] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(isv, _mm256_loadu_ps(xb + 32 * j + 8 * t)),
                                                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)), cap);
            __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
            b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(o->qs + 32 * j), b);
        }
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) sum += o->qs[16 * g + j];
            o->bsums[g] = (int16_t)sum;
        }
        o->d = 1.0f / iscale;
    }
}

void ub_mm_quant_row_avx2(int32_t act, const float *x, int64_t k, uint8_t *out) {
    if (act == UB_ACT_Q8_0 || act == UB_ACT_Q8_1) quant_q8_avx2(x, k / 32, out, act == UB_ACT_Q8_1);
    else if (act == UB_ACT_Q8_K) quant_q8k_avx2(x, k / 256, out);
    else ub_mm_quant_row_generic(act, x, k, out);
}

/* ---- 32-element blocks against Q8_0 (kind 0: Q4_0, 1: Q5_0, 2: Q8_0, 5: IQ4_NL, 6: MXFP4) and Q8_1 (3: Q4_1,
 * 4: Q5_1) ---- */
#define Q80_KIND(kind) ((kind) <= 2 || (kind) >= 5)

#define Q81_MFMA_X(m, s, acc) (fmaf((m), (s), (acc)))
#ifndef Q81_ONE_CHAIN
#define Q81_ONE_CHAIN(kind) ((kind) == 3 || (kind) == 4)
#define Q81_MFMA(m, s, acc) Q81_MFMA_X(m, s, acc)
#endif
/* the 16 IQ4_NL values (kind 5) or twice the e2m1 values (kind 6) in both 128-bit lanes */
INL AVX2 __m256i kv_table(const int kind) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(kind == 5 ? ub_iq4nl_kv : ub_mxfp4_kv)));
}

/* B = 1 streams the weights from memory: each call prefetches this far ahead of the block it reads (the rows of
 * a chunk are contiguous, so past the row's end this is the next rows'; a prefetch never faults) */
#define UB_AVX2_PF 2048
/* one block ib of every row of the tile into acc[] (and accm[] for the Q8_1 kinds) */
INL AVX2 void q32_block(const uint8_t *w, const uint8_t *a, int64_t as, const int nr, int64_t ib, const int kind,
                        __m256 *acc, float *accm) {
    static const int bytes[7] = {18, 22, 34, 20, 24, 18, 17};
    const uint8_t *b = w + ib * bytes[kind];
    if (nr == 1 && (ib & 1) == 0) _mm_prefetch((const char *)(b + UB_AVX2_PF), _MM_HINT_T0);
    __m256i q;
    if (kind == 0) q = _mm256_sub_epi8(nibbles32(b + 2), _mm256_set1_epi8(8));
    else if (kind == 1) /* (nib | bit << 4) - 16 = nib - (bit ? 0 : 16) */
        q = _mm256_add_epi8(nibbles32(b + 6), _mm256_andnot_si256(bytes_of_bits(b + 2), _mm256_set1_epi8(-16)));
    else if (kind == 2) q = ld(b + 2);
    else if (kind == 3) q = nibbles32(b + 4);
    else if (kind == 4) q = _mm256_or_si256(nibbles32(b + 8), bit4_from_bits(b + 4));
    else q = _mm256_shuffle_epi8(kv_table(kind), nibbles32(b + (kind == 5 ? 2 : 1)));
    const float dw = kind == 6 ? ub_e8m0_half(b[0]) : h2f(b);
    /* the block scale dw * d_x: for one row a scalar product and a broadcast; for a tile dw is broadcast once
     * and each row's d_x is broadcast from memory (a load, no shuffle): the same single-precision product */
    const __m256 dwv = _mm256_set1_ps(dw);
    if (Q80_KIND(kind)) {
        UNR for (int r = 0; r < nr; r++) {
            const ub_act_q8_0 *x = (const ub_act_q8_0 *)(a + r * as) + ib;
            const __m256 sc = nr == 1 ? _mm256_set1_ps(dw * x->d) : _mm256_mul_ps(dwv, _mm256_broadcast_ss(&x->d));
            acc[r] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(dot_s8(q, ld(x->qs))), acc[r]);
        }
    } else {
        const float mw = h2f(b + 2);
        UNR for (int r = 0; r < nr; r++) {
            const ub_act_q8_1 *x = (const ub_act_q8_1 *)(a + r * as) + ib;
            const __m256 sc = nr == 1 ? _mm256_set1_ps(dw * x->d) : _mm256_mul_ps(dwv, _mm256_broadcast_ss(&x->d));
            acc[r] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(dot_u8(q, ld(x->qs))), acc[r]);
            accm[r] = Q81_MFMA(mw, x->s, accm[r]);
        }
    }
}

/* even blocks into acc0, odd blocks into acc1 (two FMA chains per row), then acc0 + acc1, hsum; Q4_1 / Q5_1:
 * one chain, hsum, + the mins' fmaf chain (ggml-cpu's x86 vec_dot_q{4,5}_1_q8_1: llama.cpp's bits) */
INL AVX2 void body_q32(int64_t nb, const uint8_t *w, const uint8_t *a, int64_t as, const int nr, float *y,
                       int64_t ys, const int kind) {
    __m256 acc0[UB_MM_RT], acc1[UB_MM_RT];
    float accm[UB_MM_RT];
    UNR for (int r = 0; r < nr; r++) {
        acc0[r] = acc1[r] = _mm256_setzero_ps();
        accm[r] = 0.0f;
    }
    int64_t ib = 0;
    if (Q81_ONE_CHAIN(kind)) /* Q4_1 / Q5_1: one chain, as ggml-cpu's x86 vec_dot_q{4,5}_1_q8_1 */
        for (; ib < nb; ib++) q32_block(w, a, as, nr, ib, kind, acc0, accm);
    for (; ib + 2 <= nb; ib += 2) {
        q32_block(w, a, as, nr, ib, kind, acc0, accm);
        q32_block(w, a, as, nr, ib + 1, kind, acc1, accm);
    }
    if (ib < nb) q32_block(w, a, as, nr, ib, kind, acc0, accm);
    UNR for (int r = 0; r < nr; r++) {
        const float s = hsum((Q81_ONE_CHAIN(kind) ? acc0[r] : _mm256_add_ps(acc0[r], acc1[r])));
        y[r * ys] = Q80_KIND(kind) ? s : s + accm[r];
    }
}
#define B_Q4_0(...) body_q32(__VA_ARGS__, 0)
#define B_Q5_0(...) body_q32(__VA_ARGS__, 1)
#define B_Q8_0(...) body_q32(__VA_ARGS__, 2)
#define B_Q4_1(...) body_q32(__VA_ARGS__, 3)
#define B_Q5_1(...) body_q32(__VA_ARGS__, 4)
#define B_IQ4_NL(...) body_q32(__VA_ARGS__, 5)
#define B_MXFP4(...) body_q32(__VA_ARGS__, 6)
DISPATCH(dot_iq4_nl, B_IQ4_NL)
DISPATCH(dot_mxfp4, B_MXFP4)
DISPATCH(dot_q4_0, B_Q4_0)
DISPATCH(dot_q5_0, B_Q5_0)
DISPATCH(dot_q8_0, B_Q8_0)
DISPATCH(dot_q4_1, B_Q4_1)
DISPATCH(dot_q5_1, B_Q5_1)

/* ---- Q4_K / Q5_K against Q8_K (Q4_K: the mins as an 8-lane FNMA per block; Q5_K: as one exact int per block
 * into a scalar fmaf chain added after the hsum, ggml-cpu's x86 vec_dot_q5_K_q8_K: llama.cpp's bits) ---- */

/* The 8 sub-block scales (returned, byte j = scale j) and the 8 mins (*mins: 16 int16 lanes, each min twice)
 * of a Q4_K / Q5_K block, from the 12 packed bytes at s, in registers (an int16 array stored and reloaded as
 * one vector stalls on store forwarding every block). Per byte: scale j < 4 = s[j] & 63, min j < 4 =
 * s[j + 4] & 63; j >= 4: scale = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4, min = (s[j + 4] >> 4) | (s[j] >> 6) << 4. */
INL AVX2 uint64_t scale_min_k4(const uint8_t *s, __m256i *mins) {
    uint32_t u0, u1, u2;
    memcpy(&u0, s, 4);
    memcpy(&u1, s + 4, 4);
    memcpy(&u2, s + 8, 4);
    const uint32_t sc_lo = u0 & 0x3F3F3F3Fu, mn_lo = u1 & 0x3F3F3F3Fu;
    const uint32_t sc_hi = (u2 & 0x0F0F0F0Fu) | (((u0 >> 6) & 0x03030303u) << 4);
    const uint32_t mn_hi = ((u2 >> 4) & 0x0F0F0F0Fu) | (((u1 >> 6) & 0x03030303u) << 4);
    const __m128i mn8 = _mm_cvtsi64_si128((long long)(((uint64_t)mn_hi << 32) | mn_lo));
    const __m128i twice = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    *mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(mn8, twice));
    return ((uint64_t)sc_hi << 32) | sc_lo;
}

INL AVX2 void body_q45k(int64_t nb, const uint8_t *w, const uint8_t *a, int64_t as, const int nr, float *y,
                        int64_t ys, const int five) {
    __m256 acc[UB_MM_RT];
    float summ[UB_MM_RT];
    UNR for (int r = 0; r < nr; r++) {
        acc[r] = _mm256_setzero_ps();
        summ[r] = 0.0f;
    }
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = w + ib * (five ? 176 : 144);
        const uint8_t *qs = b + (five ? 48 : 16);
        __m256i mins;
        const uint64_t sc = scale_min_k4(b + 4, &mins);
        const float dw = h2f(b), dmw = h2f(b + 2);
        const __m256i qh = five ? ld(b + 16) : _mm256_setzero_si256();
        __m256i sumi[UB_MM_RT];
        UNR for (int r = 0; r < nr; r++) sumi[r] = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i raw = ld(qs + 32 * c);
            __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
            if (five) {
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one), 4));
            }
            const __m256i s_lo = _mm256_set1_epi16((short)((sc >> (16 * c)) & 0xFF));
            const __m256i s_hi = _mm256_set1_epi16((short)((sc >> (16 * c + 8)) & 0xFF));
            UNR for (int r = 0; r < nr; r++) {
                const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
                sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(_mm256_maddubs_epi16(lo, ld(x->qs + 64 * c)), s_lo));
                sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(_mm256_maddubs_epi16(hi, ld(x->qs + 64 * c + 32)), s_hi));
            }
        }
        UNR for (int r = 0; r < nr; r++) {
            const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
            const __m256i mv = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)x->bsums), mins);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * x->d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
            if (five) /* Q5_K: the mins as ggml-cpu's x86 vec_dot_q5_K_q8_K, one exact int per block, a scalar FMA */
                summ[r] = fmaf(-(dmw * x->d), (float)hsum_i32(mv), summ[r]);
            else
                acc[r] = _mm256_fnmadd_ps(_mm256_set1_ps(dmw * x->d), _mm256_cvtepi32_ps(mv), acc[r]);
        }
    }
    UNR for (int r = 0; r < nr; r++) y[r * ys] = five ? hsum(acc[r]) + summ[r] : hsum(acc[r]);
}
#define B_Q4_K(...) body_q45k(__VA_ARGS__, 0)
#define B_Q5_K(...) body_q45k(__VA_ARGS__, 1)
DISPATCH(dot_q4_k, B_Q4_K)
DISPATCH(dot_q5_k, B_Q5_K)

/* ---- Q6_K against Q8_K: e in [0, 63], value e - 32; the -32 is folded in exactly via the bsums ---- */

INL AVX2 void body_q6k(int64_t nb, const uint8_t *w, const uint8_t *a, int64_t as, const int nr, float *y,
                       int64_t ys) {
    __m256 acc[UB_MM_RT];
    UNR for (int r = 0; r < nr; r++) acc[r] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = w + ib * 210;
        const int8_t *sc = (const int8_t *)(b + 192);
        const float dw = h2f(b + 208);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
        __m256i sumi[UB_MM_RT];
        UNR for (int r = 0; r < nr; r++) sumi[r] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = ld(b + 64 * h), ql1 = ld(b + 64 * h + 32), qh = ld(b + 128 + 32 * h);
            for (int i = 0; i < 4; i++) {
                const __m256i l = i == 0 ? _mm256_and_si256(ql0, m4)
                                  : i == 1 ? _mm256_and_si256(ql1, m4)
                                  : i == 2 ? _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4)
                                           : _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4);
                const __m256i hb = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * i), m2), 4);
                const __m256i e = _mm256_or_si256(l, hb);
                const int s0 = 8 * h + 2 * i;
                const __m256i sv = _mm256_set_m128i(_mm_set1_epi16(sc[s0 + 1]), _mm_set1_epi16(sc[s0]));
                UNR for (int r = 0; r < nr; r++) {
                    const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
                    sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(_mm256_maddubs_epi16(e, ld(x->qs + 128 * h + 32 * i)), sv));
                }
            }
        }
        UNR for (int r = 0; r < nr; r++) {
            const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
            const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)x->bsums), sc16), 5);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * x->d), _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[r], corr)), acc[r]);
        }
    }
    UNR for (int r = 0; r < nr; r++) y[r * ys] = hsum(acc[r]);
}
DISPATCH(dot_q6_k, body_q6k)

/* ---- Q2_K / Q3_K against Q8_K: 2-bit fields (shift 2g of byte j of half h -> element 128h + 32g + j),
 * sub-blocks of 16. Q2_K: u in [0, 3], scale = s & 15, min = s >> 4. Q3_K: u = q2 + 4 * hbit in [0, 7],
 * value u - 4, whose -4 is folded in exactly via the bsums, signed 6-bit scales ---- */

INL AVX2 void body_q23k(int64_t nb, const uint8_t *w, const uint8_t *a, int64_t as, const int nr, float *y,
                        int64_t ys, const int three) {
    __m256 acc[UB_MM_RT];
    UNR for (int r = 0; r < nr; r++) acc[r] = _mm256_setzero_ps();
    const __m256i m2 = _mm256_set1_epi8(0x03), one = _mm256_set1_epi8(1);
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *b = w + ib * (three ? 110 : 84);
        const uint8_t *qs = b + (three ? 32 : 16);
        int16_t sc[16], mn[16];
        if (three) {
            const uint8_t *s = b + 96;
            for (int k = 0; k < 16; k++) {
                const int lo = k < 8 ? (s[k] & 15) : (s[k - 8] >> 4);
                const int hi = (s[8 + (k % 4)] >> (2 * (k / 4))) & 3;
                sc[k] = (int16_t)((lo | (hi << 4)) - 32);
            }
        } else {
            for (int k = 0; k < 16; k++) {
                sc[k] = b[k] & 15;
                mn[k] = b[k] >> 4;
            }
        }
        const float dw = h2f(b + (three ? 108 : 80)), dmw = three ? 0.0f : h2f(b + 82);
        const __m256i sc16 = _mm256_loadu_si256((const __m256i *)sc);
        const __m256i hm = three ? ld(b) : _mm256_setzero_si256();
        __m256i sumi[UB_MM_RT];
        UNR for (int r = 0; r < nr; r++) sumi[r] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i qv = ld(qs + 32 * h);
            for (int g = 0; g < 4; g++) {
                __m256i u = _mm256_and_si256(_mm256_srli_epi16(qv, 2 * g), m2);
                if (three)
                    u = _mm256_or_si256(u, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + g), one), 2));
                const int s0 = 8 * h + 2 * g;
                const __m256i sv = _mm256_set_m128i(_mm_set1_epi16(sc[s0 + 1]), _mm_set1_epi16(sc[s0]));
                UNR for (int r = 0; r < nr; r++) {
                    const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
                    sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(_mm256_maddubs_epi16(u, ld(x->qs + 128 * h + 32 * g)), sv));
                }
            }
        }
        const __m256i mn16 = three ? _mm256_setzero_si256() : _mm256_loadu_si256((const __m256i *)mn);
        UNR for (int r = 0; r < nr; r++) {
            const ub_act_q8_k *x = (const ub_act_q8_k *)(a + r * as) + ib;
            const __m256i bs = _mm256_loadu_si256((const __m256i *)x->bsums);
            if (three) {
                const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 2);
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * x->d), _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[r], corr)), acc[r]);
            } else {
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * x->d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
                acc[r] = _mm256_fnmadd_ps(_mm256_set1_ps(dmw * x->d), _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, mn16)), acc[r]);
            }
        }
    }
    UNR for (int r = 0; r < nr; r++) y[r * ys] = hsum(acc[r]);
}
#define B_Q2_K(...) body_q23k(__VA_ARGS__, 0)
#define B_Q3_K(...) body_q23k(__VA_ARGS__, 1)
DISPATCH(dot_q2_k, B_Q2_K)
DISPATCH(dot_q3_k, B_Q3_K)

/* ---- F32 / F16 / BF16 (activations rounded to f16 / bf16): two 8-lane accumulators per row (even / odd 8-element
 * steps), combined, then hsum, then the k % 8 tail in order ---- */

/* 8 bf16 values -> 8 floats (exact: the bits shifted into the high half) */
INL AVX2 __m256 bf16x8(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
/* one f16 (kind 1) or bf16 (kind 2) value as float */
INL AVX2 float sc16(uint16_t h, const int kind) {
    if (kind == 1) return _cvtsh_ss(h);
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

INL AVX2 void body_f(int64_t k, const uint8_t *w, const uint8_t *a, int64_t as, const int nr, float *y,
                     int64_t ys, const int f16) {
    __m256 a0[UB_MM_RT], a1[UB_MM_RT];
    UNR for (int r = 0; r < nr; r++) a0[r] = a1[r] = _mm256_setzero_ps();
    int64_t i = 0;
#define LD16(p) (f16 == 2 ? bf16x8((const uint16_t *)(p)) : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p))))
#define LDW(off) (f16 ? LD16((const uint16_t *)w + (off)) : _mm256_loadu_ps((const float *)w + (off)))
#define LDA(r, off) (f16 ? LD16((const uint16_t *)(a + (r) * as) + (off)) : _mm256_loadu_ps((const float *)(a + (r) * as) + (off)))
    for (; i + 16 <= k; i += 16) {
        const __m256 w0 = LDW(i), w1 = LDW(i + 8);
        UNR for (int r = 0; r < nr; r++) {
            a0[r] = _mm256_fmadd_ps(w0, LDA(r, i), a0[r]);
            a1[r] = _mm256_fmadd_ps(w1, LDA(r, i + 8), a1[r]);
        }
    }
    if (i + 8 <= k) {
        const __m256 w0 = LDW(i);
        UNR for (int r = 0; r < nr; r++) a0[r] = _mm256_fmadd_ps(w0, LDA(r, i), a0[r]);
        i += 8;
    }
#undef LDW
#undef LDA
#undef LD16
    UNR for (int r = 0; r < nr; r++) {
        float s = hsum(_mm256_add_ps(a0[r], a1[r]));
        for (int64_t j = i; j < k; j++) {
            const float wv = f16 ? sc16(((const uint16_t *)w)[j], f16) : ((const float *)w)[j];
            const float av = f16 ? sc16(((const uint16_t *)(a + r * as))[j], f16) : ((const float *)(a + r * as))[j];
            s += wv * av;
        }
        y[r * ys] = s;
    }
}
#define B_F32(...) body_f(__VA_ARGS__, 0)
#define B_F16(...) body_f(__VA_ARGS__, 1)
#define B_BF16(...) body_f(__VA_ARGS__, 2)
DISPATCH(dot_f32, B_F32)
DISPATCH(dot_f16, B_F16)
DISPATCH(dot_bf16, B_BF16)

ub_mm_dot_fn ub_mm_dot_avx2(int32_t type) {
    switch (type) {
    case UB_T_F32: return dot_f32;
    case UB_T_F16: return dot_f16;
    case UB_T_BF16: return dot_bf16;
    case UB_T_Q4_0: return dot_q4_0;
    case UB_T_Q4_1: return dot_q4_1;
    case UB_T_Q5_0: return dot_q5_0;
    case UB_T_Q5_1: return dot_q5_1;
    case UB_T_Q8_0: return dot_q8_0;
    case UB_T_Q2_K: return dot_q2_k;
    case UB_T_Q3_K: return dot_q3_k;
    case UB_T_Q4_K: return dot_q4_k;
    case UB_T_Q5_K: return dot_q5_k;
    case UB_T_Q6_K: return dot_q6_k;
    case UB_T_IQ4_NL: return dot_iq4_nl;
    case UB_T_MXFP4: return dot_mxfp4;
    }
    return ub_mm_dot_iq_avx2(type);
}
#else
ub_mm_dot_fn ub_mm_dot_avx2(int32_t type) {
    (void)type;
    return 0;
}
void ub_mm_quant_row_avx2(int32_t act, const float *x, int64_t k, uint8_t *out) {
    ub_mm_quant_row_generic(act, x, k, out);
}
#endif
