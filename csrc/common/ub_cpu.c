/* CPU feature detection (see ub_cpu.h): cpuid leaves 1 and 7 (sub-leaves 0 and 1) and XCR0, once. */
#include <pthread.h>
#include <stdint.h>

#include "ub_cpu.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>

/* xgetbv(0) without needing the XSAVE target attribute */
static uint64_t xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static int detect(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx) return 0;
    const uint64_t x = xcr0();
    if ((x & 6) != 6) return 0; /* XMM and YMM state */
    int f = (fma ? UB_CPU_FMA : 0) | (f16c ? UB_CPU_F16C : 0);
    if (__get_cpuid_max(0, 0) < 7) return f;
    __cpuid_count(7, 0, a, b, c, d);
    if ((b >> 5) & 1) f |= UB_CPU_AVX2;
    const int zmm = (x & 0xe0) == 0xe0; /* opmask, ZMM0-15 upper halves, ZMM16-31 */
    if (zmm) {
        if ((b >> 16) & 1) f |= UB_CPU_AVX512F;
        if ((b >> 30) & 1) f |= UB_CPU_AVX512BW;
        if ((b >> 31) & 1) f |= UB_CPU_AVX512VL;
        if ((c >> 11) & 1) f |= UB_CPU_AVX512VNNI;
    }
    unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
    __cpuid_count(7, 1, a1, b1, c1, d1);
    if ((a1 >> 4) & 1) f |= UB_CPU_AVXVNNI;
    return f;
}
#else
static int detect(void) { return 0; }
#endif

static int g_features;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void init_features(void) { g_features = detect(); }

int ub_cpu_features(void) {
    pthread_once(&g_once, init_features);
    return g_features;
}
