"""Writes model_desc.json: what llama-cpp-python 0.3.36's llama_model_desc returns (with n_params and n_layer) for
the tiny test model and the two real ones, and (under "archs") for tiny random models of every other architecture
ubatch reads, at their test layer count and at the layer counts llama.cpp names a size for (ARCH_CASES: the
GGUFs of tests/model/arch_gguf.py / tiny_arch.py with n_layer changed, rebuilt byte for byte by the test). Run
with the real llama-cpp-python installed: `python tests/data/llama_cpp_python/record_model_desc.py`.
tests/dropin/test_llama_cpp_model_desc.py runs the same `describe` over ubatch.llama_cpp and compares."""
import ctypes
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ("tiny", "qwen2.5-0.5b", "gemma3-270m")
# (exaone4's 64-layer 32B is refused by ubatch: its sliding-window layers; its label is in the table test)
# case -> (builder, model name, n_layer): "dense" = arch_gguf variant, "moe" = tiny_arch model (f32)
ARCH_CASES = {f"{name}-{nl}": (kind, name, nl) for kind, name, layers in (
    ("dense", "llama-none", (2, 16, 22)), ("dense", "qwen3", (2, 28)), ("dense", "phi3", (2, 32)),
    ("dense", "granite", (2, 32, 40, 64)), ("dense", "olmo2", (2, 16)), ("dense", "minicpm", (2, 40)),
    ("dense", "exaone4", (2, 30)), ("dense", "smollm3", (4, 36)),
    ("moe", "gemma2-f32", (4, 26)), ("moe", "qwen2moe-f32", (3, 24)), ("moe", "qwen3moe-f32", (3, 48)),
    ("moe", "olmoe-f32", (3, 16)), ("moe", "granitemoe-f32", (3, 24, 32, 40)), ("moe", "mixtral-f32", (3, 32)))
    for nl in layers}


def write_arch_case(case: str, directory: str) -> str:
    """The GGUF of ARCH_CASES[case] in directory (the same bytes every time)."""
    kind, name, nl = ARCH_CASES[case]
    model_dir = os.path.join(os.path.dirname(os.path.dirname(HERE)), "model")
    if model_dir not in sys.path:
        sys.path.insert(0, model_dir)
    path = os.path.join(directory, case + ".gguf")
    if kind == "moe":
        import tiny_arch
        return tiny_arch.write(name, path, n_layer=nl)
    import arch_gguf
    spec = arch_gguf.VARIANTS[name]
    arch_gguf.VARIANTS[case] = dict(spec, n_layer=nl, seed=spec.get("seed", name))
    try:
        return arch_gguf.write(path, case)
    finally:
        del arch_gguf.VARIANTS[case]


def model_path(name: str) -> str:
    if name == "tiny":
        import ubatch.models
        return os.path.join(os.path.dirname(ubatch.models.__file__), "tiny-llama-f32.gguf")
    from ubatch.model import fetch
    return str(fetch.path(name))


def describe(L, path: str) -> dict:
    """llama_model_desc (and the counts it is named from) of the model at `path`, through the module `L`."""
    mp = L.llama_model_default_params()
    m = L.llama_model_load_from_file(path.encode(), mp)
    buf = ctypes.create_string_buffer(128)
    n = L.llama_model_desc(m, buf, 128)
    out = {"desc": buf.value.decode(), "return": int(n), "n_params": int(L.llama_model_n_params(m)),
           "n_layer": int(L.llama_model_n_layer(m))}
    L.llama_model_free(m)
    return out


def main() -> None:
    import llama_cpp
    out = {"llama_cpp_python": llama_cpp.__version__}
    out.update({name: describe(llama_cpp, model_path(name)) for name in MODELS})
    with tempfile.TemporaryDirectory() as d:
        out["archs"] = {case: describe(llama_cpp, write_arch_case(case, d)) for case in ARCH_CASES}
    with open(os.path.join(HERE, "model_desc.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
