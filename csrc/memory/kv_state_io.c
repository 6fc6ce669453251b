/* The KV cache's cell metadata to and from bytes (ub_kv_state.h). Layout, native byte order (little-endian
 * on the supported targets), every field int32 unless said:
 *   magic 'UBKV', version 1, n_stream, size, n_seq, n_copies, 0
 *   pos[n_cells], shift[n_cells], ext[2*n_cells], seq uint64[4*n_cells]   (n_cells = n_stream * size)
 *   head[n_stream], used[n_stream], used_max_p1[n_stream], has_shift[n_stream], copies[2*n_copies]
 * The per-sequence position maps are not stored: they are rebuilt from the cells on read. */
#include <stdlib.h>
#include <string.h>

#include "kv_internal.h"
#include "ub_kv_state.h"

#define KVS_MAGIC 0x564B4255u   /* "UBKV" */
#define KVS_VERSION 1
#define KVS_HEADER 28
#define KVS_MAX_COPIES (1 << 20)

static int64_t kvs_size(int64_t n_cells, int64_t n_stream, int64_t n_copies) {
    return KVS_HEADER + n_cells * (4 + 4 + 8 + 8 * UB_SEQ_WORDS) + n_stream * 16 + n_copies * 8;
}

/* kv: read only. Bytes of its serialised state. */
int64_t ub_kv_state_size(const ub_kv *kv) {
    return kv ? kvs_size(kv->n_cells, kv->n_stream, kv->n_copies) : -1;
}

static uint8_t *put(uint8_t *p, const void *src, size_t n) {
    if (n) memcpy(p, src, n);
    return p + n;
}

/* kv: read only; buf uint8[cap] caller-owned. Returns bytes written or -1 (cap too small / no kv). */
int64_t ub_kv_state_write(const ub_kv *kv, uint8_t *buf, int64_t cap) {
    if (!kv || !buf) return -1;
    int64_t need = ub_kv_state_size(kv);
    if (cap < need) return -1;
    int32_t hdr[7] = {(int32_t)KVS_MAGIC, KVS_VERSION, kv->n_stream, kv->size, kv->n_seq, kv->n_copies, 0};
    size_t nc = (size_t)kv->n_cells, ns = (size_t)kv->n_stream;
    uint8_t *p = put(buf, hdr, sizeof hdr);
    p = put(p, kv->pos, nc * 4);
    p = put(p, kv->shift, nc * 4);
    p = put(p, kv->ext, nc * 8);
    p = put(p, kv->seq, nc * 8 * UB_SEQ_WORDS);
    p = put(p, kv->head, ns * 4);
    p = put(p, kv->used, ns * 4);
    p = put(p, kv->used_max_p1, ns * 4);
    p = put(p, kv->has_shift, ns * 4);
    p = put(p, kv->copies, (size_t)kv->n_copies * 8);
    return (int64_t)(p - buf);
}

static int32_t rd32(const uint8_t *base, int64_t i) {
    int32_t v;
    memcpy(&v, base + 4 * i, 4);
    return v;
}

static uint64_t rd64(const uint8_t *base, int64_t i) {
    uint64_t v;
    memcpy(&v, base + 8 * i, 8);
    return v;
}

/* Checks every cell and stream of a serialised state against kv's geometry; *pairs = the (cell, sequence)
 * pairs it holds. UB_OK or UB_E_ARG with the message set. */
static int kvs_validate(ub_kv *kv, const uint8_t *cells, int32_t n_copies, int64_t *pairs) {
    int64_t nc = kv->n_cells, size = kv->size;
    const uint8_t *pos = cells, *shift = pos + nc * 4, *ext = shift + nc * 4, *seq = ext + nc * 8;
    const uint8_t *head = seq + nc * 8 * UB_SEQ_WORDS, *used = head + kv->n_stream * 4;
    const uint8_t *ump1 = used + kv->n_stream * 4, *hs = ump1 + kv->n_stream * 4, *cp = hs + kv->n_stream * 4;
    int64_t total = 0;
    for (int32_t st = 0; st < kv->n_stream; st++) {
        int32_t n_used = 0, last = -1;
        for (int64_t i = 0; i < size; i++) {
            int64_t g = st * size + i;
            int32_t p = rd32(pos, g);
            int n_bits = 0;
            for (int w = 0; w < UB_SEQ_WORDS; w++) {
                uint64_t word = rd64(seq, g * UB_SEQ_WORDS + w);
                for (int b = 0; word && b < 64; b++, word >>= 1) {
                    if (!(word & 1)) continue;
                    int32_t s = w * 64 + b;
                    if (s >= kv->n_seq || kv_seq_stream(kv, s) != st)
                        return kv_fail(kv, UB_E_ARG, "state: cell %lld holds sequence %d, which this cache "
                                       "cannot hold there", (long long)g, s);
                    n_bits++;
                }
            }
            if (p < -1) return kv_fail(kv, UB_E_ARG, "state: cell %lld has position %d", (long long)g, p);
            if (p == -1) {
                if (n_bits || rd32(shift, g) || rd32(ext, 2 * g) || rd32(ext, 2 * g + 1))
                    return kv_fail(kv, UB_E_ARG, "state: empty cell %lld carries data", (long long)g);
                continue;
            }
            if (!n_bits) return kv_fail(kv, UB_E_ARG, "state: cell %lld has no sequence", (long long)g);
            total += n_bits;
            n_used++;
            last = (int32_t)i;
        }
        int32_t h = rd32(head, st), u = rd32(used, st), m = rd32(ump1, st), f = rd32(hs, st);
        if (h < 0 || h >= size || u != n_used || m < last + 1 || m > size || (f != 0 && f != 1))
            return kv_fail(kv, UB_E_ARG, "state: stream %d's head/used/used_max_p1/has_shift (%d, %d, %d, %d) "
                           "do not match its cells", st, h, u, m, f);
    }
    for (int64_t i = 0; i < 2 * (int64_t)n_copies; i++) {
        int32_t s = rd32(cp, i);
        if (s < 0 || s >= kv->n_stream) return kv_fail(kv, UB_E_ARG, "state: queued copy names stream %d", s);
    }
    *pairs = total;
    return UB_OK;
}

