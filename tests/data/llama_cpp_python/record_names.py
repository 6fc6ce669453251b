"""Writes names.json: the public names of llama-cpp-python 0.3.36's modules (`import llama_cpp` and the submodules
third-party code imports), as the real package defines them. Run with the real llama-cpp-python installed:
`python tests/data/llama_cpp_python/record_names.py`. tests/dropin/test_llama_cpp_names.py checks ubatch.llama_cpp
against it."""
import importlib
import json
import os

MODULES = ["llama_cpp", "llama_cpp.llama_cpp", "llama_cpp.llama", "llama_cpp.llama_types", "llama_cpp.llama_cache",
           "llama_cpp.llama_tokenizer", "llama_cpp.llama_grammar", "llama_cpp.llama_chat_format",
           "llama_cpp.llama_speculative", "llama_cpp._internals", "llama_cpp._utils", "llama_cpp._logger"]


def main() -> None:
    import llama_cpp
    out = {"llama_cpp_python": llama_cpp.__version__}
    for name in MODULES:
        mod = importlib.import_module(name)
        out[name] = sorted(n for n in dir(mod) if not n.startswith("_") and
                           not (type(getattr(mod, n)).__name__ == "module"))
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "names.json"), "w") as f:
        json.dump(out, f, indent=0)


if __name__ == "__main__":
    main()
