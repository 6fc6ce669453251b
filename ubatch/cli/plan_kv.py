"""`ubatch plan --kv`: plan the synthetic batch through a planning-only Context (model=None) and show
where every row lands in the KV cache: per ubatch row its (stream, cell), then each stream's cells.

The split strategy is the memory's (memory.init_batch, the rule written once in ubatch/memory/protocol.py):
one unified stream -> split_simple; one stream per sequence -> split_equal(sequential=True, strict=False);
the two-cache memory (--n-swa) falls back from split_simple to split_equal when a cache refuses it. An
explicit --strategy (or split_equal option) that contradicts that choice is rejected (exit 2)."""
from __future__ import annotations

import sys
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ubatch.batch.ubatch_view import UBatch
from ubatch.batch.workload import layout_batch
from ubatch.common.errors import UbatchError
from ubatch.engine.context import Context
from ubatch.memory.protocol import SPLIT_NAMES, cache_split

CELLS_PER_STREAM = 256


def conflict(args) -> Optional[str]:
    """Why the split options cannot be honoured with --kv (None when they can)."""
    if not args.kv:
        return "--kv-unified, --n-ctx, --n-swa and --no-swa-full only apply with --kv"
    if args.n_swa < 0:
        return f"--n-swa must be >= 0, got {args.n_swa}"
    if args.no_swa_full and not args.n_swa:
        return "--no-swa-full needs --n-swa"
    if cache_split(1 if args.kv_unified else 2) == "simple":
        bad = [f"--strategy {args.strategy}"] if args.strategy not in (None, "simple") else []
        bad += [o for o, on in (("--sequential", args.sequential), ("--keep-tail", args.keep_tail),
                                ("--llama-exact", args.llama_exact)) if on]
        want = "a unified cache splits with split_simple"
    else:
        bad = [f"--strategy {args.strategy}"] if args.strategy not in (None, "equal") else []
        bad += ["--keep-tail"] if args.keep_tail else []
        want = "per-sequence streams split with split_equal(sequential, llama.cpp-exact)"
    if bad:
        return f"{', '.join(bad)} conflicts with --kv: {want}, as Context.decode does (drop the option)"
    return None


def strategy_name(ctx: Context) -> str:
    """The split the memory used for the last decode (before one: the one it tries first)."""
    split = ctx.last_split or cache_split(ctx.memory.n_stream)
    name = SPLIT_NAMES[split]
    return name[:-1] + ", llama.cpp-exact)" if name.endswith(")") else name + (", llama.cpp-exact" if split == "equal" else "")


def row_cells(ubs: Sequence[UBatch], placements) -> List[Tuple[np.ndarray, np.ndarray]]:
    """Per ubatch: (stream int32[n_tokens], cell int32[n_tokens]) of each ubatch row."""
    out = []
    for ub, (streams, cells) in zip(ubs, placements):
        per = cells.shape[1]
        out.append((np.repeat(streams, per)[: ub.n_tokens], cells.reshape(-1)[: ub.n_tokens]))
    return out


def format_ubatch_kv(k: int, ub: UBatch, streams: np.ndarray, cells: np.ndarray,
                     swa_cells: Optional[np.ndarray] = None) -> str:
    lines = [f"ubatch {k}: {ub.n_tokens} tokens = {ub.n_seqs} x {ub.n_seq_tokens} (n_seqs x n_seq_tokens), "
             f"seqs {ub.seq_id_unq.tolist()}"]
    for r in range(ub.n_tokens):
        swa = "" if swa_cells is None else f" | swa cell {int(swa_cells[r]):4d}"
        lines.append(f"  row {r:3d}: batch {int(ub.batch_idxs[r]):4d}  seqs {str(ub.seq_ids(r).tolist()):9s} "
                     f"pos {int(ub.pos[0, r]):4d}  -> stream {int(streams[r])} cell {int(cells[r]):4d}{swa}"
                     f"{'  output' if ub.output[r] else ''}")
    return "\n".join(lines)


def stream_runs(cells, where: Dict[Tuple[int, int], int], stream: int, width: int = 100) -> List[str]:
    """Compact cell table of one stream: one line per block of consecutive non-empty cells written by the
    same ubatch, 'u1 cells 4-7: s0:p1 s1:p1 s2:p1 s0:p2-3' (cells in index order; a run of one sequence
    set at consecutive positions is merged), wrapped at `width` characters."""
    blocks: List[list] = []          # [ubatch, first, last, entries [seqs, p0, p1]]
    for idx, pos, seqs in cells:
        u = where.get((stream, idx), -1)
        b = blocks[-1] if blocks else None
        if b is None or b[0] != u or idx != b[2] + 1:
            b = [u, idx, idx, []]
            blocks.append(b)
        b[2] = idx
        e = b[3][-1] if b[3] else None
        if e is not None and e[0] == seqs and pos == e[2] + 1:
            e[2] = pos
        else:
            b[3].append([seqs, pos, pos])
    out = []
    for u, a, z, entries in blocks:
        head = f"{'u' + str(u) if u >= 0 else 'u-'} cells {a if a == z else f'{a}-{z}'}:"
        items = [f"s{','.join(map(str, seqs))}:p{p0 if p0 == p1 else f'{p0}-{p1}'}" for seqs, p0, p1 in entries]
        line = head
        for it in items:
            if len(line) + 1 + len(it) > width and line != head:
                out.append(line)
                line = " " * len(head)
            line += " " + it
        out.append(line)
    return out


