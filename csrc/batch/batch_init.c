/* Batch allocator: init (validation + normalisation), docs/llama-cpp-behaviours.md §B3. The checks run in llama.cpp's
 * order: content types (Appendix A), V1-V3, F1-F4, S1-S3, C1-C3. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc_state.h"

/* Exact count of distinct section-0 positions of seq s (used only for seqs whose positions are not
 * non-decreasing in batch order). Returns -1 on OOM. */
static int64_t distinct_positions(const ub_norm *nb, int32_t s) {
    int32_t n = nb->n_tokens, m = 0;
    int32_t *buf = malloc(sizeof(int32_t) * (size_t)n);
    if (!buf) return -1;
    for (int32_t i = 0; i < n; i++)
        if (ub_set_has(nb->seq_set + (size_t)i * UB_SEQ_WORDS, s)) buf[m++] = nb->pos[i];
    int64_t d = ub_sort_unique(buf, m);
    free(buf);
    return d;
}

/* "a token id" / "an embedding" / "both" / "neither" for a row_kind byte */
static const char *kind_desc(uint8_t k) {
    return k == 1 ? "a token id" : k == 2 ? "an embedding" : k == 3 ? "both" : "neither";
}

#define FAIL(...) do { rc = ub_alloc_fail(a, UB_E_BATCH, __VA_ARGS__); goto done; } while (0)
#define NOMEM() do { rc = ub_alloc_fail(a, UB_E_NOMEM, "out of memory while initialising a batch of %d tokens", n); goto done; } while (0)

/* Validates and normalises batch b into a fresh ub_norm; installs it only on success (a failed init
 * leaves the allocator as it was). b's arrays are read, never kept. mem_min/mem_max: int32[n_seq_max]
 * or NULL. Messages follow llama.cpp's wording without the "init: " prefix. */
