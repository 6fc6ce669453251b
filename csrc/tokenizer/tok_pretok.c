/* BPE pre-tokenizers as llama.cpp runs them (unicode_regex_split): a list of expressions, each splitting
 * every chunk left by the previous ones into matches and the gaps between them. The GPT-2, llama3 and qwen2
 * expressions are llama.cpp's hand-written scanners (ported here); the other expressions of the supported
 * lists are single-class runs, which llama.cpp's std::regex on the category-collapsed text reduces to the
 * predicates below. */
#include "tok_internal.h"
#include "tok_unicode.h"

typedef struct { int64_t *v; int64_t n, cap; } lvec;
static int lvec_push(lvec *a, int64_t x) {
    if (a->n == a->cap) {
        int64_t nc = a->cap ? a->cap * 2 : 64;
        int64_t *nv = (int64_t *)realloc(a->v, (size_t)nc * sizeof(int64_t));
        if (!nv) return -1;
        a->v = nv; a->cap = nc;
    }
    a->v[a->n++] = x;
    return 0;
}

/* one chunk [ini, end) of cps being scanned; "prev" is where the next word starts */
typedef struct { const uint32_t *cps; int64_t ini, end, prev; lvec *out; int fail; } scan;

#define OUT_CPT 0xFFFFFFFFu
static inline uint32_t S_cpt(const scan *s, int64_t p) { return (p >= s->ini && p < s->end) ? s->cps[p] : OUT_CPT; }
static inline uint8_t S_f(const scan *s, int64_t p) { return (p >= s->ini && p < s->end) ? ucd_byte(s->cps[p]) : UCD_OUT; }
static inline int F_L(uint8_t f) { return f != UCD_OUT && (f & 7) == UCLS_LETTER; }
static inline int F_N(uint8_t f) { return f != UCD_OUT && (f & 7) == UCLS_NUMBER; }
static inline int F_W(uint8_t f) { return f != UCD_OUT && (f & UCD_WS); }
static inline int F_ANY(uint8_t f) { return f != UCD_OUT; }
static inline int F_OTHER(uint8_t f) { return !(F_W(f) || F_L(f) || F_N(f)) && F_ANY(f); }
static inline uint32_t lower_ascii(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

static int64_t add_tok(scan *s, int64_t end) {
    int64_t len = end - s->prev;
    if (len > 0 && lvec_push(s->out, len)) s->fail = 1;
    s->prev = end;
    return len;
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+  (llama.cpp custom_gpt2) */
static void scan_gpt2(scan *s) {
    for (int64_t pos = s->ini; pos < s->end;) {
        uint32_t cpt = S_cpt(s, pos);
        uint8_t f = S_f(s, pos);
        if (cpt == '\'' && pos + 1 < s->end) {
            uint32_t n1 = S_cpt(s, pos + 1);
            if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') { pos += add_tok(s, pos + 2); continue; }
            if (pos + 2 < s->end) {
                uint32_t n2 = S_cpt(s, pos + 2);
                if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) {
                    pos += add_tok(s, pos + 3); continue;
                }
            }
        }
        uint8_t f2 = cpt == ' ' ? S_f(s, pos + 1) : f;
        if (F_L(f2)) { pos += (cpt == ' '); while (F_L(f2)) f2 = S_f(s, ++pos); add_tok(s, pos); continue; }
        if (F_N(f2)) { pos += (cpt == ' '); while (F_N(f2)) f2 = S_f(s, ++pos); add_tok(s, pos); continue; }
        if (F_OTHER(f2)) {
            pos += (cpt == ' ');
            while (F_OTHER(f2)) f2 = S_f(s, ++pos);
            add_tok(s, pos); continue;
        }
        int64_t nws = 0;
        while (F_W(S_f(s, pos + nws))) nws++;
        if (nws > 1 && S_cpt(s, pos + nws) != OUT_CPT) { pos += nws - 1; add_tok(s, pos); continue; }
        if (nws > 0) { pos += nws; add_tok(s, pos); continue; }
        add_tok(s, ++pos);
    }
}

/* llama3 (digits_max 3) and qwen2 (digits_max 1):
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static void scan_llama3(scan *s, int digits_max) {
    for (int64_t pos = s->ini; pos < s->end;) {
        uint32_t cpt = S_cpt(s, pos);
        uint8_t f = S_f(s, pos);
        if (cpt == '\'' && pos + 1 < s->end) {
            uint32_t n1 = lower_ascii(S_cpt(s, pos + 1));
            if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') { pos += add_tok(s, pos + 2); continue; }
            if (pos + 2 < s->end) {
                uint32_t n2 = lower_ascii(S_cpt(s, pos + 2));
                if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) {
                    pos += add_tok(s, pos + 3); continue;
                }
            }
        }
        if (!(cpt == '\r' || cpt == '\n' || F_N(f))) {
            if (F_L(f) || F_L(S_f(s, pos + 1))) {
                pos++;
                while (F_L(S_f(s, pos))) pos++;
                add_tok(s, pos); continue;
            }
        }
        if (F_N(f)) {
            if (digits_max == 1) { pos++; add_tok(s, pos); continue; }
            int64_t ini = pos;
            while (F_N(S_f(s, pos))) {
                if (++pos - ini >= digits_max) { add_tok(s, pos); ini = pos; }
            }
            add_tok(s, pos); continue;
        }
        uint8_t f2 = cpt == ' ' ? S_f(s, pos + 1) : f;
        if (!(F_W(f2) || F_L(f2) || F_N(f2)) && F_ANY(f)) {
            pos += (cpt == ' ');
            while (F_OTHER(f2)) f2 = S_f(s, ++pos);
            uint32_t c2 = S_cpt(s, pos);
            while (c2 == '\r' || c2 == '\n') c2 = S_cpt(s, ++pos);
            add_tok(s, pos); continue;
        }
        int64_t nws = 0, last_rn = 0;
        while (F_W(S_f(s, pos + nws))) {
            uint32_t c2 = S_cpt(s, pos + nws);
            if (c2 == '\r' || c2 == '\n') last_rn = pos + nws + 1;
            nws++;
        }
        if (last_rn > 0) { pos = last_rn; add_tok(s, pos); continue; }
        if (nws > 1 && S_cpt(s, pos + nws) != OUT_CPT) { pos += nws - 1; add_tok(s, pos); continue; }
        if (nws > 0) { pos += nws; add_tok(s, pos); continue; }
        add_tok(s, ++pos);
    }
}

/* single-class expressions, as std::regex sees them on the collapsed text (ASCII code points themselves,
 * other code points one byte per class, whitespace -> \v) */
enum { RX_PUNCT_RUN, RX_NUM_RUN, RX_NUM_ONE, RX_DIGIT3 };

static int is_ascii_punct_or_extra(uint32_t c) {   /* \p{P} ASCII members + \$\+<=>\^~\| */
    return (c >= 0x21 && c <= 0x23) || (c >= 0x25 && c <= 0x2A) || (c >= 0x2C && c <= 0x2F) || c == 0x3A ||
           c == 0x3B || c == 0x3F || c == 0x40 || (c >= 0x5B && c <= 0x5D) || c == 0x5F || c == 0x7B || c == 0x7D ||
           c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' || c == '~' || c == '|';
}
static int rx_class(int rx, uint32_t c) {
    if (rx == RX_DIGIT3) return c >= '0' && c <= '9';
    if (c < 128) return rx == RX_PUNCT_RUN ? is_ascii_punct_or_extra(c) : (c >= '0' && c <= '9');
    uint8_t b = ucd_byte(c);
    if (b & UCD_WS) return 0;
    return (b & 7) == (rx == RX_PUNCT_RUN ? UCLS_PUNCT : UCLS_NUMBER);
}

static void scan_regex(scan *s, int rx) {
    int64_t pos = s->ini;
    while (pos < s->end) {
        if (!rx_class(rx, s->cps[pos])) { pos++; continue; }
        int64_t m = pos, e = pos;
        if (rx == RX_DIGIT3) {
            if (pos + 3 > s->end || !rx_class(rx, s->cps[pos + 1]) || !rx_class(rx, s->cps[pos + 2])) { pos++; continue; }
            e = pos + 3;
        } else if (rx == RX_NUM_ONE) {
            e = pos + 1;
        } else {
            while (e < s->end && rx_class(rx, s->cps[e])) e++;
        }
        add_tok(s, m);          /* the gap before the match */
        add_tok(s, e);
        pos = e;
    }
    add_tok(s, s->end);
}

enum { P_GPT2 = 100, P_LLAMA3, P_QWEN2 };

static void run_pass(int pass, scan *s) {
    switch (pass) {
        case P_GPT2: scan_gpt2(s); break;
        case P_LLAMA3: scan_llama3(s, 3); break;
        case P_QWEN2: scan_llama3(s, 1); break;
        default: scan_regex(s, pass); break;
    }
}

/* cps[n] -> *lens[*n_lens] (malloc'd): word lengths in code points, in order. 0, or -1 when out of memory. */
int tok_pre_split(int32_t pre, const uint32_t *cps, int64_t n, int64_t **lens, int64_t *n_lens) {
    static const int lists[5][5] = {
        /* DEFAULT */ {RX_PUNCT_RUN, P_GPT2, RX_NUM_RUN, RX_DIGIT3, -1},
        /* GPT2    */ {P_GPT2, -1},
        /* LLAMA3  */ {P_LLAMA3, -1},
        /* QWEN2   */ {P_QWEN2, -1},
        /* SMOLLM  */ {RX_NUM_ONE, P_GPT2, -1},
    };
    lvec cur = {0}, nxt = {0};
    *lens = NULL; *n_lens = 0;
    if (n == 0) return 0;
    if (lvec_push(&cur, n)) return -1;
    for (int k = 0; k < 5 && lists[pre][k] >= 0; k++) {
        nxt.n = 0;
        scan s = { cps, 0, 0, 0, &nxt, 0 };
        int64_t start = 0;
        for (int64_t c = 0; c < cur.n; c++) {
            s.ini = start; s.end = start + cur.v[c]; s.prev = start;
            run_pass(lists[pre][k], &s);
            start = s.end;
        }
        if (s.fail) { free(cur.v); free(nxt.v); return -1; }
        lvec tmp = cur; cur = nxt; nxt = tmp;
    }
    free(nxt.v);
    *lens = cur.v; *n_lens = cur.n;
    return 0;
}
