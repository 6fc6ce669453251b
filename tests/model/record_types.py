"""Records llama.cpp's logits on the tiny random-weight models of tests/model/tiny_types.py (one llama model per weight
type: the i-quants, TQ1_0 / TQ2_0, MXFP4, NVFP4, Q1_0, Q2_0) with llama-cpp-python 0.3.36 (python
tests/model/record_types.py [TYPE ...]: those types only, default all; tests never
import this file). The scenario is the tiny-arch recordings' (tests/arch_scenario.py: four sequences prefilled in
one call with every row's logits, then 3 rounds of one token per sequence), under its configurations (n_ubatch
512 / 3 / 1, 2 / 1 threads, per-seq / unified KV) and three more (n_ubatch 2, 5, 16); f32 K/V, no flash
attention; run by record_arch.run.
Written to tests/data/types/<type>.npz (as tests/data/arch: logits of the first configuration, top2 / top2v /
maxdiff per configuration) and <type>.json (sha256 of the model file, configurations, spread)."""
import json
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(HERE), "support")]
import arch_scenario as S  # noqa: E402
import tiny_types  # noqa: E402
from record_arch import L, run  # noqa: E402

OUT = os.path.join(os.path.dirname(HERE), "data", "types")
# the tiny-arch configurations, then more n_ubatch values: llama.cpp's kernels for these types give the same bits
# for many layouts, so its spread shows only when enough layouts are tried (the first is the reference)
CONFIGS = S.CONFIGS + [dict(tag="u2_t2", n_ubatch=2, n_threads=2, kv_unified=False),
                       dict(tag="u5_t2", n_ubatch=5, n_threads=2, kv_unified=False),
                       dict(tag="u16_t1_unified", n_ubatch=16, n_threads=1, kv_unified=True)]


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    L.llama_backend_init()
    with tempfile.TemporaryDirectory() as td:
        for name in (sys.argv[1:] or tiny_types.TYPES):
            path = tiny_types.write(name, os.path.join(td, name + ".gguf"))
            runs = {c["tag"]: run(path, c) for c in CONFIGS}
            arrs, spread = S.summarise(runs)
            first = arrs["logits"]
            np.savez_compressed(os.path.join(OUT, name + ".npz"), **arrs)
            doc = {"model": f"tiny-llama-{name}", "sha256": tiny_types.sha256(path), "llama_cpp_python": L.__version__,
                   "configs": CONFIGS, "scenario": S.describe(), "rows": int(first.shape[0]), "spread": spread,
                   "made_by": "python tests/model/record_types.py (llama-cpp-python 0.3.36, llama.cpp 0c1e570, CPU, f32 K/V, "
                              "no flash attention)"}
            with open(os.path.join(OUT, name + ".json"), "w") as f:
                json.dump(doc, f, indent=1)
            print(name, "rows", first.shape[0], "spread", spread, flush=True)


if __name__ == "__main__":
    main()
