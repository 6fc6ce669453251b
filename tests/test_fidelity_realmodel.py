"""The fidelity instrument (ubatch bench fidelity) on one short prompt of a real model: issue 28's 11-token
chat prompt on Qwen2.5-Coder 0.5B, f32 K/V. ubatch, llama.cpp (recorded with llama-cpp-python 0.3.36,
ubatch/bench/data/fidelity) and the float64 emulating reference: each row's distance of ubatch to the
reference must lie within the float32 noise floor (the same graph in float32 arithmetic, forward(dtype=
float32)) up to a factor, and where the reference's margin is larger than the floor, ubatch's argmax is the
reference's. ~30 s of CPU."""
import numpy as np
import pytest

from ubatch.bench import fidelity as fb
from ubatch.bench import fidelity_data as fd

pytestmark = pytest.mark.realmodel


def test_instrument_on_issue28_prompt():
    import ubatch
    from ubatch.model import fetch
    from ubatch.testing.reference import RefModel
    model = "qwen2.5-0.5b"
    path = fetch.path(model)
    c = fd.cases(model)["issue28_chat"]
    assert c["tokens"] == fd.ISSUE28_QWEN
    r = fb.measure_case(ubatch.Model.from_gguf(path), RefModel(str(path)), model, "issue28_chat", c, "f32",
                        ensemble=1)
    e_ub, e_lc, e_ns = map(np.asarray, (r["e_ub"], r["e_lc"], r["e_ns"]))
    print("ubatch", np.round(e_ub, 3), "\nllama.cpp", np.round(e_lc, 3), "\nfloat32 floor", np.round(e_ns, 3))
    assert len(e_ub) == 11 and np.isfinite(e_ns).all()
    # every side sits at the float32 floor of this model (~0.3): no systematic error in ubatch
    assert np.median(e_ub) <= 2 * np.median(e_ns) + 0.05
    assert e_ub.max() <= 3 * max(e_ns.max(), e_lc.max())
    # rows where the reference's top-1 margin exceeds twice the floor: ubatch's top-1 is the reference's
    clear = np.asarray(r["ref_margin"]) > 2 * e_ns.max()
    assert clear.any()
    assert (np.asarray(r["argmax_ub"])[clear] == np.asarray(r["argmax_ref"])[clear]).all()
