/* The lookup tables of the i-quant types, set once from the gguf package's compact representation
 * (ub_mm_set_iq_tables, called by ubatch.compute.iq_tables), and the ones computed from their definition
 * (the IQ2 / IQ3 sign table, the MXFP4 e2m1 values, the NVFP4 e4m3 scales: constants of their formats). See
 * mm_iq.h. */
#include <string.h>

#include "ub_common.h"
#include "ub_matmul.h"
#include "mm_iq.h"

int8_t ub_iq4nl_kv[16];
uint64_t ub_iq2xxs_grid[256], ub_iq2xs_grid[512], ub_iq2s_grid[1024], ub_iq1s_grid[2048];
uint32_t ub_iq3xxs_grid[256], ub_iq3s_grid[512];
static int g_ready;

/* ksigns[i] = i with bit 7 set when i has an odd number of set bits (the 8 signs of 8 weights, an even
 * number of them negative, from 7 bits) */
#define KS_PAR(i) (((i) ^ ((i) >> 1) ^ ((i) >> 2) ^ ((i) >> 3) ^ ((i) >> 4) ^ ((i) >> 5) ^ ((i) >> 6)) & 1)
#define KS(i) (uint8_t)((i) | (KS_PAR(i) << 7))
#define KS8(i) KS(i), KS(i + 1), KS(i + 2), KS(i + 3), KS(i + 4), KS(i + 5), KS(i + 6), KS(i + 7)
#define KS32(i) KS8(i), KS8(i + 8), KS8(i + 16), KS8(i + 24)
const uint8_t ub_iq_ksigns[128] = {KS32(0), KS32(32), KS32(64), KS32(96)};

/* e2m1 code c (sign bit 3, exponent bits 2..1, mantissa bit 0) -> twice its value: exponent 0 is the
 * subnormal m / 2, else (1 + m / 2) * 2^(e - 1) */
#define E2M1_2(c) (((c) >> 1 & 3) == 0 ? ((c) & 1) : (2 + ((c) & 1)) << (((c) >> 1 & 3) - 1))
#define E2M1(c) (int8_t)((c) & 8 ? -E2M1_2(c) : E2M1_2(c))
const int8_t ub_mxfp4_kv[16] = {E2M1(0), E2M1(1), E2M1(2), E2M1(3), E2M1(4), E2M1(5), E2M1(6), E2M1(7),
                                E2M1(8), E2M1(9), E2M1(10), E2M1(11), E2M1(12), E2M1(13), E2M1(14), E2M1(15)};

/* unsigned e4m3 byte x (bit 7 ignored; 0x00 and 0x7F mean 0) -> its value / 2 (NVFP4's sub-block scales, as
 * mm_fp4_bits.c's ue4m3_half computes them; all exact): e = bits 3..6, m = bits 0..2; e = 0: m 2^-10, else
 * (8 + m) 2^e / 2048 */
#define UE_E(x) ((x) >> 3 & 15)
#define UE(x) ((x) == 0 || (x) == 0x7F ? 0.0f : UE_E(x) == 0 ? (float)((x) & 7) / 1024.0f : (float)((8 + ((x) & 7)) << UE_E(x)) / 2048.0f)
#define UE8(i) UE(i), UE(i + 1), UE(i + 2), UE(i + 3), UE(i + 4), UE(i + 5), UE(i + 6), UE(i + 7)
#define UE64(i) UE8(i), UE8(i + 8), UE8(i + 16), UE8(i + 24), UE8(i + 32), UE8(i + 40), UE8(i + 48), UE8(i + 56)
const float ub_ue4m3_half[256] = {UE64(0), UE64(64), UE64(128), UE64(192)};

int ub_mm_iq_ready(void) { return g_ready; }

/* n grid points of 8 (or 4) bytes from g (n * per bytes), each byte one of allowed[0..na) -> out */
static int grid_ok(const uint8_t *g, int64_t nbytes, const uint8_t *allowed, int na) {
    for (int64_t i = 0; i < nbytes; i++) {
        int ok = 0;
        for (int a = 0; a < na; a++) ok |= g[i] == allowed[a];
        if (!ok) return 0;
    }
    return 1;
}

static void pack8(const uint8_t *g, int n, uint64_t *out) {
    for (int i = 0; i < n; i++) {
        uint64_t v = 0;
        for (int j = 0; j < 8; j++) v |= (uint64_t)g[8 * i + j] << (8 * j);
        out[i] = v;
    }
}

static void pack4(const uint8_t *g, int n, uint32_t *out) {
    for (int i = 0; i < n; i++)
        out[i] = (uint32_t)g[4 * i] | ((uint32_t)g[4 * i + 1] << 8) | ((uint32_t)g[4 * i + 2] << 16) |
                 ((uint32_t)g[4 * i + 3] << 24);
}

/* kv: int8[16] (IQ4_NL values, strictly increasing); g2xxs: uint8[256][8], g2xs: [512][8], g2s: [1024][8]
 * (bytes in {8, 25, 43}); g3xxs: uint8[256][4] (in {4, 12, ..., 60, 62}), g3s: [512][4] (odd, 1..15);
 * g1s: int8[2048][8] (in {-1, 0, 1}). All caller-owned, read only, copied. Returns UB_OK, or UB_E_ARG
 * (nothing changed) when a value is outside its set. */
int ub_mm_set_iq_tables(const int8_t *kv, const uint8_t *g2xxs, const uint8_t *g2xs, const uint8_t *g2s,
                        const uint8_t *g3xxs, const uint8_t *g3s, const int8_t *g1s) {
    if (!kv || !g2xxs || !g2xs || !g2s || !g3xxs || !g3s || !g1s) return UB_E_ARG;
    for (int i = 1; i < 16; i++)
        if (kv[i] <= kv[i - 1] || kv[i - 1] == -128) return UB_E_ARG;
    static const uint8_t a2[3] = {8, 25, 43}, a3x[8] = {4, 12, 20, 28, 36, 44, 52, 62},
                         a3s[8] = {1, 3, 5, 7, 9, 11, 13, 15}, a1[3] = {0xFF, 0, 1};
    if (!grid_ok(g2xxs, 256 * 8, a2, 3) || !grid_ok(g2xs, 512 * 8, a2, 3) || !grid_ok(g2s, 1024 * 8, a2, 3) ||
        !grid_ok(g3xxs, 256 * 4, a3x, 8) || !grid_ok(g3s, 512 * 4, a3s, 8) ||
        !grid_ok((const uint8_t *)g1s, 2048 * 8, a1, 3))
        return UB_E_ARG;
    memcpy(ub_iq4nl_kv, kv, 16);
    pack8(g2xxs, 256, ub_iq2xxs_grid);
    pack8(g2xs, 512, ub_iq2xs_grid);
    pack8(g2s, 1024, ub_iq2s_grid);
    pack4(g3xxs, 256, ub_iq3xxs_grid);
    pack4(g3s, 512, ub_iq3s_grid);
    pack8((const uint8_t *)g1s, 2048, ub_iq1s_grid);
    g_ready = 1;
    return UB_OK;
}
