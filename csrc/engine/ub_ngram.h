/* Prompt-lookup drafting for speculative decoding: the continuation of an earlier occurrence of the last
 * n-gram of a token history (the semantics of llama-cpp-python 0.3.36's LlamaPromptLookupDecoding). */
#ifndef UB_NGRAM_H
#define UB_NGRAM_H

#include <stdint.h>

/* cdef:begin */
/* tok int32[n], caller-owned, read only. For g = min(max_ngram, n - 1) down to 1: the windows tok[i .. i+g)
 * equal to the last g tokens tok[n-g .. n), in increasing i (latest != 0: decreasing i), the first one whose
 * continuation tok[i+g .. min(i+g+num_pred, n)) is not empty is the candidate. Writes its first index to
 * *start (n when there is none) and g to *ngram (0 when there is none; ngram may be NULL) and returns its
 * length: 0 when nothing matches, when max_ngram < 1 or num_pred < 1, or n < 2; -1 when tok is NULL with
 * n > 0 or n < 0 or start is NULL (nothing written). */
int64_t ub_ngram_lookup(const int32_t *tok, int64_t n, int32_t max_ngram, int32_t num_pred, int32_t latest,
                        int64_t *start, int32_t *ngram);
/* cdef:end */

#endif
