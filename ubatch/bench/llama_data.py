"""llama.cpp's split-timing workloads W1-W6 and its C++ timings for them (package data, so
`ubatch bench split` works from an installed package). See data/README.md for their provenance."""
import json
import os

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def _load(name: str) -> dict:
    with open(os.path.join(DATA_DIR, name)) as f:
        return json.load(f)


WORKLOADS = _load("workloads.json")
LLAMA_CPP_TIMINGS = _load("llama_cpp_split_timings.json")
