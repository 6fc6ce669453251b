/* The DRY sampler's repeat search (llama-sampling.cpp, step 2) as a plain Z-function. */
#include "ub_compat.h"

/* r[n]: the recent tokens newest first (r[0] = the last accepted token); z[n] (caller-owned) receives, for every
 * k >= 1, the length of the longest common prefix of r and r[k..], i.e. how far the suffix ending k tokens ago
 * repeats the current suffix; z[0] = 0. O(n). */
void ub_compat_z_function(const int32_t *r, int32_t n, int32_t *z) {
    if (n <= 0) {
        return;
    }
    z[0] = 0;
    int32_t lt = 0, rt = 0;
    for (int32_t k = 1; k < n; ++k) {
        int32_t len = 0;
        if (k < rt) {
            len = z[k - lt] < rt - k ? z[k - lt] : rt - k;
        }
        while (k + len < n && r[len] == r[k + len]) {
            ++len;
        }
        z[k] = len;
        if (k + len > rt) {
            lt = k;
            rt = k + len;
        }
    }
}
