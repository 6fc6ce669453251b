/* SPM (llama.cpp's llm_tokenizer_spm_session): bigram merges by score over UTF-8 "chars", byte fallback. */
#include "tok_internal.h"
#include "tok_unicode.h"

/* candidate (l, r) if the concatenation (contiguous in s) is a token of any type */
static int try_add(const ub_tok *t, const uint8_t *s, tok_sym *sym, int64_t l, int64_t r, tok_heap *h) {
    if (l < 0 || r < 0) return 0;
    int64_t size = sym[l].n + sym[r].n;
    int32_t id = tok_token(t, s + sym[l].off, size);
    if (id < 0) return 0;
    tok_cand c = { -(double)t->scores[id], (int32_t)l, (int32_t)r, size };
    return tok_heap_push(h, c);
}

/* s[n]: one escaped fragment (spaces already U+2581). Appends its ids to out. */
int tok_spm_encode(const ub_tok *t, const uint8_t *s, int64_t n, ivec *out, char *err, int32_t err_len) {
    if (n <= 0) return 0;
    tok_sym *sym = (tok_sym *)malloc((size_t)n * sizeof(tok_sym));
    tok_heap h = {0};
    int rc = -1;
    if (!sym) { tok_err(err, err_len, "out of memory"); return -1; }
    int64_t ns = 0;
    for (int64_t off = 0; off < n;) {
        int64_t len = (int64_t)utf8_lead_len(s[off]);
        if (len > n - off) len = n - off;
        sym[ns].off = off; sym[ns].n = len; sym[ns].prev = ns - 1;
        off += len;
        sym[ns].next = off == n ? -1 : ns + 1;
        ns++;
    }
    for (int64_t i = 1; i < ns; i++) if (try_add(t, s, sym, i - 1, i, &h)) goto oom;
    while (h.n > 0) {
        tok_cand c = tok_heap_pop(&h);
        tok_sym *l = &sym[c.left], *r = &sym[c.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != c.size) continue;
        l->n += r->n; r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = c.left;
        if (try_add(t, s, sym, l->prev, c.left, &h) || try_add(t, s, sym, c.left, l->next, &h)) goto oom;
    }
    for (int64_t i = 0; i != -1; i = sym[i].next) {
        int32_t id = tok_token(t, s + sym[i].off, sym[i].n);
        if (id >= 0) { if (ivec_push(out, id)) goto oom; continue; }
        for (int64_t j = 0; j < sym[i].n; j++) {
            uint8_t b = s[sym[i].off + j];
            if (t->byte_tok[b] < 0) {
                char msg[128];
                snprintf(msg, sizeof msg, "the vocabulary has no byte-fallback token for byte 0x%02X (neither <0x%02X> "
                         "nor the 1-byte text)", b, b);
                tok_err(err, err_len, msg);
                goto done;
            }
            if (ivec_push(out, t->byte_tok[b])) goto oom;
        }
    }
    rc = 0;
    goto done;
oom:
    tok_err(err, err_len, "out of memory");
done:
    free(sym); free(h.a);
    return rc;
}
