/* The KQ mask of a placed ubatch (llama_kv_cache::set_input_kq_mask, without ALiBi). */
#include <math.h>
#include <stdlib.h>

#include "kv_internal.h"

/* Lists, for stream `base`'s cells [0, n_kv), the cells holding each seq id (CSR in off[257] and
 * kv->mlist, ascending cell order). */
static int seq_cell_lists(ub_kv *kv, int64_t base, int32_t n_kv, int32_t *off) {
    const int32_t *cpos = kv->pos + base;
    const uint64_t *cseq = kv->seq + base * UB_SEQ_WORDS;
    int32_t cnt[UB_MAX_SEQ] = {0};
    int64_t total = 0;
    for (int32_t j = 0; j < n_kv; j++) {
        if (cpos[j] < 0) continue;
        for (int w = 0; w < UB_SEQ_WORDS; w++) {
            uint64_t bits = cseq[(int64_t)j * UB_SEQ_WORDS + w];
            while (bits) {
                cnt[w * 64 + __builtin_ctzll(bits)]++;
                bits &= bits - 1;
                total++;
            }
        }
    }
    if (total > kv->mlist_cap) {
        int32_t *p = realloc(kv->mlist, (size_t)total * sizeof(int32_t));
        if (!p) return kv_fail(kv, UB_E_NOMEM, "out of memory (mask)");
        kv->mlist = p;
        kv->mlist_cap = total;
    }
    off[0] = 0;
    for (int s = 0; s < UB_MAX_SEQ; s++) off[s + 1] = off[s] + cnt[s];
    for (int s = 0; s < UB_MAX_SEQ; s++) cnt[s] = off[s];
    for (int32_t j = 0; j < n_kv; j++) {
        if (cpos[j] < 0) continue;
        for (int w = 0; w < UB_SEQ_WORDS; w++) {
            uint64_t bits = cseq[(int64_t)j * UB_SEQ_WORDS + w];
            while (bits) {
                kv->mlist[cnt[w * 64 + __builtin_ctzll(bits)]++] = j;
                bits &= bits - 1;
            }
        }
    }
    return UB_OK;
}

/* out float[ns*per*n_kv], caller-owned; row k*per + r of ub against cells 0..n_kv-1 of stream strm[k]
 * of plan slot i. A cell is visible (0.0f) iff it is non-empty, holds the row's PRIMARY seq (its
 * smallest id), and - when causal - its pos p0 <= the row's pos p1, with the 2-D M-RoPE tie rule for
 * p0 == p1 (hidden if cell.y > y1, or cell.y == y1 and cell.x > x1), and it is inside the SWA window
 * when one is configured. Everything else is -INFINITY. n_kv must be in 1..size.
 * Cost: groups of 1-2 rows scan their n_kv cells per row; larger groups first list each seq's cells in
 * one pass, then per row fill -inf and visit only the cells of the row's seq. */
int ub_kv_mask(ub_kv *kv, int32_t i, const ub_ubatch *ub, int32_t causal, float *out, int32_t n_kv) {
    if (i < 0 || i >= kv->plan_n) return kv_fail(kv, UB_E_ORDER, "mask: no planned slot %d", i);
    if (n_kv < 1 || n_kv > kv->size) return kv_fail(kv, UB_E_ARG, "mask: n_kv %d outside 1..%d", n_kv, kv->size);
    const int32_t ns = kv->plan_ns[i], per = kv->plan_per[i];
    if (!ub || ub->n_tokens != ns * per)
        return kv_fail(kv, UB_E_ARG, "mask: ubatch does not match planned slot %d", i);
    const int32_t *strm = kv->plan_data + kv->plan_off[i];
    const int32_t n = ub->n_tokens;
    const int is_2d = ub->n_pos >= 3;
    const int swa = kv->swa_type != UB_SWA_NONE;
    const float NEG = -INFINITY;
    int32_t off[UB_MAX_SEQ + 1];
    for (int32_t k = 0; k < ns; k++) {
        const int64_t base = (int64_t)strm[k] * kv->size;
        const int32_t *cpos = kv->pos + base;
        const int32_t *cext = kv->ext + 2 * base;
        if (per <= 2) {   /* few rows: scan the cells directly (building the lists would cost more) */
            const uint64_t *cseq = kv->seq + base * UB_SEQ_WORDS;
            for (int32_t r = 0; r < per; r++) {
                const int32_t row = k * per + r;
                float *o = out + (int64_t)row * n_kv;
                const int32_t s = ub->seq_id[ub->seq_off[row]];
                if (s < 0 || s >= UB_MAX_SEQ) return kv_fail(kv, UB_E_ARG, "mask: bad seq id %d in row %d", s, row);
                const int w = s >> 6;
                const uint64_t bit = (uint64_t)1 << (s & 63);
                const int32_t p1 = ub->pos[row];
                const int32_t y1 = is_2d ? ub->pos[row + n] : 0, x1 = is_2d ? ub->pos[row + 2 * n] : 0;
                for (int32_t j = 0; j < n_kv; j++) {
                    const int32_t p0 = cpos[j];
                    int vis = p0 >= 0 && (cseq[(int64_t)j * UB_SEQ_WORDS + w] & bit);
                    if (vis && causal) {
                        if (p0 > p1) vis = 0;
                        else if (is_2d && p0 == p1) {
                            const int32_t cx = cext[2 * j], cy = cext[2 * j + 1];
                            if (cy > y1 || (cy == y1 && cx > x1)) vis = 0;
                        }
                    }
                    if (vis && swa && kv_masked_swa(kv->swa_type, kv->n_swa, p0, p1)) vis = 0;
                    o[j] = vis ? 0.0f : NEG;
                }
            }
            continue;
        }
        int rc = seq_cell_lists(kv, base, n_kv, off);
        if (rc) return rc;
        for (int32_t r = 0; r < per; r++) {
            const int32_t row = k * per + r;
            float *o = out + (int64_t)row * n_kv;
            for (int32_t j = 0; j < n_kv; j++) o[j] = NEG;
            const int32_t s = ub->seq_id[ub->seq_off[row]];
            if (s < 0 || s >= UB_MAX_SEQ) return kv_fail(kv, UB_E_ARG, "mask: bad seq id %d in row %d", s, row);
            const int32_t p1 = ub->pos[row];
            const int32_t y1 = is_2d ? ub->pos[row + n] : 0, x1 = is_2d ? ub->pos[row + 2 * n] : 0;
            for (int32_t q = off[s]; q < off[s + 1]; q++) {
                const int32_t j = kv->mlist[q], p0 = cpos[j];
                if (causal) {
                    if (p0 > p1) continue;
                    if (is_2d && p0 == p1) {
                        const int32_t cx = cext[2 * j], cy = cext[2 * j + 1];
                        if (cy > y1 || (cy == y1 && cx > x1)) continue;
                    }
                }
                if (swa && kv_masked_swa(kv->swa_type, kv->n_swa, p0, p1)) continue;
                o[j] = 0.0f;
            }
        }
    }
    return UB_OK;
}
