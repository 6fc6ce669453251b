"""Real models beside llama.cpp (prefill 512, decode B = 1/4/16/32, per-seq and unified KV): see
ubatch/bench/models_bench.py. Also `ubatch bench models`."""
import sys

from ubatch.bench.models_bench import main

if __name__ == "__main__":
    sys.exit(main())
