/* Byte-level BPE (llama.cpp's llm_tokenizer_bpe_session): pre-tokenize, map every byte of a word to its GPT-2
 * character, merge the pair of lowest rank (leftmost on ties) until none applies, then look the symbols up;
 * a symbol that is not a token falls back to its single bytes (dropped when they are not tokens either). */
#include "tok_internal.h"
#include "tok_unicode.h"

static int add_pair(const ub_tok *t, tok_sym *sym, int64_t l, int64_t r, tok_heap *h) {
    if (l < 0 || r < 0) return 0;
    int32_t rank = tok_rank(t, sym[l].sid, sym[r].sid);
    if (rank < 0) return 0;
    tok_cand c = { (double)rank, (int32_t)l, (int32_t)r, sym[l].n + sym[r].n };
    return tok_heap_push(h, c);
}

/* one byte-level word w[n]; sym has room for n symbols */
static int encode_word(const ub_tok *t, const uint8_t *w, int64_t n, tok_sym *sym, tok_heap *h, ivec *out) {
    if (t->cfg.ignore_merges) {
        int32_t id = tok_token(t, w, n);
        if (id >= 0) return ivec_push(out, id);
    }
    int64_t ns = 0;
    for (int64_t off = 0; off < n;) {
        int64_t len = (int64_t)utf8_lead_len(w[off]);
        if (len > n - off) len = n - off;
        sym[ns].off = off; sym[ns].n = len; sym[ns].prev = ns - 1;
        sym[ns].sid = tok_lookup(t, w + off, len);
        off += len;
        sym[ns].next = off == n ? -1 : ns + 1;
        ns++;
    }
    h->n = 0;
    for (int64_t i = 1; i < ns; i++) if (add_pair(t, sym, i - 1, i, h)) return -1;
    while (h->n > 0) {
        tok_cand c = tok_heap_pop(h);
        tok_sym *l = &sym[c.left], *r = &sym[c.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != c.size) continue;
        l->n += r->n; r->n = 0;
        l->sid = tok_lookup(t, w + l->off, l->n);
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = c.left;
        if (add_pair(t, sym, l->prev, c.left, h) || add_pair(t, sym, c.left, l->next, h)) return -1;
    }
    for (int64_t i = 0; i != -1 && ns > 0; i = sym[i].next) {
        int32_t id = sym[i].sid < t->n_tokens ? sym[i].sid : -1;
        if (id >= 0) { if (ivec_push(out, id)) return -1; continue; }
        for (int64_t j = 0; j < sym[i].n; j++) {
            int32_t b = t->single_byte_tok[w[sym[i].off + j]];
            if (b >= 0 && ivec_push(out, b)) return -1;
        }
    }
    return 0;
}

/* s[n]: one raw fragment (any bytes). Appends its ids to out. 0, or -1 with a message. */
int tok_bpe_encode(const ub_tok *t, const uint8_t *s, int64_t n, ivec *out, char *err, int32_t err_len) {
    if (n <= 0) return 0;
    int rc = -1;
    uint32_t *cps = (uint32_t *)malloc((size_t)n * sizeof(uint32_t));
    int64_t *lens = NULL, n_lens = 0;
    uint8_t *w = NULL;
    tok_sym *sym = NULL;
    tok_heap h = {0};
    if (!cps) goto oom;
    int64_t nc = 0;
    for (size_t pos = 0; pos < (size_t)n;) {
        size_t at = pos;
        uint32_t cp = utf8_decode_llama(s, (size_t)n, &pos);
        if (cp >= UB_CPT_MAX) {
            char msg[160];
            snprintf(msg, sizeof msg, "byte offset %zu: a 4-byte UTF-8 form of U+%X, beyond U+10FFFF "
                     "(llama.cpp throws 'invalid codepoint' on it)", at, (unsigned)cp);
            tok_err(err, err_len, msg);
            goto done;
        }
        cps[nc++] = cp;
    }
    if (tok_pre_split(t->cfg.pre, cps, nc, &lens, &n_lens)) goto oom;
    int64_t maxw = 0;
    for (int64_t k = 0; k < n_lens; k++) if (lens[k] > maxw) maxw = lens[k];
    w = (uint8_t *)malloc((size_t)maxw * 8 + 8);       /* <= 4 bytes per cp, each -> <= 2 bytes */
    sym = (tok_sym *)malloc(((size_t)maxw * 8 + 8) * sizeof(tok_sym));
    if (!w || !sym) goto oom;
    int64_t c0 = 0;
    for (int64_t k = 0; k < n_lens; k++) {
        int64_t wn = 0;
        for (int64_t c = c0; c < c0 + lens[k]; c++) {
            uint8_t u[4];
            int ul = utf8_encode(cps[c], u);
            for (int j = 0; j < ul; j++) wn += utf8_encode(byte_to_bl_cp(u[j]), w + wn);
        }
        c0 += lens[k];
        if (encode_word(t, w, wn, sym, &h, out)) goto oom;
    }
    rc = 0;
    goto done;
oom:
    tok_err(err, err_len, "out of memory");
done:
    free(cps); free(lens); free(w); free(sym); free(h.a);
    return rc;
}
