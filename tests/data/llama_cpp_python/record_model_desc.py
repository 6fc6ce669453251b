"""Writes model_desc.json: what llama-cpp-python 0.3.36's llama_model_desc returns (with n_params and n_layer) for
the tiny test model and the two real ones. Run with the real llama-cpp-python installed:
`python tests/data/llama_cpp_python/record_model_desc.py`. tests/dropin/test_llama_cpp_model_desc.py runs the same
`describe` over ubatch.llama_cpp and compares."""
import ctypes
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ("tiny", "qwen2.5-0.5b", "gemma3-270m")


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
    with open(os.path.join(HERE, "model_desc.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
