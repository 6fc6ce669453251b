/* K/V cache row codecs (contracts: ub_kv_quant.h). The quantisers follow ggml's reference rounding
 * (quantize_row_*_ref): per block of 32, the scale from the block's extreme value, the scale stored as a
 * half, the codes from x * (1 / scale) (iq4_nl: the nearest of its 16 values, then the scale refitted).
 * Written from the formats' definitions, not from ggml's code. */
#include <math.h>
#include <string.h>

#include "ub_common.h"
#include "ub_compute.h"
#include "ub_kv_quant.h"

#define QK 32

static const int8_t IQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static int block_bytes(int32_t type, int *blk) {
    *blk = QK;
    switch (type) {
    case UB_T_F32: *blk = 1; return 4;
    case UB_T_F16: *blk = 1; return 2;
    case UB_T_BF16: *blk = 1; return 2;
    case UB_T_Q4_0: return 18;
    case UB_T_Q4_1: return 20;
    case UB_T_Q5_0: return 22;
    case UB_T_Q5_1: return 24;
    case UB_T_Q8_0: return 34;
    case UB_T_IQ4_NL: return 18;
    default: return -1;
    }
}

int ub_kv_is_quant(int32_t type) {
    int blk;
    return block_bytes(type, &blk) > 0 && blk == QK;
}

int64_t ub_kv_row_size(int32_t type, int32_t n) {
    int blk;
    const int b = block_bytes(type, &blk);
    if (b < 0 || n <= 0 || n % blk) return -1;
    return (int64_t)(n / blk) * b;
}

/* float -> int8 truncation as C's cast, 0 for NaN / out of range (never undefined). */
static inline int tr8(float v) { return v > -129.0f && v < 128.0f ? (int)(int8_t)v : 0; }
static inline int imin(int a, int b) { return a < b ? a : b; }

static inline uint16_t f2bf(float f) { /* round to nearest even; NaN kept quiet */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64u);
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}
static inline float bf2f(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static inline uint16_t get16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }

/* The signed value of largest magnitude of a block (the first one on ties) and that magnitude. */
static float absmax_signed(const float *x, float *amax) {
    float a = 0.0f, m = 0.0f;
    for (int j = 0; j < QK; j++)
        if (a < fabsf(x[j])) { a = fabsf(x[j]); m = x[j]; }
    *amax = a;
    return m;
}
static void minmax(const float *x, float *mn, float *mx) {
    float lo = INFINITY, hi = -INFINITY;
    for (int j = 0; j < QK; j++) { lo = x[j] < lo ? x[j] : lo; hi = x[j] > hi ? x[j] : hi; }
    *mn = lo, *mx = hi;
}

static void q8_0_block(const float *x, uint8_t *y) { /* d half, qs int8[32] */
    float amax;
    (void)absmax_signed(x, &amax);
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    put16(y, ub_f2h(d));
    for (int j = 0; j < QK; j++) {
        const float v = roundf(x[j] * id);
        y[2 + j] = (uint8_t)(int8_t)(v >= -127.0f && v <= 127.0f ? (int)v : 0);
    }
}
static void q4_0_block(const float *x, uint8_t *y) { /* d half, qs[16]: low nibble j, high nibble j + 16 */
    float amax;
    const float mx = absmax_signed(x, &amax), d = mx / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    put16(y, ub_f2h(d));
    for (int j = 0; j < QK / 2; j++) {
        const int a = imin(15, tr8(x[j] * id + 8.5f)), b = imin(15, tr8(x[j + 16] * id + 8.5f));
        y[2 + j] = (uint8_t)((a & 15) | ((b & 15) << 4));
    }
}
static void q4_1_block(const float *x, uint8_t *y) { /* d half, m half, qs[16] */
    float mn, mx;
    minmax(x, &mn, &mx);
    const float d = (mx - mn) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    put16(y, ub_f2h(d));
    put16(y + 2, ub_f2h(mn));
    for (int j = 0; j < QK / 2; j++) {
        const int a = imin(15, tr8((x[j] - mn) * id + 0.5f)), b = imin(15, tr8((x[j + 16] - mn) * id + 0.5f));
        y[4 + j] = (uint8_t)((a & 15) | ((b & 15) << 4));
    }
}
static void q5_0_block(const float *x, uint8_t *y) { /* d half, qh u32 (bit 4 of each code), qs[16] */
    float amax;
    const float mx = absmax_signed(x, &amax), d = mx / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    put16(y, ub_f2h(d));
    uint32_t qh = 0;
    for (int j = 0; j < QK / 2; j++) {
        const int a = imin(31, tr8(x[j] * id + 16.5f)), b = imin(31, tr8(x[j + 16] * id + 16.5f));
        y[6 + j] = (uint8_t)((a & 15) | ((b & 15) << 4));
        qh |= (uint32_t)((a >> 4) & 1) << j;
        qh |= (uint32_t)((b >> 4) & 1) << (j + 16);
    }
    memcpy(y + 2, &qh, 4);
}
static void q5_1_block(const float *x, uint8_t *y) { /* d half, m half, qh u32, qs[16] */
    float mn, mx;
    minmax(x, &mn, &mx);
    const float d = (mx - mn) / 31.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    put16(y, ub_f2h(d));
    put16(y + 2, ub_f2h(mn));
    uint32_t qh = 0;
    for (int j = 0; j < QK / 2; j++) {
        const int a = tr8((x[j] - mn) * id + 0.5f) & 31, b = tr8((x[j + 16] - mn) * id + 0.5f) & 31;
        y[8 + j] = (uint8_t)((a & 15) | ((b & 15) << 4));
        qh |= (uint32_t)((a >> 4) & 1) << j;
        qh |= (uint32_t)((b >> 4) & 1) << (j + 16);
    }
    memcpy(y + 4, &qh, 4);
}

