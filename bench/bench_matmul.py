"""Thin script: the matmul kernel benchmark (ubatch/bench/matmul.py; also `ubatch bench matmul`)."""
import sys

from ubatch.bench.matmul import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
