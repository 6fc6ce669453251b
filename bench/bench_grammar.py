"""Thin script: ubatch bench grammar (see ubatch/bench/grammar_bench.py)."""
import sys

from ubatch.bench.grammar_bench import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
