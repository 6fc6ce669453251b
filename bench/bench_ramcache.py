"""Thin script: ubatch bench ramcache (see ubatch/bench/ramcache_bench.py)."""
import sys

from ubatch.bench.ramcache_bench import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
