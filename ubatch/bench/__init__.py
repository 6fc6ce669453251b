"""Benchmarks behind `ubatch bench`: the split-strategy suite (families x n_ubatch x strategies) and
llama.cpp's split-timing workloads W1-W6 (split_bench)."""
from ubatch.bench.families import FAMILIES, Workload
from ubatch.bench.strategies import STRATEGIES, Strategy
from ubatch.bench.sweep import DEFINITIONS, measure, run

__all__ = ["DEFINITIONS", "FAMILIES", "STRATEGIES", "Strategy", "Workload", "measure", "run"]
