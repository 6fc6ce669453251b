"""Every new weight type on a tiny random-weight llama model (tests/model/tiny_types.py, written from fixed seeds):
agreement with llama.cpp's recorded logits (tests/data/types, made by tests/model/record_types.py) and bitwise batch
invariance.

Agreement rule (the tiny-arch tests' rule, tests/model/test_arch_moe.py, with llama.cpp's spread taken over the family):
llama.cpp's kernels for most of these types give the same bits in all six recorded configurations (spread ~1e-6),
yet on these noise models a last-bit difference anywhere before an activation quantisation (8-bit, per block)
can move one quantised activation by one step, which moves the logits of the rows after it by ~0.05: llama.cpp
itself shows such jumps between its configurations on IQ1_M (0.052), IQ4_NL (0.036) and IQ4_XS (0.033). So
tol = max(this model's spread, the largest spread over the twelve models, 5e-3); per-row max |dlogit| against
llama.cpp's first configuration <= tol on >= 90 % of the rows and <= 1.5 tol on every row; the same argmax on
every row whose top-1/top-2 margin is >= M = max(2 max(this model's spread, 5e-3), the margin's motion between
llama.cpp's configurations) in every configuration, and those rows are >= 70 % of all."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from ubatch.model.model import Model

import arch_scenario as S
import tiny_types
from invariance_driver import others_for, run_target

import suite_paths  # noqa: E402
DATA = os.path.join(suite_paths.DATA, "types")
FLOOR = 5e-3


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_types")
    return {name: tiny_types.write(name, d / f"{name}.gguf") for name in tiny_types.TYPES}


def family_spread() -> float:
    """The largest llama.cpp spread over the tiny type models' recordings."""
    out = 0.0
    for name in tiny_types.TYPES:
        with open(os.path.join(DATA, name + ".json")) as f:
            out = max(out, json.load(f)["spread"])
    return out


@pytest.mark.parametrize("name", sorted(tiny_types.TYPES))
def test_agrees_with_llama_cpp(files, name):
    with open(os.path.join(DATA, name + ".json")) as f:
        doc = json.load(f)
    z = np.load(os.path.join(DATA, name + ".npz"))
    assert tiny_types.sha256(files[name]) == doc["sha256"], "the tiny model is not the one llama.cpp was recorded on"
    assert doc["scenario"]["steps"] == [[list(r) for r in st] for st in S.steps()]
    ref = z["logits"]
    tags = [c["tag"] for c in doc["configs"]]
    tol = max(doc["spread"], FLOOR, family_spread())
    margins, motion = S.margins_motion(z, tags)   # motion: of the first configuration's top-two margin
    M = max(2 * max(doc["spread"], FLOOR), motion)
    clear = (margins >= M).all(axis=0)
    m = Model.from_gguf(files[name])
    assert {w.type_name for w in (m.weights.output, m.weights.layers[0].wq)} == {name}
    for cfg in (S.CONFIGS[0], S.CONFIGS[2]):
        ub = S.replay(m, cfg)
        d = np.abs(ub - ref).max(axis=1)
        print(name, cfg["tag"], "max |dlogit|", float(d.max()), "tol", tol, "clear", int(clear.sum()), "/", clear.size)
        assert (d <= tol).mean() >= 0.9, f"{name} {cfg['tag']}: {int((d > tol).sum())} rows off by more than {tol:.3g}"
        assert d.max() <= 1.5 * tol, f"{name} {cfg['tag']}: row {int(d.argmax())} off by {d.max():.3g}"
        assert np.array_equal(ub.argmax(axis=1)[clear], ref.argmax(axis=1)[clear])
    assert clear.mean() >= 0.7, f"only {clear.sum()} of {clear.size} rows are clear: the test would not bite"


@pytest.mark.parametrize("name", ["IQ4_NL", "IQ4_XS", "IQ3_S", "IQ2_XXS", "IQ1_M", "TQ1_0", "MXFP4", "NVFP4", "Q1_0", "Q2_0"])
def test_batch_invariance_bitwise(files, name):
    m = Model.from_gguf(files[name])
    target = others_for(m.n_vocab, [17], seed=5)[0]
    runs = []
    for i, (n_oth, n_ub, uni, nt) in enumerate([(0, 512, False, 2), (7, 7, True, 1), (5, 1, False, 2)]):
        others = others_for(m.n_vocab, [3 + 4 * j for j in range(n_oth)], seed=10 + i)
        runs.append(run_target(m, target, others=others, n_ubatch=n_ub, kv_unified=uni, n_threads=nt, n_greedy=3,
                               n_ctx=512))
    for r in runs[1:]:
        for a, b in zip(runs[0], r):
            assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), name
