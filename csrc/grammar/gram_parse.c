/* The GBNF parser: llama.cpp's llama_grammar_parser re-written in C with the same grammar of grammars, the same
 * rule elements and symbol ids (nested groups and repetitions become generated rules `name_N`), the same limits
 * (MAX_REPETITION_THRESHOLD = 2000) and the same error messages (their "at <rest>" cut to 40 bytes; the byte
 * offset is returned beside). The source is a NUL-terminated string that stays alive during the parse. */
#include "gram_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REP 2000

typedef struct { uint32_t value; const char *pos; } cpair;

/* Records the first error: msg, then "at " + up to 40 bytes of the source from `at` (at may be NULL). */
static void fail(gparser *p, const char *msg, const char *at) {
    if (p->failed) return;
    p->failed = 1;
    p->err_pos = at ? (int64_t)(at - p->src) : -1;
    if (!p->err || p->err_len <= 0) return;
    if (at) {
        size_t n = strlen(at);
        if (n > 40) n = 40;
        snprintf(p->err, (size_t)p->err_len, "%s%.*s", msg, (int)n, at);
    } else {
        snprintf(p->err, (size_t)p->err_len, "%s", msg);
    }
}

static int vec_push(gparser *p, gvec *v, uint32_t type, uint32_t value) {
    if (v->n == v->cap) {
        int64_t nc = v->cap ? 2 * v->cap : 16;
        gelem *na = realloc(v->a, (size_t)nc * sizeof(gelem));
        if (!na) { fail(p, "out of memory", NULL); return -1; }
        v->a = na; v->cap = nc;
    }
    v->a[v->n].type = type; v->a[v->n].value = value; v->n++;
    return 0;
}

/* ---- symbol table: std::map<string, uint32_t> semantics ---- */
static uint64_t hash_str(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) { h ^= (uint8_t)s[i]; h *= 1099511628211ull; }
    return h;
}

static int64_t sym_slot(const gparser *p, const char *s, size_t n) {
    if (!p->hcap) return -1;
    uint64_t m = (uint64_t)p->hcap - 1, h = hash_str(s, n) & m;
    for (;;) {
        int64_t k = p->hslot[h];
        if (k < 0) return -(int64_t)h - 2;   /* free slot h encoded */
        if (strlen(p->names[k]) == n && memcmp(p->names[k], s, n) == 0) return k;
        h = (h + 1) & m;
    }
}

static int sym_grow(gparser *p) {
    int64_t nc = p->hcap ? 2 * p->hcap : 64;
    int64_t *ns = malloc((size_t)nc * sizeof(int64_t));
    if (!ns) return -1;
    for (int64_t i = 0; i < nc; i++) ns[i] = -1;
    for (int64_t k = 0; k < p->n_names; k++) {
        uint64_t h = hash_str(p->names[k], strlen(p->names[k])) & (uint64_t)(nc - 1);
        while (ns[h] >= 0) h = (h + 1) & (uint64_t)(nc - 1);
        ns[h] = k;
    }
    free(p->hslot); p->hslot = ns; p->hcap = nc;
    return 0;
}

/* Inserts name -> id; overwrite: replace an existing entry's id (operator[]), else keep it (emplace).
 * Returns the id now mapped, or UINT32_MAX on out of memory. */
static uint32_t sym_put(gparser *p, const char *s, size_t n, int overwrite) {
    uint32_t next_id = (uint32_t)p->n_names;
    int64_t k = sym_slot(p, s, n);
    if (k >= 0) {
        if (overwrite) p->ids[k] = next_id;
        return p->ids[k];
    }
    if (2 * (p->n_names + 1) > p->hcap) { if (sym_grow(p)) goto oom; }
    if (p->n_names == p->cap_names) {
        int64_t nc = p->cap_names ? 2 * p->cap_names : 32;
        char **nn = realloc(p->names, (size_t)nc * sizeof(char *));
        if (!nn) goto oom;
        p->names = nn;
        uint32_t *ni = realloc(p->ids, (size_t)nc * sizeof(uint32_t));
        if (!ni) goto oom;
        p->ids = ni; p->cap_names = nc;
    }
    char *c = malloc(n + 1);
    if (!c) goto oom;
    memcpy(c, s, n); c[n] = 0;
    k = sym_slot(p, s, n);
    p->hslot[-k - 2] = p->n_names;
    p->names[p->n_names] = c; p->ids[p->n_names] = next_id; p->n_names++;
    return next_id;
oom:
    fail(p, "out of memory", NULL);
    return UINT32_MAX;
}

