/* Tokenizer core (llama.cpp's llama_vocab: SPM and byte-level BPE). One ub_tok holds a vocabulary copied out
 * of a GGUF file (texts, scores, attributes, BPE merge ranks) plus what load() derives (special-token cache,
 * piece cache); after ub_tok_finalize it is read-only, so encode/detokenize may run from several threads. */
#ifndef UB_TOK_H
#define UB_TOK_H

#include <stdint.h>
#include <stddef.h>

/* cdef:begin */
typedef struct ub_tok ub_tok;

enum { UB_TOK_SPM = 1, UB_TOK_BPE = 2 };
/* pre-tokenizer regex lists (llm_tokenizer_bpe): default, gpt-2, llama3, qwen2, smollm/starcoder */
enum { UB_PRE_DEFAULT = 0, UB_PRE_GPT2 = 1, UB_PRE_LLAMA3 = 2, UB_PRE_QWEN2 = 3, UB_PRE_SMOLLM = 4 };
/* llama_token_attr bits */
enum { UB_ATTR_UNKNOWN = 1, UB_ATTR_UNUSED = 2, UB_ATTR_NORMAL = 4, UB_ATTR_CONTROL = 8,
       UB_ATTR_USER_DEFINED = 16, UB_ATTR_BYTE = 32, UB_ATTR_NORMALIZED = 64, UB_ATTR_LSTRIP = 128,
       UB_ATTR_RSTRIP = 256, UB_ATTR_SINGLE_WORD = 512 };

typedef struct ub_tok_config {
    int32_t pre;               /* UB_PRE_* (BPE only) */
    int32_t add_space_prefix;
    int32_t add_bos, add_eos;
    int32_t bos, eos;          /* -1 = none */
    int32_t clean_spaces;
    int32_t ignore_merges;
} ub_tok_config;

/* Walk `count` GGUF strings (u64 little-endian length + bytes) starting at buf[offset]; buf has buf_len bytes.
 * Returns the offset just past the last one, or -1 if the array runs past the end of the buffer. */
int64_t ub_gguf_skip_strings(const uint8_t *buf, int64_t buf_len, int64_t offset, int64_t count);

/* New vocabulary of n_tokens strings read from buf[offset..] (GGUF string array, see above); kind UB_TOK_*.
 * Copies everything (buf may be unmapped afterwards). Empty texts become "[EMPTY_<id>]". NULL on error with a
 * message in err[err_len] (truncated array, duplicate text, out of memory). */
ub_tok *ub_tok_new(int32_t kind, const uint8_t *buf, int64_t buf_len, int64_t offset, int32_t n_tokens,
                   char *err, int32_t err_len);
void ub_tok_free(ub_tok *t);
int32_t ub_tok_n_tokens(const ub_tok *t);
/* The per-token arrays, int32[n_tokens] / float[n_tokens], owned by t, editable until ub_tok_finalize
 * (attributes stay editable afterwards: lstrip/rstrip changes after load, as llama.cpp makes them). */
int32_t *ub_tok_attrs(ub_tok *t);
float *ub_tok_scores(ub_tok *t);
/* id of the token whose text is exactly text[0..len), or -1 */
int32_t ub_tok_find(const ub_tok *t, const uint8_t *text, int64_t len);
/* text of token id (not NUL-terminated) through *text; returns its length, -1 for a bad id */
int32_t ub_tok_text(const ub_tok *t, int32_t id, const uint8_t **text);
/* llama.cpp's "unused" rule: CONTROL tokens whose text (up to a NUL) contains "unused" get UNUSED; returns
 * the number of CONTROL|UNUSED tokens afterwards */
int32_t ub_tok_mark_unused(ub_tok *t);
/* BPE merge ranks from n_merges GGUF strings at buf[offset..] ("LEFT RIGHT", split at the first ' ' at index
 * >= 1; rank = index; the first rank of a duplicate pair wins). 0, or -1 with a message. */
int32_t ub_tok_set_merges(ub_tok *t, const uint8_t *buf, int64_t buf_len, int64_t offset, int64_t n_merges,
                          char *err, int32_t err_len);
/* Build the special-token cache (CONTROL|USER_DEFINED|UNKNOWN, longest text first, ascending id within a
 * length) and the piece cache (token_to_piece with special = true). 0, or -1 with a message. */
int32_t ub_tok_finalize(ub_tok *t, const ub_tok_config *cfg, char *err, int32_t err_len);

/* llama_tokenize: ids of text[0..len) into out[cap]. Returns the number of ids n (>= 0); when n > cap nothing
 * useful is written (call again with cap >= n). -1 on error (message in err). */
int64_t ub_tok_encode(const ub_tok *t, const uint8_t *text, int64_t len, int32_t add_special,
                      int32_t parse_special, int32_t *out, int64_t cap, char *err, int32_t err_len);
/* ub_tok_encode with protected bytes: protect[len] (caller-owned, may be NULL = none) marks bytes that are text
 * whatever parse_special says -- a CONTROL / UNKNOWN special token whose match overlaps a marked byte is not
 * matched there (chat message content); raw fragments still run across the boundaries, so a text without
 * special-token text inside the protected bytes gives the ids of ub_tok_encode. */
int64_t ub_tok_encode_protected(const ub_tok *t, const uint8_t *text, int64_t len, int32_t add_special,
                                int32_t parse_special, const uint8_t *protect, int32_t *out, int64_t cap,
                                char *err, int32_t err_len);
/* llama_detokenize of ids[n] into out[cap]: returns the byte count (> cap: nothing useful written, call again),
 * -1 if an id is out of range. */
int64_t ub_tok_detokenize(const ub_tok *t, const int32_t *ids, int64_t n, uint8_t *out, int64_t cap,
                          int32_t remove_special, int32_t unparse_special);
/* llama_token_to_piece: *piece points into t's cache (valid while t lives); returns its length after
 * dropping up to lstrip leading spaces, 0 for hidden tokens, -1 for a bad id. */
int32_t ub_tok_piece(const ub_tok *t, int32_t id, int32_t special, int32_t lstrip, const uint8_t **piece);
/* The whole piece cache: *offsets = int64[n_tokens + 1] (piece i is bytes [offsets[i], offsets[i+1])), both
 * owned by t and valid while it lives; NULL before ub_tok_finalize. */
const uint8_t *ub_tok_pieces(const ub_tok *t, const int64_t **offsets);
/* The Unicode 15.1 class byte of code point cp (class = byte & 7: 0 undefined, 1 number, 2 letter, 3 separator,
 * 4 mark, 5 punctuation, 6 symbol, 7 control; byte & 8: llama.cpp's whitespace set); cp >= 0x110000 -> 0. */
int32_t ub_tok_cpt_class(uint32_t cp);
/* cdef:end */

#endif