/* kv: the cache to overwrite; buf uint8[n] caller-owned, read only. See ub_kv_state.h. */
int ub_kv_state_read(ub_kv *kv, const uint8_t *buf, int64_t n) {
    if (!kv) return UB_E_ARG;
    if (!buf || n < KVS_HEADER) return kv_fail(kv, UB_E_ARG, "state: %lld bytes is too short", (long long)n);
    if (kv->txn) return kv_fail(kv, UB_E_ORDER, "state: read inside a KV transaction");
    int32_t hdr[7];
    memcpy(hdr, buf, sizeof hdr);
    if ((uint32_t)hdr[0] != KVS_MAGIC || hdr[1] != KVS_VERSION)
        return kv_fail(kv, UB_E_ARG, "state: not a ubatch KV state (magic/version)");
    if (hdr[2] != kv->n_stream || hdr[3] != kv->size || hdr[4] != kv->n_seq)
        return kv_fail(kv, UB_E_ARG, "state: saved from a cache of %d streams x %d cells (%d sequences), this one "
                       "has %d x %d (%d)", hdr[2], hdr[3], hdr[4], kv->n_stream, kv->size, kv->n_seq);
    int32_t n_copies = hdr[5];
    if (n_copies < 0 || n_copies > KVS_MAX_COPIES)
        return kv_fail(kv, UB_E_ARG, "state: %d queued copies", n_copies);
    if (n != kvs_size(kv->n_cells, kv->n_stream, n_copies))
        return kv_fail(kv, UB_E_ARG, "state: %lld bytes, the header says %lld", (long long)n,
                       (long long)kvs_size(kv->n_cells, kv->n_stream, n_copies));
    const uint8_t *cells = buf + KVS_HEADER;
    int64_t pairs = 0;
    int rc = kvs_validate(kv, cells, n_copies, &pairs);
    if (rc != UB_OK) return rc;
    if (n_copies > kv->cap_copies) {
        int32_t *p = realloc(kv->copies, (size_t)n_copies * 8);
        if (!p) return kv_fail(kv, UB_E_NOMEM, "out of memory (copy queue)");
        kv->copies = p;
        kv->cap_copies = n_copies;
    }
    if (kv_pool_reserve(&kv->pool, pairs - kv->pool.live))
        return kv_fail(kv, UB_E_NOMEM, "out of memory (sequence position maps)");
    size_t nc = (size_t)kv->n_cells, ns = (size_t)kv->n_stream;
    const uint8_t *p = cells;
    memcpy(kv->pos, p, nc * 4); p += nc * 4;
    memcpy(kv->shift, p, nc * 4); p += nc * 4;
    memcpy(kv->ext, p, nc * 8); p += nc * 8;
    memcpy(kv->seq, p, nc * 8 * UB_SEQ_WORDS); p += nc * 8 * UB_SEQ_WORDS;
    memcpy(kv->head, p, ns * 4); p += ns * 4;
    memcpy(kv->used, p, ns * 4); p += ns * 4;
    memcpy(kv->used_max_p1, p, ns * 4); p += ns * 4;
    memcpy(kv->has_shift, p, ns * 4); p += ns * 4;
    if (n_copies) memcpy(kv->copies, p, (size_t)n_copies * 8);
    kv->n_copies = n_copies;
    kv_recompute_stats(kv);         /* cannot fail: the room is reserved */
    kv->plan_n = 0;
    kv->plan_len = 0;
    return UB_OK;
}
