/* Per-sequence position maps of the KV cache (llama.cpp's seq_pos: one ordered map pos -> count per
 * sequence). Internal (not exported to Python).
 *
 * A sequence's map counts, for every position, how many of its cells hold it. Two representations:
 *  - dense: the map is exactly {min, ..., max}, each position once (what a sequence written token after
 *    token looks like): no nodes, every operation O(1) as long as it keeps that shape (append at max + 1,
 *    drop the max or the min: decoding, rewinding, the sliding window's eviction);
 *  - a counted treap in the cache's node pool: insert, remove, neighbours O(log n) expected.
 * An operation that breaks the dense shape first turns the map into a treap (O(n), once); kv_pm_densify,
 * called at the end of each cache operation, turns a treap that is dense again back (O(n), once). min and
 * max are cached, so seq_pos_min/max are O(1). Nothing ever scans the cells: the planning cost follows
 * the batch, not the size of the cache.
 *
 * Capacity: live nodes never exceed the number of (cell, sequence) pairs stored, so callers reserve room
 * for the pairs an operation may add (kv_pool_reserve) before changing anything; insertions and
 * conversions then never allocate, removal never allocates. */
#ifndef UB_KV_POSMAP_H
#define UB_KV_POSMAP_H

#include <stdint.h>

typedef struct kv_pnode {
    int32_t key, cnt, l, r;       /* position, cells of the sequence at it, children (-1 = none) */
} kv_pnode;

typedef struct kv_pool {
    kv_pnode *nodes;              /* [cap], owned; [high, cap) never used yet */
    int32_t cap, live, free_head, high;   /* free list of released nodes linked through .l */
} kv_pool;

/* One sequence: n entries (sum of counts) with cached bounds; dense (no nodes) or a treap (root, nd nodes). */
typedef struct kv_seqstat {
    int32_t n, min, max, root, nd, dense;
} kv_seqstat;

void kv_pool_free(kv_pool *p);
/* Makes room for n_more nodes beyond the live ones. 0 on success, -1 on OOM (nothing changed). */
int kv_pool_reserve(kv_pool *p, int64_t n_more);
/* Empties every map (the pool keeps its memory). */
void kv_pool_reset(kv_pool *p, kv_seqstat *stats, int32_t n_stats);

/* Adds one entry at position pos to t (room must be reserved). */
void kv_pm_add(kv_pool *p, kv_seqstat *t, int32_t pos);
/* Removes one entry at position pos from t (which must hold it). */
void kv_pm_remove(kv_pool *p, kv_seqstat *t, int32_t pos);
/* Back to the dense representation when the treap holds exactly {min..max} once each. */
void kv_pm_densify(kv_pool *p, kv_seqstat *t);

/* Smallest key >= pos, largest key < pos of t's map (-1 when none). */
int32_t kv_pm_ge(const kv_pool *p, const kv_seqstat *t, int32_t pos);
int32_t kv_pm_lt(const kv_pool *p, const kv_seqstat *t, int32_t pos);
/* 1 when t's map holds pos. */
int kv_pm_has(const kv_pool *p, const kv_seqstat *t, int32_t pos);
/* The smallest key of a's map in [lo, hi) that b's map lacks, or -1. */
int32_t kv_pm_first_missing(const kv_pool *pa, const kv_seqstat *a, const kv_pool *pb, const kv_seqstat *b,
                            int32_t lo, int32_t hi);

#endif
