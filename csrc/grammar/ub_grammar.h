/* ub_grammar: GBNF grammars with llama.cpp 0c1e570's semantics (llama-grammar.cpp), re-written in C.
 *
 * - ub_gvocab: a vocabulary's pieces (token_to_piece with special = true, cut at the first NUL, as llama.cpp's
 *   decode_utf8 reads them) in a byte trie laid out in preorder, the same decoded into a code-point trie (from a
 *   clean UTF-8 state), plus the end-of-generation flags.
 * - ub_grammar: the parsed rules (llama.cpp's parser: the same elements, symbol ids, repetitions, error
 *   messages), checked (undefined rules, left recursion) and compiled: grammar stacks are interned cons cells,
 *   a set of stacks is interned too, and the transition (stack set, code-point class) -> stack set is cached
 *   (code points no char element tells apart form one class), so a grammar state is one set id plus the partial
 *   UTF-8 sequence of the tokens accepted so far.
 * - ub_gstate: one sequence's position in a grammar (cheap to copy). Applying it to the vocabulary is one walk
 *   of the code-point trie (the byte trie after a cut UTF-8 sequence) in which shared prefixes are matched once
 *   and subtrees no stack can follow are skipped; the
 *   allowed set of a state with no partial UTF-8 is cached per stack set.
 * The allowed set is exactly llama_grammar_apply_impl's: an end-of-generation token iff a stack is empty, a token
 * with an empty piece never, any other token iff llama_grammar_reject_candidates keeps it (a token-element stack
 * keeps any token of that id with at least one more code point, a token that ends in a partial UTF-8 sequence is
 * kept by a char-element stack whose class that sequence may complete into, an invalid UTF-8 sequence is never
 * kept). A grammar and its states are guarded by one mutex: states may be used from several threads. */
#ifndef UB_GRAMMAR_H
#define UB_GRAMMAR_H

#include <stdint.h>
#include "ub_common.h"
#include "ub_tok.h"

/* cdef:begin */
typedef struct ub_gvocab ub_gvocab;
typedef struct ub_grammar ub_grammar;
typedef struct ub_gstate ub_gstate;

/* llama_gretype */
enum { UB_GRE_END = 0, UB_GRE_ALT = 1, UB_GRE_RULE_REF = 2, UB_GRE_CHAR = 3, UB_GRE_CHAR_NOT = 4,
       UB_GRE_CHAR_RNG_UPPER = 5, UB_GRE_CHAR_ALT = 6, UB_GRE_CHAR_ANY = 7, UB_GRE_TOKEN = 8,
       UB_GRE_TOKEN_NOT = 9 };
/* ub_grammar_new flags: parse only (tokens written <text> get id 0 without a vocabulary; nothing is compiled) */
enum { UB_GRAMMAR_SYNTAX_ONLY = 1 };
/* extra status codes of the grammar calls */
enum { UB_E_GRAMMAR_REJECT = 10,   /* the token / text is not allowed by the grammar (state unchanged) */
       UB_E_GRAMMAR_LIMIT = 11 };  /* the grammar's state space outgrew its limits (state unchanged) */

/* New vocabulary of n_tokens pieces: piece i is pieces[offsets[i] .. offsets[i+1]) (offsets int64[n + 1]);
 * eog uint8[n_tokens] (1 = end-of-generation token) or NULL. Copies what it keeps. NULL if out of memory or
 * a bad offset. Freed by ub_gvocab_free; grammars keep a reference (the last release frees it). */
ub_gvocab *ub_gvocab_new(const uint8_t *pieces, const int64_t *offsets, int32_t n_tokens, const uint8_t *eog);
void ub_gvocab_free(ub_gvocab *v);
int32_t ub_gvocab_n_tokens(const ub_gvocab *v);
int64_t ub_gvocab_n_nodes(const ub_gvocab *v);

