"""The fidelity instrument (ubatch bench fidelity) on one short prompt of a real model: the 11-token
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


@pytest.mark.parametrize("model, tokens", [
    ("qwen2.5-0.5b", [151644, 785, 750, 2610, 198, 872, 13, 9834, 45764, 77091, 151645, 11]),
    ("gemma3-270m", [2, 2063, 563, 236779, 2497, 236769, 236749, 107, 106, 2364, 1645, 3617]),
])
def test_reference_graph_exact_on_single_tokens(model, tokens):
    """The reference's qwen2 / gemma3 graphs, checked where no rounding flips: each token alone (position 0,
    one sequence each, decoded together). A row where no float32 difference crossed a rounding boundary
    agrees with ubatch to float32 rounding (measured: 2-8e-6, as llama.cpp's 1-token rows do); the others
    are a flip away (0.06-5). A wrong graph (a norm, a scale, a bias, the GELU table) would leave no row
    within 1e-4."""
    import ubatch
    from ubatch import Batch
    from ubatch.model import fetch
    from ubatch.testing.reference import RefModel, forward
    path = fetch.path(model)
    n = len(tokens)
    ctx = ubatch.Context(ubatch.Model.from_gguf(path), n_ctx=512, n_batch=512, n_ubatch=512, n_seq_max=n,
                         n_threads=2)
    assert ctx.decode(Batch.from_arrays(tokens=tokens, pos=[0] * n, seq_ids=[[s] for s in range(n)],
                                        output=[1] * n)) == 0
    ub = np.stack([ctx.get_logits_ith(i) for i in range(n)])
    ref = forward(RefModel(str(path)), tokens, mode="emulate", kv="f32", pos=[0] * n, seq=list(range(n)))
    d = np.abs(ub - ref).max(axis=1)
    print(model, np.array2string(d, precision=2))
    assert (d < 1e-4).sum() >= 2, d
