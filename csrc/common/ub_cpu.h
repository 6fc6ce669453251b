/* The one CPU detection of the C core: which x86 SIMD extensions this CPU has AND its OS saves the state of
 * (read with cpuid / xgetbv once per process; the answer is a constant of the machine). Every run-time
 * chooser of a SIMD path asks here: the matmul back-ends (mm_cpu.c, which also serves the attention and the
 * activation kernels), the sampler (sampling.c). */
#ifndef UB_CPU_H
#define UB_CPU_H

/* cdef:begin */
/* Feature bits of ub_cpu_features(). The AVX family (AVX2, FMA, F16C, AVX-VNNI) is reported only when the OS
 * saves the YMM state, the AVX-512 family only when it also saves the ZMM and opmask state. */
enum {
    UB_CPU_AVX2 = 1, UB_CPU_FMA = 2, UB_CPU_F16C = 4, UB_CPU_AVXVNNI = 8,
    UB_CPU_AVX512F = 16, UB_CPU_AVX512BW = 32, UB_CPU_AVX512VL = 64, UB_CPU_AVX512VNNI = 128
};
/* The UB_CPU_* bits of the running CPU (0 off x86 or without a GNU-compatible compiler). No buffers. */
int ub_cpu_features(void);
/* cdef:end */

/* Short-hands of the sets the kernels are compiled for (function-level target attributes, no -march). */
#define UB_CPU_AVX2_SET (UB_CPU_AVX2 | UB_CPU_FMA | UB_CPU_F16C)
#define UB_CPU_AVX512_SET (UB_CPU_AVX512F | UB_CPU_AVX512BW | UB_CPU_AVX512VL | UB_CPU_AVX512VNNI)

/* 1 when every bit of `set` is in ub_cpu_features(). */
static inline int ub_cpu_has(int set) { return (ub_cpu_features() & set) == set; }

#endif
