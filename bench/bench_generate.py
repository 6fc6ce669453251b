"""Thin script: `python bench/bench_generate.py [ARGS]` = `ubatch bench generate [ARGS]` (ubatch/bench/generate_bench.py)."""
import sys

from ubatch.bench.generate_bench import main

if __name__ == "__main__":
    sys.exit(main())
