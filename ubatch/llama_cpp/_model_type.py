"""llama_model_desc's size label ("1B", "270M", "?B"): llama.cpp 0c1e570 names a model's size from its
architecture and layer count (a few architectures also look at n_embd, n_head, the vocabulary size or the
expert count), not from its parameter count. `size_label(arch, hp)` gives that label for the architectures
ubatch loads; "?B" where llama.cpp has no name (as it prints too).

The granite / granitemoe / smollm3 / exaone4 entries were read off llama-cpp-python 0.3.36 itself (tiny random
models at every layer count 1-96 and a range of widths: tests/data/llama_cpp_python/record_model_desc.py records
the cases the tests check).

`hp` is a callable: hp(name) -> int for n_layer, n_embd, n_head, n_head_kv, n_vocab and n_expert.
"""
from __future__ import annotations

UNKNOWN = "?B"


def _llama(hp):
    if hp("n_expert") == 8:
        return {32: "8x7B", 56: "8x22B"}.get(hp("n_layer"), UNKNOWN)
    n = hp("n_layer")
    if n == 32:  # granite's vocabulary has 49152 entries
        v = hp("n_vocab")
        return "3B" if v == 49152 else ("7B" if v < 40000 else "8B")
    if n == 80:
        return "65B" if hp("n_head") == hp("n_head_kv") else "70B"
    return {16: "1B", 22: "1B", 26: "3B", 28: "3B", 30: "256M", 36: "8B", 40: "13B", 48: "34B",
            60: "30B"}.get(n, UNKNOWN)


def _qwen2(hp):
    n = hp("n_layer")
    if n == 24:
        return "0.5B" if hp("n_embd") == 1024 else "1B"
    if n == 28:
        return "1.5B" if hp("n_embd") == 1536 else "7B"
    if n == 40:
        return "4B" if hp("n_head") == 20 else "13B"
    return {32: "7B", 36: "3B", 48: "14B", 64: "32B", 80: "70B"}.get(n, UNKNOWN)


def _qwen3(hp):
    n = hp("n_layer")
    if n == 28:
        return "0.6B" if hp("n_embd") == 1024 else "1.7B"
    if n == 36:
        return "4B" if hp("n_embd") == 2560 else "8B"
    return {40: "14B", 64: "32B"}.get(n, UNKNOWN)


def _granite(hp):
    if hp("n_layer") == 40:      # 40 layers: named by the width (granite 3.x 2B / 8B)
        return {2048: "2B", 2560: "3B", 4096: "8B"}.get(hp("n_embd"), UNKNOWN)
    return {32: "3B", 64: "30B"}.get(hp("n_layer"), UNKNOWN)


_BY_LAYERS = {  # architectures whose label depends on the layer count alone
    "gemma2": {26: "2B", 42: "9B", 46: "27B"},
    "gemma3": {18: "270M", 26: "1B", 32: "8B", 34: "4B", 48: "12B", 62: "27B"},
    "qwen2moe": {24: "A2.7B", 28: "57B.A14B"},
    "qwen3moe": {48: "30B.A3B", 94: "235B.A22B"},
    "phi3": {24: "1B", 32: "3B", 40: "14B"},
    "olmo2": {16: "1B", 32: "7B", 40: "13B", 64: "32B"},
    "olmoe": {16: "A1.7B"},
    "minicpm": {52: "1B", 40: "2B"},
    "granitemoe": {24: "1B.A400M", 32: "3B.A800M"},
    "smollm3": {36: "3B"},
    "exaone4": {30: "1.2B", 64: "32B"},
}
_BY_FN = {"llama": _llama, "qwen2": _qwen2, "qwen3": _qwen3, "granite": _granite}


def size_label(arch: str, hp) -> str:
    """llama.cpp's size label for a model of architecture `arch` with hyper-parameters `hp(name)`."""
    if arch in _BY_FN:
        return _BY_FN[arch](hp)
    return _BY_LAYERS.get(arch, {}).get(hp("n_layer"), UNKNOWN)
