"""Real models beside llama.cpp (prefill 512, decode B = 1/4/16/32, per-seq and unified KV): see
ubatch/bench/models_bench.py. Also `ubatch bench models`."""
import os
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from ubatch.bench.models_bench import main
    sys.exit(main())
