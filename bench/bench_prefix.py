"""Thin script: `python bench/bench_prefix.py [ARGS]` = `ubatch bench prefix [ARGS]` (ubatch/bench/prefix_bench.py)."""
import sys

from ubatch.bench.prefix_bench import main

if __name__ == "__main__":
    sys.exit(main())