int64_t gram_symbol_find(const gparser *p, const char *name) {
    int64_t k = sym_slot(p, name, strlen(name));
    return k >= 0 ? (int64_t)p->ids[k] : -1;
}

static uint32_t generate_symbol_id(gparser *p, const char *base) {
    char buf[320];
    size_t bl = strlen(base);
    if (bl > 256) bl = 256;
    int n = snprintf(buf, sizeof buf, "%.*s_%u", (int)bl, base, (unsigned)p->n_names);
    return sym_put(p, buf, (size_t)n, 1);
}

static int add_rule(gparser *p, uint32_t id, gvec *rule) {
    if ((int64_t)id >= p->n_rules) {
        if ((int64_t)id >= p->cap_rules) {
            int64_t nc = p->cap_rules ? 2 * p->cap_rules : 16;
            while (nc <= (int64_t)id) nc *= 2;
            gvec *nr = realloc(p->rules, (size_t)nc * sizeof(gvec));
            if (!nr) { fail(p, "out of memory", NULL); return -1; }
            memset(nr + p->cap_rules, 0, (size_t)(nc - p->cap_rules) * sizeof(gvec));
            p->rules = nr; p->cap_rules = nc;
        }
        p->n_rules = (int64_t)id + 1;
    }
    free(p->rules[id].a);
    p->rules[id] = *rule;          /* takes ownership */
    rule->a = NULL; rule->n = rule->cap = 0;
    return 0;
}

/* ---- lexical helpers (llama.cpp's) ---- */
static int is_digit(char c) { return '0' <= c && c <= '9'; }
static int is_word(char c) { return ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || c == '-' || is_digit(c); }

static const char *parse_space(const char *pos, int newline_ok) {
    while (*pos == ' ' || *pos == '\t' || *pos == '#' || (newline_ok && (*pos == '\r' || *pos == '\n'))) {
        if (*pos == '#') { while (*pos && *pos != '\r' && *pos != '\n') pos++; }
        else pos++;
    }
    return pos;
}

static const char *parse_name(gparser *p, const char *src) {
    const char *pos = src;
    while (is_word(*pos)) pos++;
    if (pos == src) { fail(p, "expecting name at ", src); return NULL; }
    return pos;
}

static const char *parse_int(gparser *p, const char *src) {
    const char *pos = src;
    while (is_digit(*pos)) pos++;
    if (pos == src) { fail(p, "expecting integer at ", src); return NULL; }
    return pos;
}

