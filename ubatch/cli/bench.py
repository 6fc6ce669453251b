"""`ubatch bench`: the split-strategy suite (default) and the kernel benchmarks as sub-commands.

    ubatch bench [--quick] [--out DIR] ...        workload families x n_ubatch x strategies
    ubatch bench split [--reps N] [--json F]      llama.cpp's workloads W1-W6 beside llama.cpp's own times
    ubatch bench kv|attention|decode|matmul|models|tokenizer|fidelity [ARGS...]   KV cache / attention / decode /
                                                  matmul / real models / tokenizer vs llama.cpp
    ubatch bench generate [ARGS...]               text generation beside llama-cpp-python (generate_bench.py)
    ubatch bench serve [ARGS...]                  the HTTP server under 1/8/32 clients beside llama_cpp.server
    ubatch bench prefix [ARGS...]                 prefix caching (shared system prompt, chat replay) beside llama_cpp.server
    ubatch bench speculative [ARGS...]            speculative decoding beside llama-cpp-python (spec_bench.py)
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import time
from typing import List

QUICK_N_UBATCH = [16, 64, 256]
FULL_N_UBATCH = [16, 32, 64, 128, 256, 512]

# sub-command -> (package module, file of a source checkout, what it measures)
KERNEL_BENCHES = {
    "kv": ("ubatch.bench.kv", "bench_kv.py", "KV cache: find_slot, apply_ubatch, seq ops, KQ mask"),
    "attention": ("ubatch.bench.attention", "bench_attention.py", "the C attention kernel"),
    "decode": ("ubatch.bench.decode", "bench_decode.py", "the decode loop on the embedded model"),
    "matmul": ("ubatch.bench.matmul", "bench_matmul.py", "the C matmul kernels on the real models' weights"),
    "models": ("ubatch.bench.models_bench", "bench_models.py", "real models (Gemma 3, Qwen2.5) beside llama.cpp"),
    "tokenizer": ("ubatch.bench.tokenizer_bench", "bench_tokenizer.py",
                  "tokenizer: tokens/s on a 100 kB mixed text vs llama-cpp-python, vocab load time"),
    "generate": ("ubatch.bench.generate_bench", "bench_generate.py",
                 "text generation (ubatch.LLM) for 1/8/32 prompts beside llama-cpp-python's create_completion"),
    "fidelity": ("ubatch.bench.fidelity", "bench_fidelity.py",
                 "ubatch and llama.cpp against the float64 reference forward, per row, on the recorded prompts"),
    "serve": ("ubatch.bench.serve_bench", "bench_serve.py",
              "ubatch serve under C concurrent clients beside llama-cpp-python's server"),
    "prefix": ("ubatch.bench.prefix_bench", "bench_prefix.py",
               "prefix caching: a shared system prompt and multi-turn chats, with / without the cache, beside "
               "llama-cpp-python's server"),
    "ramcache": ("ubatch.bench.ramcache_bench", "bench_ramcache.py",
                 "a LlamaRAMCache user's time to first token with a shared prefix, beside llama-cpp-python's"),
    "grammar": ("ubatch.bench.grammar_bench", "bench_grammar.py",
                "a grammar applied to the whole vocabulary beside llama.cpp's grammar sampler, both vocabularies"),
    "speculative": ("ubatch.bench.spec_bench", "bench_speculative.py",
                    "exact speculative decoding (prompt lookup) on code-editing / prose prompts beside "
                    "llama-cpp-python plain and with its LlamaPromptLookupDecoding"),
}


def _csv(kind):
    def parse(text: str):
        try:
            return [kind(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
    return parse


def progress_bar(enabled: bool, desc: str):
    """A tqdm wrapper `(iterable, total) -> iterable`, or None (no bar) when disabled or tqdm is missing."""
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        print("note: tqdm is not installed; no progress bar", file=sys.stderr)
        return None
    return lambda it, total: tqdm(it, total=total, desc=desc, unit="cell", leave=False, dynamic_ncols=True)


def add_parser(sub) -> None:
    p = sub.add_parser("bench", allow_abbrev=False, help="benchmarks: split strategies (default), split/kv/attention/decode/matmul",
                       description="Without a sub-command: the split-strategy suite. Every workload family x "
                                   "n_ubatch x strategy is planned (init + split_reset + split loop) and timed; "
                                   "prints a table, and with --out writes bench_suite.json and PNG plots.")
    p.add_argument("--quick", action="store_true", help="small batches, 3 n_ubatch values, few reps (< 1 min)")
    p.add_argument("--out", metavar="DIR", default=None, help="write bench_suite.json and plots (PNG) here")
    p.add_argument("--families", type=_csv(str), default=None, help="comma-separated subset of the families")
    p.add_argument("--strategies", type=_csv(str), default=None, help="comma-separated subset of the strategies")
    p.add_argument("--n-ubatch", type=_csv(int), default=None, help=f"n_ubatch values (default {FULL_N_UBATCH}, "
                   f"quick {QUICK_N_UBATCH})")
    p.add_argument("--reps", type=int, default=None, help="timed plans per cell (default 101, quick 31)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=0, help="seed of the ragged workload lengths")
    p.add_argument("--no-plots", action="store_true", help="with --out: JSON only")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--list", action="store_true", help="list the families and strategies, then exit")
    p.set_defaults(func=run_suite)
    bsub = p.add_subparsers(dest="bench_command", metavar="{" + ",".join(["split", *KERNEL_BENCHES]) + "}")
    sp = bsub.add_parser("split", help="llama.cpp's split-timing workloads W1-W6 beside llama.cpp's times",
                         description="µs per plan on llama.cpp's workloads W1-W6, next to llama.cpp's own C++ time")
    from ubatch.bench import split_bench
    split_bench.add_arguments(sp)
    sp.add_argument("--no-progress", action="store_true", help="no progress bar")
    sp.set_defaults(func=run_split)
    for name, (_, _, what) in KERNEL_BENCHES.items():
        kp = bsub.add_parser(name, help=what, add_help=False, allow_abbrev=False,
                             description=f"{what}; every further argument is passed to that benchmark")
        kp.set_defaults(func=run_kernel, kernel=name, bench_args=[], pass_through=True)


def run_split(args) -> int:
    from ubatch.bench import split_bench
    return split_bench.main_args(args, progress_bar(not args.no_progress, "split W1-W6"))


def source_bench_dir() -> str:
    """bench/ of the source checkout this package was imported from (it may not exist)."""
    import ubatch
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(ubatch.__file__))), "bench")


def _locate_kernel(name: str):
    """The benchmark's `main(argv)`: from the package when it ships one, else from bench/ of a source
    checkout (found next to the ubatch package); None when neither exists, False when it has no main."""
    modname, filename, _ = KERNEL_BENCHES[name]
    try:
        mod = importlib.import_module(modname)
    except ModuleNotFoundError as e:
        if e.name != modname:
            raise
        mod = None
    if mod is None:
        path = os.path.join(source_bench_dir(), filename)
        if not os.path.isfile(path):
            return None
        spec = importlib.util.spec_from_file_location(f"_ubatch_bench_{name}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    return getattr(mod, "main", False)


def run_kernel(args) -> int:
    name = args.kernel
    main = _locate_kernel(name)
    if main is None:
        modname, filename, what = KERNEL_BENCHES[name]
        print(f"ubatch bench {name}: not available in this build ({what}): neither the module {modname} nor "
              f"bench/{filename} next to the package exists", file=sys.stderr)
        return 2
    if not callable(main):
        print(f"ubatch bench {name}: the benchmark module has no main(argv) function", file=sys.stderr)
        return 2
    from ubatch.compute import backends as kb
    print(f"kernel back-end: {kb.active_backend()} (this CPU has: {', '.join(kb.backends())}; "
          f"UBATCH_KERNELS=<name> forces one)", flush=True)
    rc = _call_main(main, f"ubatch bench {name}", list(args.bench_args))
    return 0 if rc is None else int(rc)


def _call_main(main, prog: str, argv: List[str]):
    """main(argv) when it takes an argument; else main() with sys.argv set to [prog, *argv] (scripts that
    parse sys.argv themselves)."""
    import inspect
    try:
        takes_argv = any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
                         for p in inspect.signature(main).parameters.values())
    except (TypeError, ValueError):
        takes_argv = True
    if takes_argv:
        return main(argv)
    saved = sys.argv
    sys.argv = [prog, *argv]
    try:
        return main()
    finally:
        sys.argv = saved


def run_suite(args) -> int:
    from ubatch.bench import families as fam
    from ubatch.bench import plots, report, strategies as strat, sweep

    if args.list:
        for name, fn in fam.FAMILIES.items():
            print(f"family   {name:15} {(fn.__doc__ or '').strip().splitlines()[0] if fn.__doc__ else ''}")
        for s in strat.STRATEGIES.values():
            print(f"strategy {s.name:15} {s.desc}")
        return 0
    quick = args.quick
    n_ubatches = args.n_ubatch or (QUICK_N_UBATCH if quick else FULL_N_UBATCH)
    reps = args.reps if args.reps is not None else (31 if quick else 101)
    if reps < 1 or args.warmup < 0 or any(n < 1 for n in n_ubatches):
        print("ubatch bench: --reps and every --n-ubatch must be >= 1, --warmup >= 0", file=sys.stderr)
        return 2
    try:
        workloads = fam.build(args.families or list(fam.FAMILIES), quick, args.seed)
        strategies = strat.select(args.strategies)
    except ValueError as e:
        print(f"ubatch bench: {e}", file=sys.stderr)
        return 2
    want_plots = args.out is not None and not args.no_plots
    if want_plots and not plots.have_matplotlib():
        print(f"note: {plots.PLOT_HINT}", file=sys.stderr)
        want_plots = False
    t0 = time.perf_counter()
    rows = sweep.run(workloads, strategies, n_ubatches, reps=reps, warmup=args.warmup,
                     progress=progress_bar(not args.no_progress, "bench"))
    elapsed = time.perf_counter() - t0
    print(report.table(rows, workloads))
    print()
    print("columns:")
    print(report.legend())
    print(f"\n{len(rows)} cells, {reps} timed plans each, {elapsed:.1f} s")
    if args.out is not None:
        os.makedirs(args.out, exist_ok=True)
        doc = report.document(rows, workloads, strategies, quick=quick, reps=reps, warmup=args.warmup,
                              seed=args.seed, n_ubatches=list(n_ubatches))
        doc["elapsed_s"] = round(elapsed, 2)
        path = os.path.join(args.out, "bench_suite.json")
        report.write_json(doc, path)
        print(f"wrote {path}")
        if want_plots:
            for p in plots.write_all(rows, args.out):
                print(f"wrote {p}")
    return 0
