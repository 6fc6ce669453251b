/* llama_tokenize (llama_vocab::impl::tokenize for SPM and BPE) and llama_token_to_piece. */
#include "tok_internal.h"
#include "tok_unicode.h"

static int spm_fragment(const ub_tok *t, const uint8_t *s, int64_t n, int prefix, ivec *out, char *err,
                        int32_t err_len) {
    int64_t n_sp = prefix;
    for (int64_t i = 0; i < n; i++) n_sp += s[i] == ' ';
    uint8_t *e = (uint8_t *)malloc((size_t)(n + 2 * n_sp + 3));
    if (!e) { tok_err(err, err_len, "out of memory"); return -1; }
    int64_t k = 0;
    if (prefix) { e[k++] = 0xE2; e[k++] = 0x96; e[k++] = 0x81; }
    for (int64_t i = 0; i < n; i++) {
        if (s[i] == ' ') { e[k++] = 0xE2; e[k++] = 0x96; e[k++] = 0x81; }
        else e[k++] = s[i];
    }
    int rc = tok_spm_encode(t, e, k, out, err, err_len);
    free(e);
    return rc;
}

/* text[len] -> out[cap]; see ub_tok.h */
int64_t ub_tok_encode(const ub_tok *t, const uint8_t *text, int64_t len, int32_t add_special,
                      int32_t parse_special, int32_t *out, int64_t cap, char *err, int32_t err_len) {
    return ub_tok_encode_protected(t, text, len, add_special, parse_special, NULL, out, cap, err, err_len);
}

/* text[len] (protect[len] or NULL) -> out[cap]; see ub_tok.h */
int64_t ub_tok_encode_protected(const ub_tok *t, const uint8_t *text, int64_t len, int32_t add_special,
                                int32_t parse_special, const uint8_t *protect, int32_t *out, int64_t cap,
                                char *err, int32_t err_len) {
    if (!t || !t->finalized) { tok_err(err, err_len, "tokenizer not finalized"); return -1; }
    if (len < 0 || (len > 0 && !text)) { tok_err(err, err_len, "bad text buffer"); return -1; }
    tok_frag *fr = NULL;
    int64_t nf = 0;
    ivec o = {0};
    int64_t rc = -1;
    const ub_tok_config *c = &t->cfg;
    if (tok_partition(t, text, len, parse_special, protect, &fr, &nf)) { tok_err(err, err_len, "out of memory"); return -1; }
    if (add_special && c->add_bos) {
        if (c->bos < 0) { tok_err(err, err_len, "add_bos is set but the vocabulary has no BOS token"); goto done; }
        if (ivec_push(&o, c->bos)) goto oom;
    }
    int prev_special = 1;
    for (int64_t i = 0; i < nf; i++) {
        if (fr[i].id >= 0) { if (ivec_push(&o, fr[i].id)) goto oom; prev_special = 1; continue; }
        const uint8_t *s = text + fr[i].off;
        if (t->kind == UB_TOK_SPM) {
            if (spm_fragment(t, s, fr[i].len, c->add_space_prefix && prev_special, &o, err, err_len)) goto done;
        } else {
            if (tok_bpe_encode(t, s, fr[i].len, &o, err, err_len)) goto done;
        }
        prev_special = 0;
    }
    if (add_special && c->add_eos) {
        if (c->eos < 0) { tok_err(err, err_len, "add_eos is set but the vocabulary has no EOS token"); goto done; }
        if (ivec_push(&o, c->eos)) goto oom;
    }
    if (o.n <= cap && o.n > 0) memcpy(out, o.v, (size_t)o.n * sizeof(int32_t));
    rc = o.n;
    goto done;
oom:
    tok_err(err, err_len, "out of memory");
done:
    free(fr); free(o.v);
    return rc;
}

int32_t ub_tok_piece(const ub_tok *t, int32_t id, int32_t special, int32_t lstrip, const uint8_t **piece) {
    if (!t || !t->finalized || id < 0 || id >= t->n_tokens) return -1;
    if (!special && (t->attrs[id] & (UB_ATTR_UNKNOWN | UB_ATTR_CONTROL))) { *piece = t->pieces; return 0; }
    const uint8_t *p = t->pieces + t->piece_off[id];
    int64_t n = t->piece_off[id + 1] - t->piece_off[id];
    for (int32_t i = 0; i < lstrip && n && *p == ' '; i++) { p++; n--; }
    *piece = p;
    return (int32_t)n;
}

const uint8_t *ub_tok_pieces(const ub_tok *t, const int64_t **offsets) {
    if (!t || !t->finalized) return NULL;
    *offsets = t->piece_off;
    return t->pieces;
}

int32_t ub_tok_cpt_class(uint32_t cp) { return ucd_byte(cp); }
