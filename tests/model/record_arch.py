"""Records llama.cpp's logits on the tiny random-weight models of tests/model/tiny_arch.py (gemma2, qwen2moe, qwen3moe;
f32 and q8_0) with llama-cpp-python 0.3.36 (python tests/model/record_arch.py; tests never import this file).

For each model: the scenario of arch_scenario.py (four sequences of different lengths prefilled in one
llama_decode call with every row's logits, then GEN rounds of one fixed token per sequence) run under the
llama.cpp configurations CONFIGS (n_ubatch, n_threads, kv_unified; f32 K/V, no flash attention, n_ctx 256).
Written to tests/data/arch/<model>.npz:
    logits            float32[rows, n_vocab]: the first configuration's logits, rows in scenario order
    top2_<cfg>        int32[rows, 2] / float32 top2v_<cfg>: each configuration's two largest logits
    maxdiff_<cfg>     float32[rows]: per-row max |logit - first configuration's| over the whole vocabulary
and tests/data/arch/<model>.json: the model file's sha256 (as tiny_arch.write produces it), the scenario, the
configurations, llama-cpp-python's version and the spread (max of maxdiff over rows and configurations).
python tests/model/record_arch.py mixtral-f32 ... records only the models named."""
import json
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(HERE), "support")]
import arch_scenario as S  # noqa: E402
import tiny_arch  # noqa: E402
from llama_cpp_scenario import run_scenario  # noqa: E402

import llama_cpp as L  # noqa: E402

OUT = os.path.join(os.path.dirname(HERE), "data", "arch")


def run(path: str, cfg: dict) -> np.ndarray:
    """The scenario's logits (rows in scenario order) under one llama.cpp configuration (f32 K/V, no flash
    attention)."""
    return run_scenario(L, path, cfg)


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    L.llama_backend_init()
    with tempfile.TemporaryDirectory() as td:
        for name in sys.argv[1:] or tiny_arch.SPECS:   # model names to (re-)record, default all
            path = tiny_arch.write(name, os.path.join(td, name + ".gguf"))
            runs = {c["tag"]: run(path, c) for c in S.CONFIGS}
            arrs, spread = S.summarise(runs)
            first = arrs["logits"]
            np.savez_compressed(os.path.join(OUT, name + ".npz"), **arrs)
            doc = {"model": name, "sha256": tiny_arch.sha256(path), "llama_cpp_python": L.__version__,
                   "configs": S.CONFIGS, "scenario": S.describe(), "rows": int(first.shape[0]),
                   "spread": spread,
                   "made_by": "python tests/model/record_arch.py (llama-cpp-python 0.3.36, llama.cpp 0c1e570, CPU, f32 K/V, "
                              "no flash attention)"}
            with open(os.path.join(OUT, name + ".json"), "w") as f:
                json.dump(doc, f, indent=1)
            print(name, "rows", first.shape[0], "spread", spread)


if __name__ == "__main__":
    main()