/* The index of the IQ4NL value nearest x (ties to the larger value; below / above the table: its ends). */
static int nl_index(float x) {
    if (x <= (float)IQ4NL[0]) return 0;
    if (x >= (float)IQ4NL[15]) return 15;
    int lo = 0, hi = 15; /* IQ4NL[lo] <= x < IQ4NL[hi] */
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (x < (float)IQ4NL[mid]) hi = mid;
        else lo = mid;
    }
    return x - (float)IQ4NL[hi - 1] < (float)IQ4NL[hi] - x ? hi - 1 : hi;
}
/* d half, qs[16] (low nibble j, high nibble j + 16): indices into IQ4NL. ggml's reference (no importance
 * weights, no scale search): codes for the scale max / IQ4NL[0], then the scale refitted by least squares
 * weighted by x^2 for those codes. A block below 1e-15 in magnitude gets d = 0 (its codes: value 1). */
static void iq4_nl_block(const float *x, uint8_t *y) {
    float amax;
    const float mx = absmax_signed(x, &amax);
    uint8_t L[QK];
    float d = 0.0f;
    if (amax >= 1e-15f) {
        const float id = 1.0f / (mx / (float)IQ4NL[0]);
        float sqx = 0.0f, sq2 = 0.0f;
        for (int j = 0; j < QK; j++) {
            L[j] = (uint8_t)nl_index(id * x[j]);
            const float q = (float)IQ4NL[L[j]], w = x[j] * x[j];
            sqx += w * q * x[j];
            sq2 += w * q * q;
        }
        d = sq2 > 0.0f ? sqx / sq2 : 0.0f;
    } else {
        memset(L, 8, sizeof L);
    }
    put16(y, ub_f2h(d));
    for (int j = 0; j < QK / 2; j++) y[2 + j] = (uint8_t)(L[j] | (L[j + 16] << 4));
}

void ub_kv_quant_row(int32_t type, const float *x, void *yv, int32_t n) {
    uint8_t *y = yv;
    switch (type) {
    case UB_T_F32: memcpy(y, x, sizeof(float) * (size_t)n); return;
    case UB_T_F16: for (int32_t i = 0; i < n; i++) put16(y + 2 * i, ub_f2h(x[i])); return;
    case UB_T_BF16: for (int32_t i = 0; i < n; i++) put16(y + 2 * i, f2bf(x[i])); return;
    default: break;
    }
    int blk;
    const int bb = block_bytes(type, &blk);
    for (int32_t b = 0; b < n / QK; b++) {
        const float *xb = x + (int64_t)b * QK;
        uint8_t *yb = y + (int64_t)b * bb;
        switch (type) {
        case UB_T_Q8_0: q8_0_block(xb, yb); break;
        case UB_T_Q4_0: q4_0_block(xb, yb); break;
        case UB_T_Q4_1: q4_1_block(xb, yb); break;
        case UB_T_Q5_0: q5_0_block(xb, yb); break;
        case UB_T_Q5_1: q5_1_block(xb, yb); break;
        case UB_T_IQ4_NL: iq4_nl_block(xb, yb); break;
        default: memset(yb, 0, (size_t)bb); break;
        }
    }
}

