/* Vocabulary storage: token texts in one blob, an open-addressing string table (exact bytes -> id, like
 * llama.cpp's token_to_id), BPE merge ranks, and ub_tok_finalize (special-token cache, piece cache). */
#include "tok_internal.h"
#include "tok_unicode.h"

static int64_t rd_u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return (int64_t)v; }

/* buf[buf_len]: GGUF bytes; walks count strings from offset; returns the end offset or -1 (truncated). */
int64_t ub_gguf_skip_strings(const uint8_t *buf, int64_t buf_len, int64_t offset, int64_t count) {
    if (!buf || offset < 0 || count < 0) return -1;
    for (int64_t i = 0; i < count; i++) {
        if (offset > buf_len - 8) return -1;
        int64_t n = rd_u64(buf + offset);
        offset += 8;
        if (n < 0 || n > buf_len - offset) return -1;
        offset += n;
    }
    return offset;
}

/* string table: slots[smask + 1] of string ids; grows at load 1/2 */
static int table_insert_slot(ub_tok *t, int32_t sid) {
    uint64_t h = tok_hash(t->blob + t->str_off[sid], t->str_len[sid]) & t->smask;
    while (t->slots[h] >= 0) h = (h + 1) & t->smask;
    t->slots[h] = sid;
    return 0;
}

static int table_grow(ub_tok *t) {
    uint64_t ncap = (t->smask + 1) * 2;
    int32_t *ns = (int32_t *)malloc(ncap * sizeof(int32_t));
    if (!ns) return -1;
    memset(ns, 0xFF, ncap * sizeof(int32_t));
    free(t->slots);
    t->slots = ns; t->smask = ncap - 1;
    for (int32_t i = 0; i < t->n_str; i++) table_insert_slot(t, i);
    return 0;
}

int32_t tok_lookup(const ub_tok *t, const uint8_t *text, int64_t n) {
    uint64_t h = tok_hash(text, n) & t->smask;
    for (;;) {
        int32_t sid = t->slots[h];
        if (sid < 0) return -1;
        if (t->str_len[sid] == n && memcmp(t->blob + t->str_off[sid], text, (size_t)n) == 0) return sid;
        h = (h + 1) & t->smask;
    }
}

/* Append a new string (no duplicate check) and index it; returns its id or -1 (out of memory). */
static int32_t add_string(ub_tok *t, const uint8_t *s, int64_t n) {
    if (n > INT32_MAX) return -1;
    if (t->n_str == t->cap_str) {
        int32_t nc = t->cap_str ? t->cap_str * 2 : 1024;
        int64_t *no = (int64_t *)realloc(t->str_off, (size_t)nc * sizeof(int64_t));
        if (!no) return -1;
        t->str_off = no;
        int32_t *nl = (int32_t *)realloc(t->str_len, (size_t)nc * sizeof(int32_t));
        if (!nl) return -1;
        t->str_len = nl; t->cap_str = nc;
    }
    if (t->blob_len + n > t->blob_cap) {
        int64_t nc = t->blob_cap ? t->blob_cap : 4096;
        while (nc < t->blob_len + n) nc *= 2;
        uint8_t *nb = (uint8_t *)realloc(t->blob, (size_t)nc);
        if (!nb) return -1;
        t->blob = nb; t->blob_cap = nc;
    }
    if ((uint64_t)(t->n_str + 1) * 2 > t->smask + 1 && table_grow(t) != 0) return -1;
    if (n) memcpy(t->blob + t->blob_len, s, (size_t)n);
    int32_t sid = t->n_str++;
    t->str_off[sid] = t->blob_len; t->str_len[sid] = (int32_t)n;
    t->blob_len += n;
    table_insert_slot(t, sid);
    return sid;
}

void ub_tok_free(ub_tok *t) {
    if (!t) return;
    free(t->blob); free(t->str_off); free(t->str_len); free(t->slots); free(t->scores); free(t->attrs);
    free(t->pkeys); free(t->pranks); free(t->special); free(t->special_rank); free(t->special_lens);
    free(t->pair2); free(t->pieces); free(t->piece_off);
    free(t);
}