int ub_alloc_init(ub_alloc *a, const ub_batch_in *b, int32_t n_vocab, int32_t n_seq_max, int32_t output_all,
                  const int32_t *mem_min, const int32_t *mem_max) {
    if (!a) return UB_E_ARG;
    a->err[0] = 0;
    a->warn[0] = 0;
    if (!b) return ub_alloc_fail(a, UB_E_ARG, "no batch given");
    int32_t n = b->n_tokens;
    int rc = UB_OK;
    ub_norm *nb = NULL;
    if (n <= 0) return ub_alloc_fail(a, UB_E_BATCH, "n_tokens == 0: the batch is empty");
    if (n > UB_MAX_TOKENS)
        return ub_alloc_fail(a, UB_E_BATCH, "n_tokens = %d exceeds the limit of %d rows per batch", n, UB_MAX_TOKENS);
    /* V1 */
    if (n_seq_max > UB_MAX_SEQ) return ub_alloc_fail(a, UB_E_BATCH, "n_seq_max = %d > %d", n_seq_max, UB_MAX_SEQ);
    if (n_seq_max < 1) return ub_alloc_fail(a, UB_E_BATCH, "n_seq_max = %d < 1", n_seq_max);

    /* content types (Appendix A): every row must carry what row 0 carries */
    int has_token, has_embd;
    if (b->row_kind) {
        uint8_t k0 = b->row_kind[0];
        for (int32_t i = 1; i < n; i++)
            if (b->row_kind[i] != k0)
                return ub_alloc_fail(a, UB_E_BATCH, "all entries in the batch must have the same content types "
                                     "(row %d has %s, row 0 has %s)", i,
                                     kind_desc(b->row_kind[i]), kind_desc(k0));
        has_token = (k0 & 1) != 0;
        has_embd = (k0 & 2) != 0;
    } else {
        has_token = b->token != NULL;
        has_embd = b->embd != NULL;
    }
    if (!has_token && !has_embd) return ub_alloc_fail(a, UB_E_BATCH, "batch has neither token ids nor embeddings");
    if (has_token && !b->token) return ub_alloc_fail(a, UB_E_ARG, "token rows without a token array");
    if (has_embd && (!b->embd || b->n_embd <= 0))
        return ub_alloc_fail(a, UB_E_BATCH, "embedding rows need n_embd >= 1 (got %d)", b->n_embd);
    if (b->pos && (b->n_pos < 1 || b->pos_stride < n))
        return ub_alloc_fail(a, UB_E_ARG, "pos has %d sections with stride %d for %d tokens", b->n_pos, b->pos_stride, n);
    int32_t n_pos = a->n_pos_per_embd;
    if (!has_token) {
        if (b->pos && b->n_pos != n_pos)
            return ub_alloc_fail(a, UB_E_BATCH, "embedding batch has %d position section(s) per row, the allocator "
                                 "needs n_pos_per_embd = %d", b->n_pos, n_pos);
        if (!b->pos && n_pos > 1)
            return ub_alloc_fail(a, UB_E_BATCH, "an embedding batch for a model with %d position sections needs explicit "
                                 "positions (automatic positions only fill one section)", n_pos);
    }

    /* V2 */
    if (has_token && n_vocab >= 0)   /* n_vocab 0: every id is invalid (llama.cpp) */
        for (int32_t i = 0; i < n; i++)
            if (b->token[i] < 0 || b->token[i] >= n_vocab)
                return ub_alloc_fail(a, UB_E_BATCH, "invalid token[%d] = %d", i, b->token[i]);

    int64_t n_ids_in = b->seq_off ? (int64_t)b->seq_off[n] : n;
    if (n_ids_in < n) return ub_alloc_fail(a, UB_E_BATCH, "seq_off[%d] = %lld is smaller than the number of rows", n, (long long)n_ids_in);
    nb = a->spare ? a->spare : calloc(1, sizeof(*nb));
    if (!nb) NOMEM();
    a->spare = nb;     /* until success, the buffers stay the spare set: a failure changes nothing visible */
    if (!ub_norm_reserve(nb, (size_t)n, (size_t)n_ids_in, (size_t)n_pos, has_embd ? (size_t)b->n_embd : 0)) NOMEM();
    nb->n_tokens = n;
    nb->n_pos = n_pos;
    nb->n_seq_max = n_seq_max;
    nb->n_embd = has_embd ? b->n_embd : 0;
    nb->n_outputs = 0;
    nb->has_cpl = 0;
    nb->n_groups = 0;
    nb->groups_built = 0;
    memset(nb->present, 0, sizeof(nb->present));
    memset(nb->seq_set, 0, sizeof(uint64_t) * UB_SEQ_WORDS * (size_t)n);
    nb->token = has_token ? nb->token_buf : NULL;
    nb->embd = has_embd ? nb->embd_buf : NULL;

    /* normalise the seq ids (ascending sets), then V3 in that order */
    if (b->seq_off) {
        if (b->seq_off[0] != 0) FAIL("seq_off[0] = %d, expected 0", b->seq_off[0]);
        for (int32_t i = 0; i < n; i++) {
            int32_t k = b->seq_off[i + 1] - b->seq_off[i];
            if (k < 1) FAIL("row %d has no sequence id", i);
        }
        int32_t w = 0;
        int32_t *restrict dst_off = nb->seq_off, *restrict dst_id = nb->seq_id;
        uint64_t *restrict sets = nb->seq_set;
        const int32_t *restrict src_off = b->seq_off, *restrict src_id = b->seq_id;
        dst_off[0] = 0;
        for (int32_t i = 0; i < n; i++) {
            int32_t k = src_off[i + 1] - src_off[i];
            if (k == 1) {                    /* the common case: one id, nothing to sort */
                int32_t s = src_id[src_off[i]];
                if (s < 0 || s >= n_seq_max) FAIL("invalid seq_id[%d][%d] = %d >= %d", i, 0, s, n_seq_max);
                dst_id[w++] = s;
                sets[(size_t)i * UB_SEQ_WORDS + (s >> 6)] |= (uint64_t)1 << (s & 63);
                dst_off[i + 1] = w;
                continue;
            }
            if (i > 0 && k == src_off[i] - src_off[i - 1] &&
                !memcmp(src_id + src_off[i], src_id + src_off[i - 1], sizeof(int32_t) * (size_t)k)) {
                /* the same ids as the previous row (a shared prompt): reuse its normalised, checked set */
                int32_t k_prev = dst_off[i] - dst_off[i - 1];
                memcpy(dst_id + w, dst_id + dst_off[i - 1], sizeof(int32_t) * (size_t)k_prev);
                memcpy(sets + (size_t)i * UB_SEQ_WORDS, sets + (size_t)(i - 1) * UB_SEQ_WORDS, 8 * UB_SEQ_WORDS);
                w += k_prev;
                dst_off[i + 1] = w;
                continue;
            }
            memcpy(dst_id + w, src_id + src_off[i], sizeof(int32_t) * (size_t)k);
            k = ub_sort_unique(dst_id + w, k);
            for (int32_t j = 0; j < k; j++) {
                int32_t s = dst_id[w + j];
                if (s < 0 || s >= n_seq_max) FAIL("invalid seq_id[%d][%d] = %d >= %d", i, j, s, n_seq_max);
                ub_set_add(sets + (size_t)i * UB_SEQ_WORDS, s);
            }
            w += k;
            dst_off[i + 1] = w;
        }
    } else {   /* F1/F2: every row in seq 0 */
        for (int32_t i = 0; i < n; i++) {
            nb->seq_id[i] = 0;
            nb->seq_off[i + 1] = i + 1;
            nb->seq_set[(size_t)i * UB_SEQ_WORDS] = 1;
        }
        nb->seq_off[0] = 0;
    }

    /* token ids and embedding rows: owned copies */
    if (has_token) memcpy(nb->token, b->token, sizeof(int32_t) * (size_t)n);
    if (has_embd) memcpy(nb->embd, b->embd, sizeof(float) * (size_t)n * (size_t)b->n_embd);

    /* F3: positions, section-major [n_pos, n]; token rows broadcast section 0 */
    if (b->pos) {
        if (has_token) {
            for (int32_t j = 0; j < n_pos; j++) memcpy(nb->pos + (size_t)j * n, b->pos, sizeof(int32_t) * (size_t)n);
        } else {
            for (int32_t j = 0; j < n_pos; j++)
                memcpy(nb->pos + (size_t)j * n, b->pos + (size_t)j * b->pos_stride, sizeof(int32_t) * (size_t)n);
        }
    } else {
        int64_t p_next[UB_MAX_SEQ];
        for (int32_t s = 0; s < n_seq_max; s++) p_next[s] = mem_max ? (int64_t)mem_max[s] + 1 : 0;
        for (int32_t i = 0; i < n; i++) {
            int32_t s0 = nb->seq_id[nb->seq_off[i]];   /* primary = smallest id; only it advances */
            if (p_next[s0] > INT32_MAX) FAIL("automatic position of token %d (seq %d) overflows int32", i, s0);
            nb->pos[i] = (int32_t)p_next[s0];
            p_next[s0] = p_next[s0] + 1;
        }
        for (int32_t j = 1; j < n_pos; j++) memcpy(nb->pos + (size_t)j * n, nb->pos, sizeof(int32_t) * (size_t)n);
    }

    /* F4: output flags */
    if (!b->output) {
        for (int32_t i = 0; i < n; i++) nb->output[i] = output_all ? 1 : (i == n - 1);
    } else {
        int any_zero = 0;
        for (int32_t i = 0; i < n; i++) {
            nb->output[i] = b->output[i] != 0;
            any_zero |= !nb->output[i];
        }
        if (output_all && any_zero) {
            snprintf(a->warn, sizeof(a->warn),
                     "embeddings required but some input tokens were not marked as outputs -> overriding");
            memset(nb->output, 1, (size_t)n);
        }
    }

    /* S1/S2: outputs, per-seq ranges, coupling, monotonicity */
    uint64_t cpl[UB_MAX_SEQ][UB_SEQ_WORDS];
    memset(cpl, 0, sizeof(cpl));
    int32_t last[UB_MAX_SEQ];
    int64_t distinct[UB_MAX_SEQ];
    uint8_t monotone[UB_MAX_SEQ];
    for (int s = 0; s < UB_MAX_SEQ; s++) {
        nb->seq_pmin[s] = -1; nb->seq_pmax[s] = -1; distinct[s] = 0; monotone[s] = 1;
    }
    int32_t first_decreasing_tok = -1, first_decreasing_seq = -1;
    {
        const int32_t *restrict off = nb->seq_off, *restrict ids = nb->seq_id, *restrict pos0 = nb->pos;
        const int8_t *restrict outf = nb->output;
        int32_t pmin[UB_MAX_SEQ], pmax[UB_MAX_SEQ], n_out = 0, cpl_any = 0;
        uint64_t present[UB_SEQ_WORDS] = {0, 0, 0, 0};
        /* state of the current run of single-id rows of one seq, kept in registers */
        int32_t rs = -1, r_min = 0, r_max = 0, r_last = 0;
        int64_t r_distinct = 0;
#define FLUSH_RUN() do { if (rs >= 0) { pmin[rs] = r_min; pmax[rs] = r_max; last[rs] = r_last; \
                                        distinct[rs] = r_distinct; rs = -1; } } while (0)
        /* state of a run of multi-id rows with one and the same set (a shared prompt): every seq of the set
         * sees the same positions, so the run is tracked once and applied to each seq at its end */
        int32_t m_row = -1, m_min = 0, m_max = 0, m_last = 0, m_dec = 0;
        int64_t m_inc = 0;
