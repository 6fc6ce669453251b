"""`ubatch run`: continuous batching of a seeded stream of requests on a model (the embedded tiny llama by
default), llama.cpp-server style, with a report of how the batches were planned, placed and decoded."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Optional, Tuple

from ubatch.engine.serve import ContinuousBatcher, make_requests, parse_range


def _range(name: str):
    def parse(text: str) -> Tuple[int, int]:
        try:
            return parse_range(text, name)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e))
    return parse


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="continuous batching of a request stream on a model, with a report",
                       description="Serve a seeded stream of requests the way llama.cpp's server does: every step "
                                   "decodes one token of each generating sequence plus chunks of admitted prompts "
                                   "(up to n_batch), samples greedily, retires finished sequences (seq_rm) and "
                                   "admits waiting ones. On a full KV cache n_batch is halved and the slice "
                                   "retried; a single token that still does not fit evicts its request.")
    p.add_argument("--requests", type=int, default=128, help="number of requests (default 128)")
    p.add_argument("--parallel", type=int, default=8, help="sequences decoded together = n_seq_max (default 8)")
    p.add_argument("--prompt-len", type=_range("--prompt-len"), default=(8, 48), metavar="LO-HI",
                   help="prompt length, uniform in [LO, HI] (default 8-48)")
    p.add_argument("--gen-len", type=_range("--gen-len"), default=(8, 32), metavar="LO-HI",
                   help="tokens to generate, uniform in [LO, HI] (default 8-32)")
    p.add_argument("--n-ctx", type=int, default=None,
                   help="KV cells in total (default: 256 per sequence, i.e. 256 x parallel; 512 with --kv-unified)")
    p.add_argument("--n-batch", type=int, default=64, help="tokens per decode call (default 64)")
    p.add_argument("--n-ubatch", type=int, default=32, help="tokens per ubatch (default 32)")
    p.add_argument("--kv-unified", action="store_true", help="one KV stream shared by all sequences")
    p.add_argument("--seed", type=int, default=0, help="seed of the request lengths and prompt tokens (default 0)")
    p.add_argument("--model", metavar="PATH.gguf", default=None, help="llama GGUF model (default: the embedded tiny model)")
    p.add_argument("--threads", type=int, default=None, help="attention threads (default: all cores)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the report")
    p.add_argument("--png", metavar="FILE", default=None, help="write a timeline picture (needs matplotlib)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def _load_model(path: Optional[str]):
    if path is None:
        from ubatch.models import TINY_LLAMA_PATH, tiny_llama
        return tiny_llama(), os.path.basename(TINY_LLAMA_PATH)
    from ubatch.model.gguf_model import Model
    if not os.path.isfile(path):
        raise ValueError(f"--model: no such file: {path}")
    return Model.from_gguf(path), os.path.basename(path)


def _fmt_shapes(shapes: dict, limit: int = 12) -> str:
    items = [f"{k} ({v})" for k, v in list(shapes.items())[:limit]]
    more = len(shapes) - limit
    return ", ".join(items) + (f", ... ({more} more)" if more > 0 else "")


def format_report(d: dict) -> str:
    c = d["config"]
    tps = d["tokens_per_s"]
    kv = "unified, 1 stream" if c["kv_unified"] else f"{d['n_stream']} streams"
    peak = d["peak_kv_cells"]
    size = d["kv_cells_per_stream"]
    if len(peak) <= 8:
        peak_s = ", ".join(f"{p}/{size}" for p in peak)
    else:
        peak_s = f"max {max(peak)}/{size}, mean {sum(peak) / len(peak):.1f} over {len(peak)} streams"
    lines = [
        f"ubatch run: {c['model']} (n_vocab {c['n_vocab']}) | n_ctx {c['n_ctx']} ({kv} x {size} cells), "
        f"n_batch {c['n_batch']}, n_ubatch {c['n_ubatch']}, parallel {c['parallel']}, seed {c['seed']}",
        f"requests          {d['requests']}: {d['finished']} finished, {d['evicted']} evicted, {d['rejected']} rejected",
        f"prompt tokens     {d['prompt_tokens']}",
        f"generated tokens  {d['generated_tokens']}",
        f"time              {d['wall_s']:.3f} s ({d['decode_s']:.3f} s in decode)",
        f"tokens/s          prompt {tps['prompt']:.1f}, generation {tps['generation']:.1f}, "
        f"all decoded {tps['total']:.1f} (each over the whole run)",
        f"decode calls      {d['decode_calls']} in {d['steps']} steps ({d['failed_decode_calls']} failed)",
        f"ubatches          {d['ubatches']}",
        f"ubatch fill       mean {d['mean_fill']:.3f}, worst {d['worst_fill']:.3f} (n_tokens / n_ubatch)",
        f"ubatch shapes     {len(d['shapes'])} distinct (n_seqs x n_seq_tokens: count): {_fmt_shapes(d['shapes'])}",
        f"peak KV cells     {peak_s} (per stream)",
        f"retries           {d['retries']} (n_batch halved after a full KV cache)",
    ]
    if d["errors"]:
        lines.append(f"decode errors     {d['errors']}")
    for m in d["messages"][:10]:
        lines.append(f"  {m}")
    if len(d["messages"]) > 10:
        lines.append(f"  ... {len(d['messages']) - 10} more messages (see --json)")
    return "\n".join(lines)


def _progress(total: int, disable: bool):
    from tqdm import tqdm   # a dependency of gguf
    return tqdm(total=total, unit="req", desc="ubatch run", file=sys.stderr, disable=disable, leave=False,
                dynamic_ncols=True)


def run(args) -> int:
    from ubatch.engine.context import Context

    for name in ("requests", "parallel", "n_batch", "n_ubatch"):
        lo = 0 if name == "requests" else 1
        if getattr(args, name) < lo:
            print(f"error: --{name.replace('_', '-')} must be >= {lo}, got {getattr(args, name)}", file=sys.stderr)
            return 2
    if args.png is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            from ubatch.viz.run_png import PLOT_HINT
            print(f"ubatch run: {PLOT_HINT}", file=sys.stderr)
            return 2
    n_ctx = args.n_ctx
    if n_ctx is None:
        n_ctx = 512 if args.kv_unified else 256 * args.parallel
    try:
        model, model_name = _load_model(args.model)
        ctx = Context(model, n_ctx=n_ctx, n_batch=args.n_batch, n_ubatch=args.n_ubatch, n_seq_max=args.parallel,
                      kv_unified=args.kv_unified, n_threads=args.threads)
    except (ValueError, TypeError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for w in ctx.warnings:
        print(f"warning: {w}", file=sys.stderr)
    reqs = make_requests(args.requests, prompt_len=args.prompt_len, gen_len=args.gen_len, n_vocab=model.n_vocab,
                         seed=args.seed)

    bar = _progress(len(reqs), args.no_progress)
    last = [0.0]

    def on_step(cb: ContinuousBatcher, n_done: int) -> None:
        if n_done:
            bar.update(n_done)
        now = time.perf_counter()
        if now - last[0] > 0.25:
            last[0] = now
            st = cb.stats
            el = max(now - cb.t0, 1e-9)
            bar.set_postfix(active=len(cb.sched.active), tok_s=f"{(st.prompt_tokens + st.decode_tokens) / el:.0f}",
                            retries=st.retries, refresh=False)

    try:
        stats = ContinuousBatcher(ctx).run(reqs, on_step=on_step)
    finally:
        bar.close()
    d = stats.to_dict()
    d["config"] = {"model": model_name, "n_vocab": int(model.n_vocab), "n_ctx": ctx.n_ctx, "n_ctx_seq": ctx.n_ctx_seq,
                   "n_batch": ctx.n_batch, "n_ubatch": ctx.n_ubatch, "parallel": ctx.n_seq_max,
                   "kv_unified": ctx.kv_unified, "seed": args.seed, "prompt_len": list(args.prompt_len),
                   "gen_len": list(args.gen_len)}
    if args.png is not None:
        from ubatch.viz.run_png import plot_timeline
        plot_timeline(stats, args.png, config=d["config"])
    if args.json:
        print(json.dumps(d))
    else:
        print(format_report(d))
        if args.png is not None:
            print(f"timeline written to {args.png}")
    return 0