/* See ub_tok.h. buf[buf_len] is borrowed for the call only. */
ub_tok *ub_tok_new(int32_t kind, const uint8_t *buf, int64_t buf_len, int64_t offset, int32_t n_tokens,
                   char *err, int32_t err_len) {
    char msg[256];
    if (kind != UB_TOK_SPM && kind != UB_TOK_BPE) { tok_err(err, err_len, "unknown vocabulary kind"); return NULL; }
    if (n_tokens <= 0) { tok_err(err, err_len, "tokenizer.ggml.tokens is empty"); return NULL; }
    if (ub_gguf_skip_strings(buf, buf_len, offset, n_tokens) < 0) {
        tok_err(err, err_len, "tokenizer.ggml.tokens runs past the end of the file"); return NULL;
    }
    ub_tok *t = (ub_tok *)calloc(1, sizeof(ub_tok));
    if (!t) goto oom;
    t->kind = kind; t->n_tokens = n_tokens;
    uint64_t cap = 1024;
    while (cap < (uint64_t)n_tokens * 3) cap *= 2;
    t->slots = (int32_t *)malloc(cap * sizeof(int32_t));
    t->scores = (float *)calloc((size_t)n_tokens, sizeof(float));
    t->attrs = (int32_t *)malloc((size_t)n_tokens * sizeof(int32_t));
    if (!t->slots || !t->scores || !t->attrs) goto oom;
    memset(t->slots, 0xFF, cap * sizeof(int32_t));
    t->smask = cap - 1;
    for (int32_t i = 0; i < n_tokens; i++) t->attrs[i] = UB_ATTR_NORMAL;
    int64_t off = offset;
    for (int32_t i = 0; i < n_tokens; i++) {
        int64_t n = rd_u64(buf + off);
        const uint8_t *s = buf + off + 8;
        off += 8 + n;
        uint8_t empty[32];
        if (n == 0) { n = snprintf((char *)empty, sizeof empty, "[EMPTY_%d]", (int)i); s = empty; }
        int32_t prev = tok_lookup(t, s, n);
        if (prev >= 0) {
            snprintf(msg, sizeof msg, "tokenizer.ggml.tokens: token %d has the same text as token %d", (int)i, (int)prev);
            tok_err(err, err_len, msg);
            ub_tok_free(t);
            return NULL;
        }
        if (add_string(t, s, n) != i) goto oom;
    }
    for (int i = 0; i < 256; i++) t->byte_tok[i] = t->single_byte_tok[i] = -1;
    return t;
oom:
    tok_err(err, err_len, "out of memory while loading the vocabulary");
    ub_tok_free(t);
    return NULL;
}

int32_t ub_tok_n_tokens(const ub_tok *t) { return t->n_tokens; }
int32_t *ub_tok_attrs(ub_tok *t) { return t->attrs; }
float *ub_tok_scores(ub_tok *t) { return t->scores; }

int32_t ub_tok_find(const ub_tok *t, const uint8_t *text, int64_t len) {
    if (!t || (!text && len) || len < 0) return -1;
    return tok_token(t, text, len);
}

int32_t ub_tok_text(const ub_tok *t, int32_t id, const uint8_t **text) {
    if (!t || id < 0 || id >= t->n_tokens) return -1;
    *text = t->blob + t->str_off[id];
    return t->str_len[id];
}

int32_t ub_tok_mark_unused(ub_tok *t) {
    int32_t n_unused = 0;
    for (int32_t i = 0; i < t->n_tokens; i++) {
        int32_t *a = &t->attrs[i];
        if (!(*a & UB_ATTR_CONTROL)) continue;
        if (!(*a & UB_ATTR_UNUSED)) {
            const uint8_t *s = t->blob + t->str_off[i];
            int32_t n = t->str_len[i];
            const void *nul = memchr(s, 0, (size_t)n);       /* strstr stops at a NUL byte */
            if (nul) n = (int32_t)((const uint8_t *)nul - s);
            for (int32_t k = 0; k + 6 <= n; k++)
                if (memcmp(s + k, "unused", 6) == 0) { *a |= UB_ATTR_UNUSED; break; }
        }
        if (*a & UB_ATTR_UNUSED) n_unused++;
    }
    return n_unused;
}