/* Parse src[0..len) (cut at the first NUL, as llama.cpp reads a C string) with llama.cpp's GBNF parser and
 * compile it against v (may be NULL: then only ub_gstate_accept_bytes / can_end work) starting from rule
 * `root`. tok (may be NULL) resolves tokens written <text> (tokenize with parse_special; exactly one token).
 * On error returns NULL with llama.cpp's message in err[err_len] and the byte offset the parser stopped at in
 * *err_pos (-1 when the error has no position: undefined rule, missing root, left recursion). */
ub_grammar *ub_grammar_new(const char *src, int64_t len, const char *root, const ub_tok *tok, ub_gvocab *v,
                           int32_t flags, char *err, int32_t err_len, int64_t *err_pos);
void ub_grammar_free(ub_grammar *g);
int32_t ub_grammar_n_rules(const ub_grammar *g);
/* Rule r's elements: writes up to cap (type, value) pairs to out (int32[2 * cap]); returns the count
 * (END included), -1 for a bad r. */
int32_t ub_grammar_rule(const ub_grammar *g, int32_t r, int32_t *out, int32_t cap);
/* on = 0: states of g no longer keep their allowed sets (every apply walks the trie; benchmarks), 1: they do */
void ub_grammar_set_mask_cache(ub_grammar *g, int on);
/* Statistics: interned stacks, stack sets, cached masks. */
void ub_grammar_stats(ub_grammar *g, int64_t *out3);

/* The initial state of g (keeps a reference to g). NULL if out of memory. */
ub_gstate *ub_gstate_new(ub_grammar *g);
ub_gstate *ub_gstate_clone(const ub_gstate *s);
/* dst = src (same grammar): UB_OK or UB_E_ARG */
int ub_gstate_copy(ub_gstate *dst, const ub_gstate *src);
void ub_gstate_reset(ub_gstate *s);
void ub_gstate_free(ub_gstate *s);
/* 1 iff a stack is empty (the grammar may end here: end-of-generation tokens are allowed) */
int ub_gstate_can_end(ub_gstate *s);
/* Number of stacks of the state, and its partial UTF-8 sequence (value, n_remain) in out2 (may be NULL). */
int32_t ub_gstate_info(ub_gstate *s, int32_t *out2);

/* Allowed set over the whole vocabulary: out uint8[n_vocab], 1 = allowed. UB_OK, UB_E_ARG (no vocabulary),
 * UB_E_NOMEM, UB_E_GRAMMAR_LIMIT. */
int ub_gstate_mask(ub_gstate *s, uint8_t *out, int32_t n_vocab);
/* logits float[n_vocab] (token id order, caller-owned): disallowed tokens become -inf. */
int ub_gstate_apply_row(ub_gstate *s, float *logits, int32_t n_vocab);
/* llama_grammar_apply_impl on a candidate array d[n] (any order, any subset): disallowed -> logit -inf. An id
 * outside the vocabulary: UB_E_ARG and nothing written. */
int ub_gstate_apply_td(ub_gstate *s, ub_token_data *d, int64_t n);
/* Whether one token is allowed (1 / 0), or a negative status. */
int ub_gstate_allows(ub_gstate *s, int32_t token);
/* llama_grammar_accept_impl: advance by one token. UB_OK; UB_E_GRAMMAR_REJECT when the token leaves no stack
 * (llama.cpp throws) or is an end-of-generation token while no stack is empty (llama.cpp aborts); UB_E_ARG for
 * a bad id. A failed call leaves the state as it was. */
int ub_gstate_accept_token(ub_gstate *s, int32_t token);
/* llama_grammar_accept_token with an explicit piece p[n] (a lazy grammar's replay of part of a token). */
int ub_gstate_accept_piece(ub_gstate *s, int32_t token, const uint8_t *p, int64_t n);
/* llama_grammar_accept_str: advance by the code points of bytes b[n] (cut at a NUL). UB_OK or
 * UB_E_GRAMMAR_REJECT (state unchanged). */
int ub_gstate_accept_bytes(ub_gstate *s, const uint8_t *b, int64_t n);
/* cdef:end */

#endif
