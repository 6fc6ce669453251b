"""The two real models re-quantised by llama.cpp to IQ4_XS and IQ3_S (ubatch.bench.quantised: made on first use
from the cached models with llama-cpp-python's llama_model_quantize, never committed) against llama.cpp's logits
recorded on those very files (tests/data/quantised, made by `python -m ubatch.bench.quant_agreement --record
tests/data/quantised`): the real-model agreement rule of ubatch.bench.quant_agreement (argmax on the rows whose
margin is clear of llama.cpp's own noise in all its n_ubatch configurations, per-row max |dlogit| over the top-64
ids within llama.cpp's own spread on >= 99 % of the rows)."""
import os

import pytest

from ubatch.bench import quant_agreement as qa
from ubatch.bench import quantised
from ubatch.model.model import Model

import suite_paths

pytestmark = pytest.mark.realmodel
DATA = os.path.join(suite_paths.DATA, "quantised")
CASES = sorted(f[:-5] for f in os.listdir(DATA) if f.endswith(".json"))


@pytest.mark.parametrize("tag", CASES)
def test_agrees_with_llama_cpp(tag):
    name, ftype = tag.rsplit("-", 1)
    rec = qa.load(DATA, tag)
    path = str(quantised.path(name, ftype))
    assert qa.sha256(path) == rec["sha256"], (f"{path} is not the file llama.cpp was recorded on (llama.cpp's "
                                              f"quantiser gave other bytes?)")
    c = qa.compare(Model.from_gguf(path), rec)
    print(tag, c)
    assert c["clear_rows"] >= 0.5 * c["rows"], c
    assert c["argmax_ok"] == c["clear_rows"], c["bad_argmax"]
    assert c["frac_within"] >= 0.99, c