#define FLUSH_MRUN() do { if (m_row >= 0) { \
            for (int32_t q = off[m_row]; q < off[m_row + 1]; q++) { int32_t sq = ids[q]; \
                pmin[sq] = m_min < pmin[sq] ? m_min : pmin[sq]; pmax[sq] = m_max > pmax[sq] ? m_max : pmax[sq]; \
                last[sq] = m_last; distinct[sq] += m_inc; monotone[sq] = m_dec ? 0 : monotone[sq]; } \
            m_row = -1; } } while (0)
        for (int32_t i = 0; i < n; i++) {
            n_out += outf[i];
            int32_t p = pos0[i];
            int32_t k0 = off[i], k1 = off[i + 1];
            if (k1 - k0 == 1) {
                int32_t s = ids[k0];
                if (m_row >= 0) FLUSH_MRUN();
                if (s != rs) {
                    FLUSH_RUN();
                    if (distinct[s] == 0) {     /* first row of s: start its range */
                        /* C3 starts every seq's running position at -1: a first pos < -1 decreases */
                        if (p < -1 && first_decreasing_tok < 0) { first_decreasing_tok = i; first_decreasing_seq = s; }
                        present[s >> 6] |= (uint64_t)1 << (s & 63);
                        rs = s; r_min = r_max = r_last = p; r_distinct = 1;
                        continue;
                    }
                    rs = s; r_min = pmin[s]; r_max = pmax[s]; r_last = last[s]; r_distinct = distinct[s];
                }
                if (p < r_min) r_min = p;
                if (p > r_max) r_max = p;
                if (p < r_last) {
                    monotone[s] = 0;
                    if (first_decreasing_tok < 0) { first_decreasing_tok = i; first_decreasing_seq = s; }
                } else if (p != r_last) {
                    r_distinct++;
                }
                r_last = p;
                continue;
            }
            FLUSH_RUN();
            cpl_any = 1;
            if (m_row >= 0 && ub_set_equal(nb->seq_set + (size_t)i * UB_SEQ_WORDS, nb->seq_set + (size_t)m_row * UB_SEQ_WORDS)) {
                if (p < m_min) m_min = p;
                if (p > m_max) m_max = p;
                if (p < m_last) {
                    m_dec = 1;
                    if (first_decreasing_tok < 0) { first_decreasing_tok = i; first_decreasing_seq = ids[k0]; }
                } else if (p != m_last) {
                    m_inc++;
                }
                m_last = p;
                continue;
            }
            FLUSH_MRUN();
            m_row = i; m_min = m_max = m_last = p; m_inc = 0; m_dec = 0;   /* this row is processed below */
            for (int32_t k = k0; k < k1; k++) {
                int32_t s = ids[k];
                if (k > k0) ub_set_add(cpl[ids[k0]], s);
                if (distinct[s] == 0) {
                    if (p < -1 && first_decreasing_tok < 0) { first_decreasing_tok = i; first_decreasing_seq = s; }
                    pmin[s] = pmax[s] = p;
                    distinct[s] = 1;
                    present[s >> 6] |= (uint64_t)1 << (s & 63);
                } else {
                    if (p < pmin[s]) pmin[s] = p;
                    if (p > pmax[s]) pmax[s] = p;
                    if (p < last[s]) {
                        monotone[s] = 0;
                        if (first_decreasing_tok < 0) { first_decreasing_tok = i; first_decreasing_seq = s; }
                    } else if (p != last[s]) {
                        distinct[s]++;
                    }
                }
                last[s] = p;
            }
        }
        FLUSH_RUN();
        FLUSH_MRUN();
