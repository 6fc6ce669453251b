/* llama_detokenize: concatenated pieces, BOS/EOS removal, the first piece's leading space, clean_spaces. */
#include "tok_internal.h"

/* llama.cpp's three in-place clean-up passes over buf[total]; returns the new length */
static int64_t clean_spaces(uint8_t *text, int64_t total1) {
    int64_t total = total1 ? 1 : 0;
    for (int64_t i = 1; i < total1; i++) {            /* " ?", " !", " .", " ," */
        uint8_t x = text[i];
        if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) total--;
        text[total++] = x;
    }
    int64_t total2 = total;
    total = total ? 1 : 0;
    for (int64_t i = 1; i < total2; i++) {            /* " ' " -> "'" */
        uint8_t x = text[i];
        if (x == '\'' && i + 1 < total2 && text[i - 1] == ' ' && text[i + 1] == ' ') {
            total--;
            text[++i] = '\0';
        }
        text[total++] = x;
    }
    int64_t total3 = total;
    total = total ? 1 : 0;
    for (int64_t i = 1; i < total3; i++) {            /* drop ' ' before 's 'm 're 've */
        uint8_t x = text[i];
        if (text[i - 1] == ' ' && x == '\'' && i + 1 < total3) {
            uint8_t x1 = text[i + 1];
            if (x1 == 's' || x1 == 'm') total--;
            else if (x1 != 't' && x1 != 'd' && i + 2 < total3) {
                uint8_t x2 = text[i + 2];
                if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) total--;
            }
        }
        text[total++] = x;
    }
    return total;
}

/* ids[n] (each checked) -> out[cap]; see ub_tok.h */
int64_t ub_tok_detokenize(const ub_tok *t, const int32_t *ids, int64_t n, uint8_t *out, int64_t cap,
                          int32_t remove_special, int32_t unparse_special) {
    if (!t || !t->finalized || n < 0) return -1;
    for (int64_t i = 0; i < n; i++) if (ids[i] < 0 || ids[i] >= t->n_tokens) return -1;
    const ub_tok_config *c = &t->cfg;
    int remove_space = c->add_space_prefix;
    if (remove_special && c->add_bos && n > 0 && ids[0] == c->bos) { remove_space = 0; ids++; n--; }
    if (remove_special && c->add_eos && n > 0 && ids[n - 1] == c->eos) n--;
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *p;
        int32_t k = ub_tok_piece(t, ids[i], unparse_special, remove_space, &p);
        remove_space = 0;
        if (k > 0) {
            if (total + k <= cap) memcpy(out + total, p, (size_t)k);
            total += k;
        }
    }
    if (total > cap) return total;
    if (c->clean_spaces) total = clean_spaces(out, total);
    return total;
}
