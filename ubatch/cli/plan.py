"""`ubatch plan`: split one synthetic batch and print every ubatch, row by row."""
from __future__ import annotations

import argparse
import sys
from typing import List

from ubatch.batch.allocator import BatchAllocator
from ubatch.batch.ubatch_view import UBatch
from ubatch.batch.workload import layout_batch


def parse_lengths(text: str) -> List[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seqs takes comma-separated lengths such as 5,5,5,1, got {text!r}")


def add_parser(sub) -> None:
    p = sub.add_parser("plan", help="split one batch and print its ubatches",
                       description="Split a synthetic batch (sequence lengths, layout) with one strategy and print "
                                   "each ubatch: shape, rows (batch index, seq ids, pos, output), then out_ids.")
    p.add_argument("--seqs", type=parse_lengths, default=[5, 5, 5, 1], help="tokens per sequence (default 5,5,5,1)")
    p.add_argument("--layout", choices=["contiguous", "interleaved"], default="contiguous")
    p.add_argument("--shared-prefix", type=int, default=0, help="tokens shared by every sequence, first")
    p.add_argument("--n-ubatch", type=int, default=8)
    p.add_argument("--strategy", choices=["simple", "equal", "seq"], default=None,
                   help="split strategy (default equal); with --kv the cache chooses and a conflicting choice is an error")
    p.add_argument("--sequential", action="store_true", help="split_equal: consecutive seq ids only")
    p.add_argument("--keep-tail", type=int, default=0, help="split_equal: n_keep_tail")
    p.add_argument("--llama-exact", action="store_true", help="split_equal strict=False (llama.cpp's n_ubatch+1 overflow)")
    p.add_argument("--outputs", choices=["last", "all"], default="last")
    p.add_argument("--png", metavar="FILE", default=None,
                   help="also draw the split: batch rows coloured by sequence, grouped into ubatches (needs matplotlib)")
    p.add_argument("--kv", action="store_true",
                   help="plan through a planning-only Context (model=None) and show the KV cell of every row: the "
                        "strategy is then the cache's (per-seq streams: split_equal sequential, llama.cpp-exact; "
                        "--kv-unified: split_simple), as Context.decode does")
    p.add_argument("--kv-unified", action="store_true", help="with --kv: one stream shared by all sequences")
    p.add_argument("--n-ctx", type=int, default=None,
                   help="with --kv: context size (padded to 256; per-seq streams get n_ctx / n_seqs each); "
                        "default: 256 cells per stream")
    p.add_argument("--n-swa", type=int, default=0,
                   help="with --kv: simulate a sliding-window model: the two-cache memory (a full cache and a "
                        "sliding cache of window N, as llama.cpp's iSWA); both caches are shown")
    p.add_argument("--no-swa-full", action="store_true",
                   help="with --n-swa: size the sliding cache as llama.cpp with swa_full = false "
                        "(pad256(n_swa * streams' seqs + n_ubatch)) instead of the full size")
    p.set_defaults(func=run)


def split_all(alloc: BatchAllocator, args) -> List[UBatch]:
    out = []
    while True:
        if args.strategy == "simple":
            ub = alloc.split_simple(args.n_ubatch)
        elif args.strategy == "seq":
            ub = alloc.split_seq(args.n_ubatch)
        else:
            ub = alloc.split_equal(args.n_ubatch, sequential=args.sequential, n_keep_tail=args.keep_tail,
                                   strict=not args.llama_exact)
        if ub is None:
            return out
        out.append(ub)


def format_ubatch(k: int, ub: UBatch) -> str:
    lines = [f"ubatch {k}: {ub.n_tokens} tokens = {ub.n_seqs} x {ub.n_seq_tokens} (n_seqs x n_seq_tokens), "
             f"seqs {ub.seq_id_unq.tolist()}, equal_seqs={ub.equal_seqs}"]
    for r in range(ub.n_tokens):
        pos = ub.pos[:, r].tolist()
        lines.append(f"  row {r:3d}: batch {int(ub.batch_idxs[r]):4d}  seqs {ub.seq_ids(r).tolist()}  "
                     f"pos {pos[0] if len(pos) == 1 else pos}  {'output' if ub.output[r] else ''}".rstrip())
    return "\n".join(lines)


def run(args) -> int:
    if args.kv or args.kv_unified or args.n_ctx is not None or args.n_swa or args.no_swa_full:
        from ubatch.cli.plan_kv import run_kv
        return run_kv(args)
    args.strategy = args.strategy or "equal"
    batch = layout_batch(args.seqs, args.layout, args.outputs, shared_prefix=args.shared_prefix)
    n_seq_max = max(1, len(args.seqs))
    alloc = BatchAllocator()
    alloc.init(batch, n_seq_max=n_seq_max)
    ubs = split_all(alloc, args)
    print(f"batch: {batch.n_tokens} tokens, {len(args.seqs)} seqs ({args.layout}), strategy {args.strategy}, "
          f"n_ubatch {args.n_ubatch} -> {len(ubs)} ubatches")
    for k, ub in enumerate(ubs):
        print(format_ubatch(k, ub))
    print(f"out_ids: {alloc.out_ids.tolist()}")
    if alloc.n_used < alloc.n_tokens:
        print(f"warning: only {alloc.n_used} of {alloc.n_tokens} tokens were placed")
    if args.png:
        return write_png(args, batch, alloc, ubs)
    return 0


def describe(args) -> str:
    what = args.strategy
    if args.strategy == "equal":
        what += "(" + ", ".join(x for x in ["sequential" if args.sequential else "",
                                            f"n_keep_tail={args.keep_tail}" if args.keep_tail else "",
                                            "llama.cpp-exact" if args.llama_exact else "strict"] if x) + ")"
    prefix = f", shared prefix {args.shared_prefix}" if args.shared_prefix else ""
    return (f"split_{what}, n_ubatch {args.n_ubatch}: seqs of {','.join(map(str, args.seqs))} tokens "
            f"({args.layout}{prefix}, outputs {args.outputs})")


def write_png(args, batch, alloc: BatchAllocator, ubs: List[UBatch]) -> int:
    try:
        from ubatch.viz.plan_png import draw_plan
        import matplotlib  # noqa: F401
    except ImportError:
        from ubatch.viz.plan_png import PLOT_HINT
        print(f"ubatch plan: {PLOT_HINT}", file=sys.stderr)
        return 2
    seq_ids = [sorted(set(batch.seq_ids(i))) for i in range(batch.n_tokens)]
    draw_plan(args.png, batch_seq_ids=seq_ids, batch_pos=alloc.pos, batch_output=alloc.output, ubatches=ubs,
              out_ids=alloc.out_ids.tolist(), n_ubatch=args.n_ubatch, title=describe(args))
    print(f"wrote {args.png}")
    return 0