#undef FLUSH_RUN
#undef FLUSH_MRUN
        for (int s = 0; s < UB_MAX_SEQ; s++)
            if (distinct[s]) { nb->seq_pmin[s] = pmin[s]; nb->seq_pmax[s] = pmax[s]; }
        memcpy(nb->present, present, sizeof(present));
        nb->n_outputs = n_out;
        nb->has_cpl = cpl_any;
    }

    /* S3: rows grouped by seq set: built lazily by the first split that needs them (split_simple never does) */

    /* C1: positions against the memory; continuity */
    for (int32_t s = 0; s < n_seq_max; s++) {
        if (!ub_set_has(nb->present, s)) continue;
        int32_t X = mem_max ? mem_max[s] : -1, Y = nb->seq_pmin[s];
        if (n_pos > 1) {
            if (X >= 0 && (has_token ? X >= Y : X > Y))
                FAIL("the tokens of sequence %d in the input batch have inconsistent sequence positions:\n"
                     " - the last position stored in the memory module of the context (i.e. the KV cache) for sequence %d is X = %d\n"
                     " - the tokens for sequence %d in the input batch have a starting position of Y = %d\n"
                     " for M-RoPE, it is required that the position satisfies: %s",
                     s, s, X, s, Y, has_token ? "X < Y" : "X <= Y");
            continue;
        }
        if (mem_max && X >= 0 && (int64_t)Y != (int64_t)X + 1)
            FAIL("the tokens of sequence %d in the input batch have inconsistent sequence positions:\n"
                 " - the last position stored in the memory module of the context (i.e. the KV cache) for sequence %d is X = %d\n"
                 " - the tokens for sequence %d in the input batch have a starting position of Y = %d\n"
                 " it is required that the sequence positions remain consecutive: Y = X + 1",
                 s, s, X, s, Y);
        int64_t d = monotone[s] ? distinct[s] : distinct_positions(nb, s);
        if (d < 0) NOMEM();
        if ((int64_t)nb->seq_pmax[s] - nb->seq_pmin[s] + 1 > d) FAIL("sequence %d positions are not continuous", s);
    }
    /* C2: coupled sequences must agree in the memory */
    if (mem_min && mem_max && nb->has_cpl) {
        for (int32_t s0 = 0; s0 < n_seq_max; s0++) {
            if (!ub_set_has(nb->present, s0)) continue;
            for (int w = 0; w < UB_SEQ_WORDS; w++) {
                for (uint64_t bits = cpl[s0][w]; bits; bits &= bits - 1) {
                    int32_t s1 = w * 64 + __builtin_ctzll(bits);
                    if (mem_min[s0] != mem_min[s1] || mem_max[s0] != mem_max[s1])
                        FAIL("sequence %d is coupled to %d in the input batch, but have divereged", s0, s1);
                }
            }
        }
    }
    /* C3: positions of a sequence must not decrease in batch order (the subset rule can never fire) */
    if (first_decreasing_tok >= 0) FAIL("sequence %d positions are decreasing (not allowed)", first_decreasing_seq);

done:
    if (rc != UB_OK) return rc;      /* nb stays the spare; a->cur is untouched */
    a->spare = a->cur;
    a->cur = nb;
    ub_norm_split_reset(nb);
    return UB_OK;
}