#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
#include <immintrin.h>
#define HAVE_IQ4NL_AVX2 1
/* An iq4_nl row (x: n / 32 blocks of 18 bytes) -> y float[n]: the codes looked up in IQ4NL by a byte
 * shuffle, each value times the block's d, one multiply as in the plain loop (the same floats). */
__attribute__((target("avx2"))) static void iq4_nl_dequant_avx2(const uint8_t *x, float *y, int32_t n) {
    const __m128i tab = _mm_loadu_si128((const __m128i *)(const void *)IQ4NL), m4 = _mm_set1_epi8(15);
    for (int32_t b = 0; b < n / QK; b++) {
        const uint8_t *xb = x + (int64_t)b * 18;
        float *yb = y + (int64_t)b * QK;
        const __m256 d = _mm256_set1_ps(ub_h2f(get16(xb)));
        const __m128i q = _mm_loadu_si128((const __m128i *)(const void *)(xb + 2));
        const __m128i lo = _mm_shuffle_epi8(tab, _mm_and_si128(q, m4));                    /* j < 16 */
        const __m128i hi = _mm_shuffle_epi8(tab, _mm_and_si128(_mm_srli_epi16(q, 4), m4)); /* j >= 16 */
        _mm256_storeu_ps(yb, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
        _mm256_storeu_ps(yb + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
        _mm256_storeu_ps(yb + 16, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
        _mm256_storeu_ps(yb + 24, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
    }
}
#else
#define HAVE_IQ4NL_AVX2 0
#endif

void ub_kv_dequant_row(int32_t type, const void *xv, float *y, int32_t n) {
    const uint8_t *x = xv;
#if HAVE_IQ4NL_AVX2
    if (type == UB_T_IQ4_NL && ub_mm_backend() != UB_MM_GENERIC) { /* every SIMD back-end has AVX2 */
        iq4_nl_dequant_avx2(x, y, n);
        return;
    }
#endif
    switch (type) {
    case UB_T_F32: memcpy(y, x, sizeof(float) * (size_t)n); return;
    case UB_T_F16: for (int32_t i = 0; i < n; i++) y[i] = ub_h2f(get16(x + 2 * i)); return;
    case UB_T_BF16: for (int32_t i = 0; i < n; i++) y[i] = bf2f(get16(x + 2 * i)); return;
    default: break;
    }
    int blk;
    const int bb = block_bytes(type, &blk);
    for (int32_t b = 0; b < n / QK; b++) {
        const uint8_t *xb = x + (int64_t)b * bb;
        float *yb = y + (int64_t)b * QK;
        const float d = ub_h2f(get16(xb));
        uint32_t qh;
        switch (type) {
        case UB_T_Q8_0:
            for (int j = 0; j < QK; j++) yb[j] = (float)(int8_t)xb[2 + j] * d;
            break;
        case UB_T_Q4_0:
            for (int j = 0; j < QK / 2; j++) {
                yb[j] = (float)((xb[2 + j] & 15) - 8) * d;
                yb[j + 16] = (float)((xb[2 + j] >> 4) - 8) * d;
            }
            break;
        case UB_T_IQ4_NL:
            for (int j = 0; j < QK / 2; j++) {
                yb[j] = d * (float)IQ4NL[xb[2 + j] & 15];
                yb[j + 16] = d * (float)IQ4NL[xb[2 + j] >> 4];
            }
            break;
        case UB_T_Q4_1: {
            const float m = ub_h2f(get16(xb + 2));
            for (int j = 0; j < QK / 2; j++) {
                yb[j] = (float)(xb[4 + j] & 15) * d + m;
                yb[j + 16] = (float)(xb[4 + j] >> 4) * d + m;
            }
            break;
        }
        case UB_T_Q5_0:
            memcpy(&qh, xb + 2, 4);
            for (int j = 0; j < QK / 2; j++) {
                const int a = (xb[6 + j] & 15) | (int)(((qh >> j) & 1u) << 4);
                const int c = (xb[6 + j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
                yb[j] = (float)(a - 16) * d;
                yb[j + 16] = (float)(c - 16) * d;
            }
            break;
        case UB_T_Q5_1: {
            const float m = ub_h2f(get16(xb + 2));
            memcpy(&qh, xb + 4, 4);
            for (int j = 0; j < QK / 2; j++) {
                const int a = (xb[8 + j] & 15) | (int)(((qh >> j) & 1u) << 4);
                const int c = (xb[8 + j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
                yb[j] = (float)a * d + m;
                yb[j + 16] = (float)c * d + m;
            }
            break;
        }
        default: memset(yb, 0, sizeof(float) * QK); break;
        }
    }
}

void ub_kv_round_query(int32_t k_type, const float *q, float *out, int32_t n) {
    switch (k_type) {
    case UB_T_F16: for (int32_t i = 0; i < n; i++) out[i] = ub_h2f(ub_f2h(q[i])); return;
    case UB_T_BF16: for (int32_t i = 0; i < n; i++) out[i] = bf2f(f2bf(q[i])); return;
    case UB_T_F32: memcpy(out, q, sizeof(float) * (size_t)n); return;
    default: break;
    }
    uint8_t blk[34];
    for (int32_t b = 0; b + QK <= n; b += QK) { /* a q8_0 round trip, block by block */
        q8_0_block(q + b, blk);
        ub_kv_dequant_row(UB_T_Q8_0, blk, out + b, QK);
    }
}

int ub_kv_has_min(int32_t type) { return type == UB_T_Q4_1 || type == UB_T_Q5_1; }

/* q4_1 / q5_1 row x -> y[j] = d_b * code_j (without the block minimum) and mins[b] = m_b (float[n / 32]). */
void ub_kv_dequant_row_split(int32_t type, const void *xv, float *y, float *mins, int32_t n) {
    const uint8_t *x = xv;
    const int bb = type == UB_T_Q4_1 ? 20 : 24;
    for (int32_t b = 0; b < n / QK; b++) {
        const uint8_t *xb = x + (int64_t)b * bb;
        float *yb = y + (int64_t)b * QK;
        const float d = ub_h2f(get16(xb));
        mins[b] = ub_h2f(get16(xb + 2));
        if (type == UB_T_Q4_1) {
            for (int j = 0; j < QK / 2; j++) {
                yb[j] = (float)(xb[4 + j] & 15) * d;
                yb[j + 16] = (float)(xb[4 + j] >> 4) * d;
            }
        } else {
            uint32_t qh;
            memcpy(&qh, xb + 4, 4);
            for (int j = 0; j < QK / 2; j++) {
                yb[j] = (float)((xb[8 + j] & 15) | (int)(((qh >> j) & 1u) << 4)) * d;
                yb[j + 16] = (float)((xb[8 + j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4)) * d;
            }
        }
    }
}

/* The q8_1 block sums of a query row: s[b] = half(d_b * sum of the block's int8 codes), d_b = amax / 127
 * unrounded (what a q4_1 / q5_1 dot multiplies the block minimum by). q: float[n]; s: float[n / 32]. */
void ub_kv_query_sums(const float *q, float *s, int32_t n) {
    for (int32_t b = 0; b < n / QK; b++) {
        const float *x = q + (int64_t)b * QK;
        float amax;
        (void)absmax_signed(x, &amax);
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < QK; j++) {
            const float v = roundf(x[j] * id);
            sum += v >= -127.0f && v <= 127.0f ? (int)v : 0;
        }
        s[b] = ub_h2f(ub_f2h((float)sum * d));
    }
}

int ub_kv_store_rows(int32_t type, const float *src, int64_t n_rows, int32_t n, void *dst, int64_t dst_rows,
                     const int64_t *idx) {
    const int64_t rs = ub_kv_row_size(type, n);
    if (rs < 0 || n_rows < 0 || dst_rows < 0) return UB_E_ARG;
    if (n_rows == 0) return UB_OK;
    if (!src || !dst) return UB_E_ARG;
    if (idx) {
        for (int64_t i = 0; i < n_rows; i++)
            if (idx[i] < 0 || idx[i] >= dst_rows) return UB_E_ARG;
    } else if (n_rows > dst_rows) {
        return UB_E_ARG;
    }
    for (int64_t i = 0; i < n_rows; i++)
        ub_kv_quant_row(type, src + i * n, (uint8_t *)dst + (idx ? idx[i] : i) * rs, n);
    return UB_OK;
}

int ub_kv_load_rows(int32_t type, const void *src, int64_t n_rows, int32_t n, float *dst) {
    const int64_t rs = ub_kv_row_size(type, n);
    if (rs < 0 || n_rows < 0) return UB_E_ARG;
    if (n_rows == 0) return UB_OK;
    if (!src || !dst) return UB_E_ARG;
    for (int64_t i = 0; i < n_rows; i++) ub_kv_dequant_row(type, (const uint8_t *)src + i * rs, dst + i * n, n);
    return UB_OK;
}