/* std::stoull of digits [a, b): 0 ok, -1 on overflow ("stoull" / "stoul", as std::out_of_range says). */
static int to_u64(const char *a, const char *b, uint64_t *out) {
    uint64_t v = 0;
    for (const char *q = a; q < b; q++) {
        uint64_t d = (uint64_t)(*q - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

static cpair decode_utf8_1(const char *src) {
    static const int lookup[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    uint8_t first = (uint8_t)*src;
    int len = lookup[first >> 4];
    uint8_t mask = (uint8_t)((1 << (8 - len)) - 1);
    uint32_t value = first & mask;
    const char *end = src + len, *pos = src + 1;
    for (; pos < end && *pos; pos++) value = (value << 6) + ((uint8_t)*pos & 0x3F);
    cpair r = {value, pos};
    return r;
}

static cpair parse_hex(gparser *p, const char *src, int size) {
    const char *pos = src, *end = src + size;
    uint32_t value = 0;
    for (; pos < end && *pos; pos++) {
        value <<= 4;
        char c = *pos;
        if ('a' <= c && c <= 'f') value += (uint32_t)(c - 'a' + 10);
        else if ('A' <= c && c <= 'F') value += (uint32_t)(c - 'A' + 10);
        else if ('0' <= c && c <= '9') value += (uint32_t)(c - '0');
        else break;
    }
    cpair r = {value, pos};
    if (pos != end) {
        char msg[64];
        snprintf(msg, sizeof msg, "expecting %d hex chars at ", size);
        fail(p, msg, src);
        r.pos = NULL;
    }
    return r;
}

static cpair parse_char(gparser *p, const char *src) {
    cpair r = {0, NULL};
    if (*src == '\\') {
        switch (src[1]) {
            case 'x': return parse_hex(p, src + 2, 2);
            case 'u': return parse_hex(p, src + 2, 4);
            case 'U': return parse_hex(p, src + 2, 8);
            case 't': r.value = '\t'; r.pos = src + 2; return r;
            case 'r': r.value = '\r'; r.pos = src + 2; return r;
            case 'n': r.value = '\n'; r.pos = src + 2; return r;
            case '\\': case '"': case '[': case ']': case '-':
                r.value = (uint8_t)src[1]; r.pos = src + 2; return r;
            default:
                fail(p, "unknown escape at ", src);
                return r;
        }
    } else if (*src) {
        return decode_utf8_1(src);
    }
    fail(p, "unexpected end of input", NULL);
    p->err_pos = (int64_t)(src - p->src);
    return r;
}

/* <[id]> or <text> (text resolved by tokenizing it with parse_special: exactly one token). */
static cpair parse_token(gparser *p, const char *src) {
    cpair r = {0, NULL};
    const char *pos = src;
    if (*pos != '<') { fail(p, "expecting '<' at ", pos); return r; }
    pos++;
    if (*pos == '[') {
        pos++;
        const char *ie = parse_int(p, pos);
        if (!ie) return r;
        uint64_t id;
        if (to_u64(pos, ie, &id)) { fail(p, "stoul", NULL); p->err_pos = (int64_t)(pos - p->src); return r; }
        if (id > UINT32_MAX) { fail(p, "parsed token id is too big at ", pos); return r; }
        pos = ie;
        if (*pos != ']') { fail(p, "expecting ']' at ", pos); return r; }
        pos++;
        if (*pos != '>') { fail(p, "expecting '>' at ", pos); return r; }
        pos++;
        r.value = (uint32_t)id; r.pos = pos;
        return r;
    }
    if (!p->tok && !p->syntax_only) { fail(p, "no vocab to parse token at ", src); return r; }
    while (*pos != 0 && *pos != '>') pos++;
    if (*pos != '>') { fail(p, "expecting '>' at ", pos); return r; }
    pos++;
    if (p->syntax_only) { r.pos = pos; return r; }
    int32_t ids[2];
    char e[128];
    int64_t n = ub_tok_encode(p->tok, (const uint8_t *)src, (int64_t)(pos - src), 0, 1, ids, 2, e, sizeof e);
    if (n != 1) {
        char msg[200];
        int tl = (int)(pos - src);
        snprintf(msg, sizeof msg, "invalid token '%.*s'", tl > 150 ? 150 : tl, src);
        fail(p, msg, NULL);
        p->err_pos = (int64_t)(src - p->src);
        return r;
    }
    r.value = (uint32_t)ids[0]; r.pos = pos;
    return r;
}

static const char *parse_alternates(gparser *p, const char *src, const char *rule_name, uint32_t rule_id,
                                    int nested);

/* handle_repetitions of llama.cpp: rewrites rule[last_sym_start..] as S{min,max} (max = UINT64_MAX: none). */
static int repeat(gparser *p, gvec *rule, int64_t last_sym_start, uint64_t *n_prev_rules, uint64_t min_times,
                  uint64_t max_times, const char *rule_name, const char *pos) {
    int no_max = max_times == UINT64_MAX;
    if (last_sym_start == rule->n) { fail(p, "expecting preceding item to */+/?/{ at ", pos); return -1; }
    int64_t plen = rule->n - last_sym_start;
    gelem *prev = malloc((size_t)(plen > 0 ? plen : 1) * sizeof(gelem));
    if (!prev) { fail(p, "out of memory", NULL); return -1; }
    memcpy(prev, rule->a + last_sym_start, (size_t)plen * sizeof(gelem));
    uint64_t total = 1;
    if (!no_max && max_times > 0) total = max_times;
    else if (min_times > 0) total = min_times;
    if (*n_prev_rules * total > MAX_REP) {
        free(prev);
        fail(p, "number of rules that are going to be repeated multiplied by the new repetition exceeds sane "
                "defaults, please reduce the number of repetitions or rule complexity", NULL);
        return -1;
    }
    if (min_times == 0) rule->n = last_sym_start;
    else for (uint64_t i = 1; i < min_times; i++)
        for (int64_t j = 0; j < plen; j++)
            if (vec_push(p, rule, prev[j].type, prev[j].value)) { free(prev); return -1; }
    uint32_t last_rec = 0;
    uint64_t n_opt = no_max ? 1 : max_times - min_times;
    for (uint64_t i = 0; i < n_opt; i++) {
        gvec rec = {0, 0, 0};
        for (int64_t j = 0; j < plen; j++)
            if (vec_push(p, &rec, prev[j].type, prev[j].value)) { free(rec.a); free(prev); return -1; }
        uint32_t rec_id = generate_symbol_id(p, rule_name);
        if (rec_id == UINT32_MAX) { free(rec.a); free(prev); return -1; }
        if ((i > 0 || no_max) && vec_push(p, &rec, UB_GRE_RULE_REF, no_max ? rec_id : last_rec)) {
            free(rec.a); free(prev); return -1;
        }
        if (vec_push(p, &rec, UB_GRE_ALT, 0) || vec_push(p, &rec, UB_GRE_END, 0) || add_rule(p, rec_id, &rec)) {
            free(rec.a); free(prev); return -1;
        }
        last_rec = rec_id;
    }
    free(prev);
    if (n_opt > 0 && vec_push(p, rule, UB_GRE_RULE_REF, last_rec)) return -1;
    *n_prev_rules *= total;
    return 0;
}

static const char *parse_sequence(gparser *p, const char *src, const char *rule_name, gvec *rule, int nested) {
    int64_t last_sym_start = rule->n;
    const char *pos = src;
    uint64_t n_prev_rules = 1;
    while (*pos) {
        if (*pos == '"') {
            pos++;
            last_sym_start = rule->n;
            n_prev_rules = 1;
            while (*pos != '"') {
                if (!*pos) { fail(p, "unexpected end of input", NULL); p->err_pos = (int64_t)(pos - p->src); return NULL; }
                cpair c = parse_char(p, pos);
                if (!c.pos) return NULL;
                pos = c.pos;
                if (vec_push(p, rule, UB_GRE_CHAR, c.value)) return NULL;
            }
            pos = parse_space(pos + 1, nested);
        } else if (*pos == '[') {
            pos++;
            uint32_t start_type = UB_GRE_CHAR;
            if (*pos == '^') { pos++; start_type = UB_GRE_CHAR_NOT; }
            last_sym_start = rule->n;
            n_prev_rules = 1;
            while (*pos != ']') {
                if (!*pos) { fail(p, "unexpected end of input", NULL); p->err_pos = (int64_t)(pos - p->src); return NULL; }
                cpair c = parse_char(p, pos);
                if (!c.pos) return NULL;
                pos = c.pos;
                uint32_t type = last_sym_start < rule->n ? UB_GRE_CHAR_ALT : start_type;
                if (vec_push(p, rule, type, c.value)) return NULL;
                if (pos[0] == '-' && pos[1] != ']') {
                    if (!pos[1]) { fail(p, "unexpected end of input", NULL); p->err_pos = (int64_t)(pos + 1 - p->src); return NULL; }
                    cpair e = parse_char(p, pos + 1);
                    if (!e.pos) return NULL;
                    pos = e.pos;
                    if (vec_push(p, rule, UB_GRE_CHAR_RNG_UPPER, e.value)) return NULL;
                }
            }
            pos = parse_space(pos + 1, nested);
        } else if (*pos == '<' || *pos == '!') {
            uint32_t type = UB_GRE_TOKEN;
            if (*pos == '!') { type = UB_GRE_TOKEN_NOT; pos++; }
            cpair t = parse_token(p, pos);
            if (!t.pos) return NULL;
            last_sym_start = rule->n;
            n_prev_rules = 1;
            if (vec_push(p, rule, type, t.value)) return NULL;
            pos = parse_space(t.pos, nested);
        } else if (is_word(*pos)) {
            const char *ne = parse_name(p, pos);
            if (!ne) return NULL;
            uint32_t ref = sym_put(p, pos, (size_t)(ne - pos), 0);
            if (ref == UINT32_MAX) return NULL;
            pos = parse_space(ne, nested);
            last_sym_start = rule->n;
            n_prev_rules = 1;
            if (vec_push(p, rule, UB_GRE_RULE_REF, ref)) return NULL;
        } else if (*pos == '(') {
            pos = parse_space(pos + 1, 1);
            uint32_t before = (uint32_t)p->n_names;
            uint32_t sub = generate_symbol_id(p, rule_name);
            if (sub == UINT32_MAX) return NULL;
            pos = parse_alternates(p, pos, rule_name, sub, 1);
            if (!pos) return NULL;
            uint32_t grown = (uint32_t)p->n_names - before;
            n_prev_rules = grown > 1 ? grown : 1;
            last_sym_start = rule->n;
            if (vec_push(p, rule, UB_GRE_RULE_REF, sub)) return NULL;
            if (*pos != ')') { fail(p, "expecting ')' at ", pos); return NULL; }
            pos = parse_space(pos + 1, nested);
        } else if (*pos == '.') {
            last_sym_start = rule->n;
            n_prev_rules = 1;
            if (vec_push(p, rule, UB_GRE_CHAR_ANY, 0)) return NULL;
            pos = parse_space(pos + 1, nested);
        } else if (*pos == '*' || *pos == '+' || *pos == '?') {
            char op = *pos;
            pos = parse_space(pos + 1, nested);
            uint64_t mn = op == '+' ? 1 : 0, mx = op == '?' ? 1 : UINT64_MAX;
            if (repeat(p, rule, last_sym_start, &n_prev_rules, mn, mx, rule_name, pos)) return NULL;
        } else if (*pos == '{') {
            pos = parse_space(pos + 1, nested);
            if (!is_digit(*pos)) { fail(p, "expecting an int at ", pos); return NULL; }
            const char *ie = parse_int(p, pos);
            uint64_t min_times, max_times = UINT64_MAX;
            if (to_u64(pos, ie, &min_times)) { fail(p, "stoull", NULL); p->err_pos = (int64_t)(pos - p->src); return NULL; }
            pos = parse_space(ie, nested);
            if (*pos == '}') {
                max_times = min_times;
                pos = parse_space(pos + 1, nested);
            } else if (*pos == ',') {
                pos = parse_space(pos + 1, nested);
                if (is_digit(*pos)) {
                    const char *je = parse_int(p, pos);
                    if (to_u64(pos, je, &max_times)) { fail(p, "stoull", NULL); p->err_pos = (int64_t)(pos - p->src); return NULL; }
                    pos = parse_space(je, nested);
                }
                if (*pos != '}') { fail(p, "expecting '}' at ", pos); return NULL; }
                pos = parse_space(pos + 1, nested);
            } else {
                fail(p, "expecting ',' at ", pos);
                return NULL;
            }
            if (min_times > MAX_REP) {
                fail(p, "number of repetitions exceeds sane defaults, please reduce the number of repetitions", NULL);
                p->err_pos = (int64_t)(pos - p->src);
                return NULL;
            }
            if (max_times != UINT64_MAX && max_times > MAX_REP) max_times = UINT64_MAX;
            if (repeat(p, rule, last_sym_start, &n_prev_rules, min_times, max_times, rule_name, pos)) return NULL;
        } else {
            break;
        }
    }
    return pos;
}

static const char *parse_alternates(gparser *p, const char *src, const char *rule_name, uint32_t rule_id,
                                    int nested) {
    gvec rule = {0, 0, 0};
    const char *pos = parse_sequence(p, src, rule_name, &rule, nested);
    while (pos && *pos == '|') {
        if (vec_push(p, &rule, UB_GRE_ALT, 0)) { pos = NULL; break; }
        pos = parse_space(pos + 1, 1);
        pos = parse_sequence(p, pos, rule_name, &rule, nested);
    }
    if (pos && (vec_push(p, &rule, UB_GRE_END, 0) || add_rule(p, rule_id, &rule))) pos = NULL;
    free(rule.a);
    return pos;
}

static const char *parse_rule(gparser *p, const char *src) {
    const char *ne = parse_name(p, src);
    if (!ne) return NULL;
    const char *pos = parse_space(ne, 0);
    size_t nl = (size_t)(ne - src);
    uint32_t id = sym_put(p, src, nl, 0);
    if (id == UINT32_MAX) return NULL;
    char *name = malloc(nl + 1);
    if (!name) { fail(p, "out of memory", NULL); return NULL; }
    memcpy(name, src, nl); name[nl] = 0;
    if (!(pos[0] == ':' && pos[1] == ':' && pos[2] == '=')) { free(name); fail(p, "expecting ::= at ", pos); return NULL; }
    pos = parse_space(pos + 3, 1);
    pos = parse_alternates(p, pos, name, id, 0);
    free(name);
    if (!pos) return NULL;
    if (*pos == '\r') pos += pos[1] == '\n' ? 2 : 1;
    else if (*pos == '\n') pos++;
    else if (*pos) { fail(p, "expecting newline or end at ", pos); return NULL; }
    return parse_space(pos, 1);
}

/* Name of symbol id (the first in the map's order: std::map iterates names ascending), or NULL. */
static const char *name_of(const gparser *p, uint32_t id) {
    const char *best = NULL;
    for (int64_t k = 0; k < p->n_names; k++)
        if (p->ids[k] == id && (!best || strcmp(p->names[k], best) < 0)) best = p->names[k];
    return best;
}

int gram_parse(gparser *p, const char *src) {
    p->src = src;
    const char *pos = parse_space(src, 1);
    while (pos && *pos) pos = parse_rule(p, pos);
    if (!pos) return -1;
    for (int64_t r = 0; r < p->n_rules; r++) {
        if (p->rules[r].n == 0) { fail(p, "Undefined rule", NULL); return -1; }
        for (int64_t i = 0; i < p->rules[r].n; i++) {
            gelem e = p->rules[r].a[i];
            if (e.type != UB_GRE_RULE_REF) continue;
            if ((int64_t)e.value >= p->n_rules || p->rules[e.value].n == 0) {
                const char *nm = name_of(p, e.value);
                if (nm) {
                    char msg[400];
                    snprintf(msg, sizeof msg, "Undefined rule identifier '%.300s'", nm);
                    fail(p, msg, NULL);
                    return -1;
                }
            }
        }
    }
    return 0;
}

void gram_parser_free(gparser *p) {
    for (int64_t r = 0; r < p->n_rules; r++) free(p->rules[r].a);
    free(p->rules);
    for (int64_t k = 0; k < p->n_names; k++) free(p->names[k]);
    free(p->names); free(p->ids); free(p->hslot);
    memset(p, 0, sizeof *p);
}
