"""The `ubatch` command line: one sub-command per module of this package."""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from ubatch.cli import bench, plan, run, serve


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ubatch", description="llama.cpp's batch planner, in C, from Python")
    sub = ap.add_subparsers(dest="command", required=True)
    plan.add_parser(sub)
    run.add_parser(sub)
    bench.add_parser(sub)
    serve.add_parser(sub)
    return ap


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        if not getattr(args, "pass_through", False):   # only `ubatch bench kv|attention|decode` forward arguments
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.bench_args = list(args.bench_args) + extra
    try:
        return args.func(args)
    except BrokenPipeError:  # e.g. `ubatch plan ... | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
