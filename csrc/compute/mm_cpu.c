/* The one CPU detection of the matmul kernels: which back-ends this CPU (and its OS) can run.
 *   generic  always;
 *   avx2     AVX2 + FMA + F16C (and the OS saves the YMM state);
 *   avxvnni  avx2 + AVX-VNNI (VEX-encoded 256-bit vpdpbusd; Alder Lake and later, Zen 5);
 *   avx512   avx2 + AVX-512 F/BW/VL + AVX512_VNNI (and the OS saves the ZMM/opmask state; Ice Lake and later
 *            Xeons, Sapphire Rapids, Zen 4/5).
 * Read with cpuid / xgetbv once (the result is a constant of the machine). No buffers. */
#include <pthread.h>
#include <stdint.h>

#include "mm_internal.h"
#include "ub_matmul.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && !defined(UB_NO_AVX2)
#include <cpuid.h>

/* xgetbv(0) without needing the XSAVE target attribute */
static uint64_t xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static int detect(void) {
    unsigned a, b, c, d;
    int mask = 1 << UB_MM_GENERIC;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return mask;
    const int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx) return mask;
    const uint64_t x = xcr0();
    if ((x & 6) != 6) return mask; /* XMM and YMM state */
    if (__get_cpuid_max(0, 0) < 7) return mask;
    __cpuid_count(7, 0, a, b, c, d);
    const int avx2 = (b >> 5) & 1, avx512f = (b >> 16) & 1, avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1;
    const int avx512vnni = (c >> 11) & 1;
    unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
    __cpuid_count(7, 1, a1, b1, c1, d1);
    const int avxvnni = (a1 >> 4) & 1;
    if (!(avx2 && fma && f16c)) return mask;
    mask |= 1 << UB_MM_AVX2;
    if (avxvnni) mask |= 1 << UB_MM_AVXVNNI;
    if (avx512f && avx512bw && avx512vl && avx512vnni && (x & 0xe0) == 0xe0) mask |= 1 << UB_MM_AVX512;
    return mask;
}
#else
static int detect(void) { return 1 << UB_MM_GENERIC; }
#endif

static int g_mask;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void init_mask(void) { g_mask = detect(); }

int ub_mm_cpu_backends(void) {
    pthread_once(&g_once, init_mask);
    return g_mask;
}
