"""Thin script: `python bench/bench_speculative.py [ARGS]` = `ubatch bench speculative [ARGS]`."""
import sys

from ubatch.bench.spec_bench import main

if __name__ == "__main__":
    sys.exit(main())
