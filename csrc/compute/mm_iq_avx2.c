/* AVX2 dot kernels of the i-quant and ternary types (placeholder until written: the generic kernels run). */
#include "mm_iq.h"

ub_mm_dot_fn ub_mm_dot_iq_avx2(int32_t type) {
    (void)type;
    return 0;
}
