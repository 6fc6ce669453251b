/* ub_compat: C entry points of the llama-cpp-python drop-in layer (ubatch/llama_cpp).
 *
 * - llama_tokenize: a real C function with llama.cpp's signature, exported from the extension so that
 *   native code handed its address (guidance / llguidance take ctypes.cast(_lib.llama_tokenize, c_void_p))
 *   can call it. It forwards to the tokenizer registered by ubatch.llama_cpp (ub_compat_set_tokenize).
 * - the sampler kernels that loop over the whole vocabulary with llama.cpp's float/double accumulation
 *   order (softmax in float, the dist sampler's cumulative sums in double), one C call each. */
#ifndef UB_COMPAT_H
#define UB_COMPAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ub_common.h" /* ub_token_data */

/* cdef:begin */
typedef int32_t (*ub_compat_tokenize_fn)(const void *vocab, const char *text, int32_t text_len, int32_t *tokens,
                                         int32_t n_tokens_max, bool add_special, bool parse_special);
void ub_compat_set_tokenize(ub_compat_tokenize_fn fn);
int32_t ub_compat_tokenize_c(const void *vocab, const char *text, int32_t text_len, int32_t *tokens,
                             int32_t n_tokens_max, bool add_special, bool parse_special);

float ub_compat_max_logit(const ub_token_data *d, size_t n);
void ub_compat_softmax(ub_token_data *d, size_t n, bool sorted);
int64_t ub_compat_dist(ub_token_data *d, size_t n, bool sorted, double rnd);
void ub_compat_z_function(const int32_t *r, int32_t n, int32_t *z);
/* cdef:end */

int32_t llama_tokenize(const void *vocab, const char *text, int32_t text_len, int32_t *tokens, int32_t n_tokens_max,
                       bool add_special, bool parse_special);

#endif
