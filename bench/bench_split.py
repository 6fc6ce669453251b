"""Split-planning benchmark on the very workloads llama.cpp's allocator was timed on (W1–W6).

A thin entry point: the logic lives in ubatch/bench/split_bench.py, so the installed command
`ubatch bench split` runs the same thing.

    python bench/bench_split.py [--reps 200] [--json out.json] [--no-reference] [--workload W3]
"""
import os
import sys

try:
    import ubatch  # noqa: F401  (the installed package, or PYTHONPATH)
except ImportError:   # a source checkout built in place (make build) but not installed
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ubatch.bench.split_bench import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
