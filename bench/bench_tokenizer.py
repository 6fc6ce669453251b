"""Tokenizer benchmark (thin entry point; the logic is ubatch/bench/tokenizer_bench.py, also run by
`ubatch bench tokenizer`): tokens/s on a 100 kB mixed text for both real models vs llama-cpp-python.

    python bench/bench_tokenizer.py [--runs 7] [--json bench/results_tokenizer.json]
"""
import os
import sys

try:
    import ubatch  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ubatch.bench.tokenizer_bench import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
