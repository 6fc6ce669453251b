/* The exported C `llama_tokenize` of the drop-in layer (see ub_compat.h). */
#include "ub_compat.h"

#include <limits.h>

static ub_compat_tokenize_fn g_tokenize = NULL;

/* Registers the tokenizer every llama_tokenize call forwards to (owned by the Python layer, which keeps the
 * callback alive for the life of the process). NULL unregisters. */
void ub_compat_set_tokenize(ub_compat_tokenize_fn fn) {
    __atomic_store_n(&g_tokenize, fn, __ATOMIC_RELEASE);
}

/* llama.cpp's llama_tokenize: vocab is a handle returned by llama_model_get_vocab (an address the layer
 * owns), text[text_len] bytes (not NUL-terminated), tokens[n_tokens_max] caller-owned. Returns the number of
 * tokens written, or minus the number needed (nothing written) when n_tokens_max is too small; INT32_MIN when
 * no tokenizer is registered or the handle is unknown (llama.cpp would crash there). */
int32_t llama_tokenize(const void *vocab, const char *text, int32_t text_len, int32_t *tokens, int32_t n_tokens_max,
                       bool add_special, bool parse_special) {
    ub_compat_tokenize_fn fn = __atomic_load_n(&g_tokenize, __ATOMIC_ACQUIRE);
    if (fn == NULL || vocab == NULL || (text == NULL && text_len > 0) || text_len < 0 || n_tokens_max < 0 ||
        (tokens == NULL && n_tokens_max > 0)) {
        return INT32_MIN;
    }
    return fn(vocab, text, text_len, tokens, n_tokens_max, add_special, parse_special);
}

/* The same function under a ub_ name for the CFFI cdef (tests call the C path through it). */
int32_t ub_compat_tokenize_c(const void *vocab, const char *text, int32_t text_len, int32_t *tokens,
                             int32_t n_tokens_max, bool add_special, bool parse_special) {
    return llama_tokenize(vocab, text, text_len, tokens, n_tokens_max, add_special, parse_special);
}
