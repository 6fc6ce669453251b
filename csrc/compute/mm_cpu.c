/* Which matmul back-ends this machine can run, from the one CPU detection (ub_cpu.c):
 *   generic  always;
 *   avx2     AVX2 + FMA + F16C (and the OS saves the YMM state);
 *   avxvnni  avx2 + AVX-VNNI (VEX-encoded 256-bit vpdpbusd; Alder Lake and later, Zen 5);
 *   avx512   avx2 + AVX-512 F/BW/VL + AVX512_VNNI (and the OS saves the ZMM/opmask state; Ice Lake and later
 *            Xeons, Sapphire Rapids, Zen 4/5).
 * A build with UB_NO_AVX2 (or off x86-64 GCC/Clang) compiles no SIMD back-end in, so reports generic alone.
 * No buffers. */
#include "mm_internal.h"
#include "ub_cpu.h"
#include "ub_matmul.h"

int ub_mm_cpu_backends(void) {
    int mask = 1 << UB_MM_GENERIC;
#if defined(__GNUC__) && defined(__x86_64__) && !defined(UB_NO_AVX2)
    if (!ub_cpu_has(UB_CPU_AVX2_SET)) return mask;
    mask |= 1 << UB_MM_AVX2;
    if (ub_cpu_has(UB_CPU_AVXVNNI)) mask |= 1 << UB_MM_AVXVNNI;
    if (ub_cpu_has(UB_CPU_AVX512_SET)) mask |= 1 << UB_MM_AVX512;
#endif
    return mask;
}
