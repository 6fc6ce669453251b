"""ModelRunner against llama.cpp's recorded logits/embeddings, driven by the test-side numpy cell cache in
decode_driver.py (independent of ubatch.KVCache / Context). Data: tests/data/decode (see README there)."""
import glob
import json
import os

import numpy as np
import pytest

from decode_driver import replay
from ubatch.model.model import Model
from ubatch.models import tiny_llama

from suite_paths import DATA  # noqa: E402
DECODE = os.path.join(DATA, "decode")
SCENARIOS = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(DECODE, "*__*.json")))

_models = {}


def model_for(name: str) -> Model:
    if name not in _models:
        _models[name] = (tiny_llama() if name == "tiny-llama-f32.gguf"
                         else Model.from_gguf(os.path.join(DATA, "models", name)))
    return _models[name]


def tolerance(doc: dict) -> float:
    c = doc["scenario"]["ctx"]
    exact = (c["type_k"] == "f32" and c["type_v"] == "f32" and c["flash_attn"] == 0
             and doc["scenario"]["model"] == "tiny-llama-f32.gguf")
    return 1e-4 if exact else 5e-3


def test_all_scenarios_present():
    assert len(SCENARIOS) == 61


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_logits(name):
    with open(os.path.join(DECODE, name + ".json")) as f:
        doc = json.load(f)
    ref = np.load(os.path.join(DECODE, name + ".npz"))
    tol = tolerance(doc)
    n_steps = 0
    threads = doc["scenario"]["ctx"]["n_threads"]
    for si, rows, logits, embd in replay(doc, model_for(doc["scenario"]["model"]), n_threads=threads):
        n_steps += 1
        np.testing.assert_array_equal(rows, ref[f"s{si}_rows"])
        want = ref[f"s{si}_logits"]
        assert np.abs(logits - want).max() <= tol, f"step {si}: max |dlogits| {np.abs(logits - want).max()}"
        np.testing.assert_array_equal(logits.argmax(axis=1), want.argmax(axis=1))
        if doc["scenario"]["ctx"]["embeddings"]:
            assert np.abs(embd - ref[f"s{si}_embd"]).max() <= tol
        else:
            assert embd is None
    assert n_steps == sum(1 for s in doc["result"]["steps"] if s["op"] == "decode" and s["ret"] == 0)
