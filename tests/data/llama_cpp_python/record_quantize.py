"""Writes quantize.json: the sha256 of the files llama-cpp-python 0.3.36's llama_model_quantize (llama.cpp's
quantiser) writes for each case of CASES (source, parameters), on this machine. Run with the real
llama-cpp-python installed: `python tests/data/llama_cpp_python/record_quantize.py`.
tests/dropin/test_llama_cpp_quantize.py runs the same cases through ubatch.llama_cpp and compares the bytes."""
import hashlib
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = os.path.join(HERE, "..", "..", "..", "ubatch", "models", "tiny-llama-f32.gguf")
# name -> (source: "tiny" | a ubatch.model.fetch name, llama_model_quantize_params fields)
CASES = {
    "tiny-f32": ("tiny", {"ftype": 0}), "tiny-f16": ("tiny", {"ftype": 1}), "tiny-bf16": ("tiny", {"ftype": 32}),
    "tiny-q8_0": ("tiny", {"ftype": 7}), "tiny-q4_0": ("tiny", {"ftype": 2}), "tiny-q4_1": ("tiny", {"ftype": 3}),
    "tiny-q5_0": ("tiny", {"ftype": 8}), "tiny-q5_1": ("tiny", {"ftype": 9}),
    "tiny-q4_0-pure": ("tiny", {"ftype": 2, "pure": True}),
    "tiny-q5_1-embd-f16-out-q8_0": ("tiny", {"ftype": 9, "token_embedding_type": 1, "output_tensor_type": 8}),
    "tiny-q4_0-keep-output": ("tiny", {"ftype": 2, "quantize_output_tensor": False}),
    "tiny-only-copy": ("tiny", {"ftype": 2, "only_copy": True}),
    "gemma3-270m-q4_0": ("gemma3-270m", {"ftype": 2, "allow_requantize": True}),
    "gemma3-270m-q8_0": ("gemma3-270m", {"ftype": 7, "allow_requantize": True}),
    "gemma3-270m-only-copy": ("gemma3-270m", {"ftype": 2, "only_copy": True}),
    "qwen2.5-0.5b-q5_0": ("qwen2.5-0.5b", {"ftype": 8, "allow_requantize": True}),
}


def source(name: str) -> str:
    if name == "tiny":
        return os.path.abspath(TINY)
    import importlib.util
    if importlib.util.find_spec("ubatch") is None:     # run by hand from a tree without an install; never in
        sys.path.append(os.path.join(HERE, "..", "..", ".."))   # the tests (their children inherit sys.path)
    from ubatch.model import fetch
    return str(fetch.path(name))


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main() -> None:
    import llama_cpp
    out = {"llama_cpp_python": llama_cpp.__version__}
    with tempfile.TemporaryDirectory() as d:
        for name, (src, fields) in CASES.items():
            p = llama_cpp.llama_model_quantize_default_params()
            for k, v in fields.items():
                setattr(p, k, v)
            dst = os.path.join(d, name + ".gguf")
            rc = llama_cpp.llama_model_quantize(source(src).encode(), dst.encode(), llama_cpp.byref(p))
            out[name] = {"rc": rc, "sha256": sha256(dst) if rc == 0 else None,
                         "bytes": os.path.getsize(dst) if rc == 0 else None}
    with open(os.path.join(HERE, "quantize.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
