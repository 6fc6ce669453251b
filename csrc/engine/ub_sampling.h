/* Token sampling for the generation engine: one call samples one token for each of n requests from rows of
 * a logits matrix (logit bias -> penalties -> top-k -> top-p -> min-p -> temperature -> draw, llama.cpp's default
 * chain), each request with its own counter-based random stream so that a sequence's draws depend only on its
 * seed and on how many tokens it has generated, never on what else is sampled in the same call. */
#ifndef UB_SAMPLING_H
#define UB_SAMPLING_H

#include <stdint.h>

/* cdef:begin */
/* Sample one token per request i in [0, n).
 *   logits      float[n_rows][n_vocab], caller-owned, read only (row r at logits + r * n_vocab)
 *   row         int32[n]: the logits row of request i (several requests may share a row: forks)
 *   temperature float[n]: <= 0 is greedy (argmax of the penalised logits, lowest id on ties)
 *   top_k       int32[n]: <= 0 or >= n_vocab keeps the whole vocabulary
 *   top_p       float[n]: >= 1 disables;   min_p float[n]: <= 0 disables
 *   penalty     float[n][3]: repeat (1 disables, > 0), frequency and presence penalty (0 disables) of
 *               llama.cpp's penalties sampler: a token listed c >= 1 times for request i has its logit l
 *               become (l <= 0 ? l * repeat : l / repeat) - c * frequency - presence
 *   pen_off     int64[n + 1], pen_tok int32[pen_off[n]]: request i's penalty window (the last tokens, prompt
 *               included) is pen_tok[pen_off[i] .. pen_off[i+1]) (a token may appear several times)
 *   bias_off    int64[n + 1], bias_tok int32[], bias_val float[]: logit biases added before the penalties
 *               (request i's are entries bias_off[i] .. bias_off[i+1], distinct tokens); bias_off may be NULL
 *               (-inf bans a token)
 *   seed, counter uint64[n]: the uniform draw of request i is a pure function of (seed[i], counter[i])
 *   n_logprobs  -1: no log-probabilities; k >= 0: out_lp[i] = log-softmax of the raw logits at the chosen
 *               token and out_top_id / out_top_lp [n][k] the k most probable tokens of the raw logits
 *               (descending, lowest id first on ties); the out_* pointers may be NULL when n_logprobs < 0
 *   out_tok     int32[n] (caller-owned)
 *   n_threads   participants of the shared thread pool (ub_pool.h) that take requests (results do not
 *               depend on it)
 * Returns UB_OK, UB_E_ARG (a bad size, row or token id; nothing written) or UB_E_NOMEM. */
int ub_sample(const float *logits, int64_t n_rows, int32_t n_vocab, int32_t n, const int32_t *row,
              const float *temperature, const int32_t *top_k, const float *top_p, const float *min_p,
              const float *penalty, const int64_t *pen_off, const int32_t *pen_tok,
              const int64_t *bias_off, const int32_t *bias_tok, const float *bias_val,
              const uint64_t *seed, const uint64_t *counter, int32_t n_logprobs,
              int32_t *out_tok, float *out_lp, int32_t *out_top_id, float *out_top_lp, int32_t n_threads);

/* The uniform double in [0, 1) that ub_sample draws for (seed, counter). */
double ub_sample_uniform(uint64_t seed, uint64_t counter);

/* Tests: on != 0 makes ub_sample use its plain-C paths instead of AVX2 (results are the same bitwise); returns
 * the previous setting. Not thread-safe with respect to running ub_sample calls. */
int ub_sample_force_plain(int on);
/* cdef:end */

#endif
