"""Records llama.cpp's logits with quantised / bf16 K/V caches on the tiny gemma2 of tests/model/tiny_arch.py
with head_dim 32 (so q8_0 .. q5_1 blocks divide it; SWA and soft-caps included), with llama-cpp-python 0.3.36
(python tests/model/record_kv_quant.py; tests never import this file).

Per K/V combination (COMBOS: type_k, type_v, flash attention -- llama.cpp needs it for a quantised V) the
scenario of arch_scenario.py under its CONFIGS; written to tests/data/kv_quant/<tk>-<tv>.npz (`logits`
float32[rows, n_vocab] of the first configuration) and kv_quant.json (the model's sha256, the combinations,
each one's spread: max |logit - first configuration's| over the other configurations). Combinations already in
kv_quant.json (same model) are kept as recorded; only the missing ones are run (--all: every one again)."""
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

OUT = os.path.join(os.path.dirname(HERE), "data", "kv_quant")
IDS = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "bf16": 30}
COMBOS = [("q8_0", "f16", 0), ("q8_0", "q8_0", 1), ("bf16", "bf16", 0), ("q4_0", "q4_0", 1), ("q5_1", "q5_0", 1),
          ("q4_1", "f16", 0), ("iq4_nl", "iq4_nl", 1), ("iq4_nl", "f16", 0), ("f16", "iq4_nl", 1)]
HEAD_DIM = 32


def run(path: str, cfg: dict, tk: str, tv: str, fa: int) -> np.ndarray:
    """The scenario's logits under one llama.cpp configuration with K/V types tk / tv and flash attention fa."""
    return run_scenario(L, path, cfg, IDS[tk], IDS[tv], fa)


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    L.llama_backend_init()
    doc = {"model": "gemma2-f32", "head_dim": HEAD_DIM, "llama_cpp_python": L.__version__, "configs": S.CONFIGS,
           "scenario": S.describe(), "combos": [],
           "made_by": "python tests/model/record_kv_quant.py (llama-cpp-python 0.3.36, llama.cpp 0c1e570, CPU: "
                      "AMD EPYC Zen 4 AVX-512 VNNI)"}
    old = None
    if "--all" not in sys.argv and os.path.exists(os.path.join(OUT, "kv_quant.json")):
        with open(os.path.join(OUT, "kv_quant.json")) as f:
            old = json.load(f)
    with tempfile.TemporaryDirectory() as td:
        path = tiny_arch.write("gemma2-f32", os.path.join(td, "m.gguf"), head_dim=HEAD_DIM)
        doc["sha256"] = tiny_arch.sha256(path)
        kept = {}
        if old is not None and old["sha256"] == doc["sha256"]:
            kept = {c["tag"]: c for c in old["combos"]}
            doc["made_by"] = old["made_by"]
        for tk, tv, fa in COMBOS:
            tag = f"{tk}-{tv}-fa{fa}"
            if tag in kept:
                doc["combos"].append(kept[tag])
                continue
            runs = [run(path, c, tk, tv, fa) for c in S.CONFIGS]
            spread = max(float(np.abs(r - runs[0]).max()) for r in runs)
            np.savez_compressed(os.path.join(OUT, tag + ".npz"), logits=runs[0])
            doc["combos"].append({"tag": tag, "type_k": tk, "type_v": tv, "flash_attn": fa, "spread": spread,
                                  "made_by": f"llama-cpp-python {L.__version__} (built from source on this machine)"})
            print(tag, "spread", spread)
    with open(os.path.join(OUT, "kv_quant.json"), "w") as f:
        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