/* --- BPE merge ranks --- */
static uint64_t pair_hash(uint64_t key) { return (key * 0x9E3779B97F4A7C15ull) >> 17; }

int32_t tok_rank(const ub_tok *t, int32_t left, int32_t right) {
    if (!t->pkeys || left < 0 || right < 0) return -1;
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    uint64_t h = pair_hash(key) & t->pmask;
    for (;;) {
        if (t->pranks[h] < 0) return -1;
        if (t->pkeys[h] == key) return t->pranks[h];
        h = (h + 1) & t->pmask;
    }
}

static int32_t intern(ub_tok *t, const uint8_t *s, int64_t n) {
    int32_t sid = tok_lookup(t, s, n);
    return sid >= 0 ? sid : add_string(t, s, n);
}

int32_t ub_tok_set_merges(ub_tok *t, const uint8_t *buf, int64_t buf_len, int64_t offset, int64_t n_merges,
                          char *err, int32_t err_len) {
    if (t->finalized) { tok_err(err, err_len, "merges set after finalize"); return -1; }
    if (n_merges < 0 || n_merges > INT32_MAX || ub_gguf_skip_strings(buf, buf_len, offset, n_merges) < 0) {
        tok_err(err, err_len, "tokenizer.ggml.merges runs past the end of the file"); return -1;
    }
    uint64_t cap = 1024;
    while (cap < (uint64_t)n_merges * 2 + 2) cap *= 2;
    free(t->pkeys); free(t->pranks);
    t->pkeys = (uint64_t *)malloc(cap * sizeof(uint64_t));
    t->pranks = (int32_t *)malloc(cap * sizeof(int32_t));
    if (!t->pkeys || !t->pranks) goto oom;
    memset(t->pranks, 0xFF, cap * sizeof(int32_t));
    t->pmask = cap - 1; t->n_pairs = 0;
    int64_t off = offset;
    for (int64_t i = 0; i < n_merges; i++) {
        int64_t n = rd_u64(buf + off);
        const uint8_t *s = buf + off + 8;
        off += 8 + n;
        int64_t sp = -1;
        for (int64_t k = 1; k < n; k++) if (s[k] == ' ') { sp = k; break; }
        if (sp < 0) continue;             /* llama.cpp stores ("", ""): a pair no symbol can form */
        int32_t l = intern(t, s, sp);
        if (l < 0) goto oom;
        int32_t r = intern(t, s + sp + 1, n - sp - 1);
        if (r < 0) goto oom;
        uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
        uint64_t h = pair_hash(key) & t->pmask;
        while (t->pranks[h] >= 0 && t->pkeys[h] != key) h = (h + 1) & t->pmask;
        if (t->pranks[h] >= 0) continue;  /* duplicate pair: the first rank wins (emplace) */
        t->pkeys[h] = key; t->pranks[h] = (int32_t)i; t->n_pairs++;
    }
    return 0;
oom:
    tok_err(err, err_len, "out of memory while reading the merges");
    return -1;
}

/* --- finalize: special cache + piece cache --- */
static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int build_special_cache(ub_tok *t) {
    int64_t *keys = (int64_t *)malloc((size_t)t->n_tokens * sizeof(int64_t));
    t->special_rank = (int32_t *)malloc((size_t)t->n_tokens * sizeof(int32_t));
    t->pair2 = (uint8_t *)calloc(8192, 1);
    if (!keys || !t->special_rank || !t->pair2) { free(keys); return -1; }
    int32_t n = 0;
    for (int32_t i = 0; i < t->n_tokens; i++) {
        t->special_rank[i] = -1;
        if (t->attrs[i] & (UB_ATTR_CONTROL | UB_ATTR_USER_DEFINED | UB_ATTR_UNKNOWN))
            keys[n++] = ((int64_t)(INT32_MAX - t->str_len[i]) << 32) | i;   /* longest first, then id */
    }
    qsort(keys, (size_t)n, sizeof(int64_t), cmp_i64);
    t->special = (int32_t *)malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    t->special_lens = (int32_t *)malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    if (!t->special || !t->special_lens) { free(keys); return -1; }
    t->n_special = n; t->n_special_lens = 0;
    for (int32_t k = 0; k < n; k++) {
        int32_t id = (int32_t)(keys[k] & 0xFFFFFFFF);
        t->special[k] = id;
        t->special_rank[id] = k;
        int32_t len = t->str_len[id];
        const uint8_t *s = t->blob + t->str_off[id];
        if (t->n_special_lens == 0 || t->special_lens[t->n_special_lens - 1] != len)
            t->special_lens[t->n_special_lens++] = len;
        if (len == 1) t->first1[s[0] >> 3] |= (uint8_t)(1u << (s[0] & 7));
        else if (len >= 2) { unsigned p = ((unsigned)s[0] << 8) | s[1]; t->pair2[p >> 3] |= (uint8_t)(1u << (p & 7)); }
    }
    free(keys);
    return 0;
}

