"""Records what Haystack's, Outlines', Instructor's and Guidance's llama.cpp integrations return over the REAL
llama-cpp-python 0.3.36 (greedy) into integrations.json. Needs llama-cpp-python and the frameworks installed
(haystack-ai, llama-cpp-haystack, outlines, instructor, guidance: the versions of pyproject.toml's test extra);
run from the repository root: `python tests/data/llama_cpp_python/record_integrations.py`. With `--ubatch` it
runs the same calls over ubatch.llama_cpp (install_as_llama_cpp) and prints them instead; naming frameworks
(`... record_integrations.py haystack`) re-records only theirs. tests/dropin/test_
{haystack,outlines,instructor,guidance}.py run the same calls over ubatch.llama_cpp and compare."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from integrations_cases import MODEL, N_CTX, run_guidance, run_haystack, run_instructor, run_outlines  # noqa: E402


def main() -> None:
    if "--ubatch" in sys.argv:
        import ubatch.llama_cpp
        ubatch.llama_cpp.install_as_llama_cpp()
    import importlib.metadata as md

    import llama_cpp
    from ubatch.model import fetch
    path = str(fetch.path(MODEL))
    result = {"llama_cpp_python": getattr(llama_cpp, "__version__", "?"), "model": MODEL,
              "versions": {p: md.version(p) for p in ("haystack-ai", "llama-cpp-haystack", "outlines",
                                                     "outlines_core", "llguidance", "instructor", "guidance")}}
    only = [a for a in sys.argv[1:] if not a.startswith("--")]     # e.g. `record_integrations.py haystack`
    out_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "integrations.json")
    if only and "--ubatch" not in sys.argv:
        result = {**json.load(open(out_path)), **{k: v for k, v in result.items() if k != "versions"}}
    times = {}
    for name, fn in (("haystack", run_haystack), ("outlines", run_outlines), ("instructor", run_instructor),
                     ("guidance", run_guidance)):
        if only and name not in only:
            continue
        t = time.time()
        if name == "haystack":
            result[name] = fn(path)
        else:
            llm = llama_cpp.Llama(path, n_ctx=N_CTX, verbose=False)
            result[name] = fn(llm)
            llm.close()
        times[name] = time.time() - t
    print(json.dumps(times), file=sys.stderr)
    if "--ubatch" in sys.argv:
        print(json.dumps(result, indent=1))
        return
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