def kv_strips(ctx: Context, where: Dict[Tuple[int, int], int]) -> List[dict]:
    """What the picture draws per stream: size, used_max_p1 and (index, pos, seq ids, ubatch) per cell."""
    kv = ctx.memory
    return [{"stream": st, "size": kv.size, "used_max_p1": kv.used_max_p1(st), "head": kv.head(st),
             "cells": [(i, p, list(s), where.get((st, i), -1)) for i, p, s in kv.cells(st)]}
            for st in range(kv.n_stream)]


def run_kv(args) -> int:
    why = conflict(args)
    if why:
        print(f"ubatch plan: error: {why}", file=sys.stderr)
        return 2
    batch = layout_batch(args.seqs, args.layout, args.outputs, shared_prefix=args.shared_prefix)
    n_seqs = max(1, len(args.seqs))
    n_ctx = args.n_ctx if args.n_ctx is not None else CELLS_PER_STREAM * (1 if args.kv_unified else n_seqs)
    try:
        ctx = Context(None, n_ctx=n_ctx, n_batch=max(batch.n_tokens, args.n_ubatch, 1), n_ubatch=args.n_ubatch,
                      n_seq_max=n_seqs, kv_unified=args.kv_unified, n_swa=args.n_swa,
                      swa_full=not args.no_swa_full)
    except (TypeError, ValueError) as e:
        print(f"ubatch plan: error: {e}", file=sys.stderr)
        return 2
    kv = ctx.memory
    layout = "unified, 1 stream" if kv.n_stream == 1 else f"{kv.n_stream} per-seq streams"
    swa = (f"; sliding cache: {layout} x {ctx.n_ctx_swa} cells, window {ctx.n_swa}"
           f"{' (swa_full)' if ctx.swa_full else ''}" if ctx.n_swa else "")
    print(f"batch: {batch.n_tokens} tokens, {len(args.seqs)} seqs ({args.layout}); KV cache: n_ctx {ctx.n_ctx} "
          f"({layout} x {kv.size} cells){swa}; strategy {strategy_name(ctx)} (the cache's choice, as "
          f"Context.decode), n_ubatch {ctx.n_ubatch}")
    for w in ctx.warnings:
        print(f"note: {w}")
    if batch.n_tokens > ctx.n_batch:
        print(f"ubatch plan: error: the batch has {batch.n_tokens} tokens but n_batch is clamped to n_ctx = "
              f"{ctx.n_ctx}: raise --n-ctx", file=sys.stderr)
        return 1
    try:
        ctx.decode(batch)
    except UbatchError as e:
        print(f"ubatch plan: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    ubs = ctx.last_ubatches
    placed = row_cells(ubs, ctx.last_placements)
    placed_swa = row_cells(ubs, ctx.last_placements_swa) if ctx.n_swa else None
    fell_back = ctx.last_split != cache_split(kv.n_stream) and ctx.last_split != "seq"
    print(f"-> {len(ubs)} ubatches" + (f" (with {strategy_name(ctx)}: a cache refused the first split, the two-cache "
                                        f"memory's fallback)" if fell_back else ""))
    where: Dict[Tuple[int, int], int] = {}
    where_swa: Dict[Tuple[int, int], int] = {}
    for k, (ub, (streams, cells)) in enumerate(zip(ubs, placed)):
        print(format_ubatch_kv(k, ub, streams, cells, None if placed_swa is None else placed_swa[k][1]))
        where.update(((int(s), int(c)), k) for s, c in zip(streams, cells))
        if placed_swa is not None:
            where_swa.update(((int(s), int(c)), k) for s, c in zip(*placed_swa[k]))
    out_ids = [int(b) for ub in ubs for b in ub.batch_idxs[ub.output.astype(bool)]]
    print(f"out_ids: {out_ids}")
    print("KV cells (u = ubatch that wrote them; s = seq ids, p = positions, in cell order):")
    caches = [("", kv if not ctx.n_swa else kv.base, where)]
    if ctx.n_swa:
        caches = [("full cache ", kv.base, where), (f"sliding cache (window {ctx.n_swa}) ", kv.swa, where_swa)]
    for title, cache, w in caches:
        if title:
            print(f" {title.strip()}:")
        for st in range(cache.n_stream):
            runs = stream_runs(cache.cells(st), w, st)
            print(f"  stream {st}: {cache.used(st)}/{cache.size} used, head {cache.head(st)}" + ("" if runs else " (empty)"))
            for r in runs:
                print(f"    {r}")
    if args.png:
        return write_kv_png(args, batch, ubs, out_ids, ctx, where, placed)
    return 0


def write_kv_png(args, batch, ubs, out_ids, ctx: Context, where, placed) -> int:
    try:
        from ubatch.viz.plan_png import draw_plan
        import matplotlib  # noqa: F401
    except ImportError:
        from ubatch.viz.plan_png import PLOT_HINT
        print(f"ubatch plan: {PLOT_HINT}", file=sys.stderr)
        return 2
    seq_ids = [sorted(set(batch.seq_ids(i))) for i in range(batch.n_tokens)]
    kv = ctx.memory
    what = ("unified KV, split_simple" if kv.n_stream == 1
            else f"{kv.n_stream} KV streams, split_equal(sequential, llama.cpp-exact)")
    prefix = f", shared prefix {args.shared_prefix}" if args.shared_prefix else ""
    title = (f"{what}, n_ubatch {ctx.n_ubatch}: seqs of {','.join(map(str, args.seqs))} tokens "
             f"({args.layout}{prefix}, outputs {args.outputs})")
    draw_plan(args.png, batch_seq_ids=seq_ids, batch_pos=np.asarray(batch.pos), batch_output=np.asarray(batch.output),
              ubatches=ubs, out_ids=out_ids, n_ubatch=ctx.n_ubatch, title=title,
              kv=kv_strips(ctx, where), row_cells=placed)
    print(f"wrote {args.png}")
    return 0