typedef struct { uint8_t *b; int64_t n, cap; } bvec;
static int bvec_put(bvec *v, const void *s, int64_t n) {
    if (n <= 0) return 0;
    if (v->n + n > v->cap) {
        int64_t nc = v->cap ? v->cap : 4096;
        while (nc < v->n + n) nc *= 2;
        uint8_t *nb = (uint8_t *)realloc(v->b, (size_t)nc);
        if (!nb) return -1;
        v->b = nb; v->cap = nc;
    }
    memcpy(v->b + v->n, s, (size_t)n);
    v->n += n;
    return 0;
}

static int hexval(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* token_to_byte: strtol(text.substr(3, 2), 16) */
static uint8_t byte_of_token(const uint8_t *s, int32_t n) {
    int v = 0;
    for (int32_t k = 3; k < 5 && k < n; k++) { int h = hexval(s[k]); if (h < 0) break; v = v * 16 + h; }
    return (uint8_t)v;
}

/* piece of one token with special = true (llama.cpp's token_to_piece without the cache) */
static int put_piece(const ub_tok *t, int32_t id, bvec *v) {
    const uint8_t *s = t->blob + t->str_off[id];
    int32_t n = t->str_len[id], a = t->attrs[id];
    if (a & (UB_ATTR_CONTROL | UB_ATTR_UNKNOWN | UB_ATTR_USER_DEFINED)) return bvec_put(v, s, n);
    if (a & UB_ATTR_NORMAL) {
        if (t->kind == UB_TOK_SPM) {          /* U+2581 -> ' ' */
            for (int32_t k = 0; k < n;) {
                if (k + 2 < n && s[k] == 0xE2 && s[k + 1] == 0x96 && s[k + 2] == 0x81) {
                    if (bvec_put(v, " ", 1)) return -1;
                    k += 3;
                } else {
                    if (bvec_put(v, s + k, 1)) return -1;
                    k++;
                }
            }
            return 0;
        }
        /* BPE: byte-level decode of each code point */
        size_t pos = 0;
        while (pos < (size_t)n) {
            uint32_t cp = utf8_decode_llama(s, (size_t)n, &pos);
            int b = bl_cp_to_byte(cp);
            if (b >= 0) { uint8_t c = (uint8_t)b; if (bvec_put(v, &c, 1)) return -1; continue; }
            uint8_t u[4];
            int ul = cp < UB_CPT_MAX ? utf8_encode(cp, u) : 0;
            char hex[16];
            if (bvec_put(v, "[UNK_BYTE_0x", 12)) return -1;
            for (int k = 0; k < ul; k++) {
                snprintf(hex, sizeof hex, "%02x", u[k]);
                if (bvec_put(v, hex, 2)) return -1;
            }
            if (bvec_put(v, s, n) || bvec_put(v, "]", 1)) return -1;
        }
        return 0;
    }
    if (a & UB_ATTR_BYTE) { uint8_t c = byte_of_token(s, n); return bvec_put(v, &c, 1); }
    return 0;
}

/* bytes put_piece writes for token id when it is a BPE NORMAL token (else 0), capped just above `cap`: 1 per
   byte-mapped code point, and per unmapped one "[UNK_BYTE_0x" + its UTF-8 in hex + the whole token text + "]"
   (llama.cpp's decode_text) -- quadratic in the token's length, hence the budget check in ub_tok_finalize */
static int64_t bpe_piece_size(const ub_tok *t, int32_t id, int64_t cap) {
    if (t->kind != UB_TOK_BPE) return 0;
    int32_t a = t->attrs[id];
    if ((a & (UB_ATTR_CONTROL | UB_ATTR_UNKNOWN | UB_ATTR_USER_DEFINED)) || !(a & UB_ATTR_NORMAL)) return 0;
    const uint8_t *s = t->blob + t->str_off[id];
    int32_t n = t->str_len[id];
    int64_t total = 0;
    size_t pos = 0;
    while (pos < (size_t)n && total <= cap) {
        uint32_t cp = utf8_decode_llama(s, (size_t)n, &pos);
        if (bl_cp_to_byte(cp) >= 0) { total += 1; continue; }
        uint8_t u[4];
        int ul = cp < UB_CPT_MAX ? utf8_encode(cp, u) : 0;
        total += 12 + 2 * (int64_t)ul + n + 1;
    }
    return total;
}

/* the piece cache may hold at most 16 bytes per byte of token text plus 16 MiB: a vocabulary whose pieces would
   need more (a long token of code points outside the byte-level alphabet) is refused naming its largest token */
static int check_piece_budget(const ub_tok *t, char *err, int32_t err_len) {
    int64_t text = 0;
    for (int32_t i = 0; i < t->n_tokens; i++) text += t->str_len[i];
    int64_t budget = 16 * text + ((int64_t)16 << 20), total = 0, worst = -1;
    int32_t worst_id = -1;
    for (int32_t i = 0; i < t->n_tokens; i++) {
        int64_t n = bpe_piece_size(t, i, budget);
        total += n > (int64_t)t->str_len[i] ? n : (int64_t)t->str_len[i];
        if (n > worst) { worst = n; worst_id = i; }
    }
    if (total <= budget) return 0;
    if (err && err_len > 0)
        snprintf(err, (size_t)err_len, "token %d (%d bytes of text with code points outside the byte-level "
                 "alphabet): the decoded pieces would exceed their budget of %lld bytes (16 per byte of "
                 "vocabulary text + 16 MiB)", (int)worst_id, (int)t->str_len[worst_id], (long long)budget);
    return -1;
}

int32_t ub_tok_finalize(ub_tok *t, const ub_tok_config *cfg, char *err, int32_t err_len) {
    if (t->finalized) { tok_err(err, err_len, "tokenizer already finalized"); return -1; }
    if (t->kind == UB_TOK_BPE && (cfg->pre < UB_PRE_DEFAULT || cfg->pre > UB_PRE_SMOLLM)) {
        tok_err(err, err_len, "unknown pre-tokenizer id"); return -1;
    }
    if (check_piece_budget(t, err, err_len)) return -1;
    t->cfg = *cfg;
    if (build_special_cache(t)) goto oom;
    bvec v = {0};
    t->piece_off = (int64_t *)malloc(((size_t)t->n_tokens + 1) * sizeof(int64_t));
    if (!t->piece_off) goto oom;
    for (int32_t i = 0; i < t->n_tokens; i++) {
        t->piece_off[i] = v.n;
        if (put_piece(t, i, &v)) { free(v.b); goto oom; }
    }
    t->piece_off[t->n_tokens] = v.n;
    t->pieces = v.b ? v.b : (uint8_t *)malloc(1);
    if (!t->pieces) goto oom;
    for (int b = 0; b < 256; b++) {
        char hx[8];
        snprintf(hx, sizeof hx, "<0x%02X>", b);
        uint8_t c = (uint8_t)b;
        int32_t one = tok_token(t, &c, 1);
        int32_t id = tok_token(t, (const uint8_t *)hx, 6);
        t->byte_tok[b] = id >= 0 ? id : one;
        t->single_byte_tok[b] = one;
    }
    t->finalized = 1;
    return 0;
oom:
    tok_err(err, err_len, "out of memory while building the tokenizer caches");
    return -1;
}
