"""Llama(rope_freq_base=..., rope_freq_scale=..., rope_scaling_type=...) are applied (llama.cpp's cparams
derivation, ubatch/llama_cpp/_context.py _rope_model), compared with llama-cpp-python 0.3.36 on Qwen2.5-Coder 0.5B:
the last-token logits of "The capital of France is" (the values below were recorded with the real library on this
machine: Llama(path, n_ctx=256, logits_all=True, **kw).eval(tokens); its top-5 ids and logits). YaRN raises."""
import numpy as np
import pytest

import ubatch.llama_cpp as L

pytestmark = pytest.mark.realmodel
REF = {
    "default": ({}, [12095, 7148, 2598, 106004, 44245], [14.605, 10.497, 9.379, 9.336, 8.826]),
    "base_500k": ({"rope_freq_base": 500000.0}, [12095, 7148, 106004, 2598, 44245],
                  [14.585, 10.303, 9.430, 9.363, 8.892]),
    "scale_0.5": ({"rope_freq_scale": 0.5}, [12095, 7148, 279, 7407, 304], [14.473, 10.518, 9.268, 9.037, 8.827]),
    "none": ({"rope_scaling_type": 0}, [12095, 7148, 2598, 106004, 44245], [14.605, 10.497, 9.379, 9.336, 8.826]),
}


def _last_logits(path, **kw):
    llm = L.Llama(path, n_ctx=256, logits_all=True, verbose=False, **kw)
    try:
        llm.eval(llm.tokenize(b"The capital of France is"))
        return np.array(llm.scores[llm.n_tokens - 1])
    finally:
        llm.close()


def test_rope_parameters_are_applied_as_llama_cpp():
    from ubatch.model import fetch
    path = str(fetch.path("qwen2.5-0.5b"))
    got = {name: _last_logits(path, **kw) for name, (kw, _, _) in REF.items()}
    for name, (kw, ids, logits) in REF.items():
        r = got[name]
        assert list(np.argsort(r)[::-1][:2]) == ids[:2], name
        assert np.max(np.abs(r[ids] - np.array(logits))) < 0.3, (name, r[ids])
    assert np.array_equal(got["none"], got["default"])            # the model has no scaling
    assert not np.array_equal(got["base_500k"], got["default"])   # a different base is really used
    assert {279, 7407} <= set(np.argsort(got["scale_0.5"])[::-1][:4].tolist())   # what scaling changes in 0.3.36
    for kw in ({"rope_scaling_type": 2}, {"yarn_ext_factor": 1.0}, {"yarn_attn_factor": 0.5}):
        with pytest.raises(NotImplementedError, match="YaRN"):
            L.Llama(path, n_ctx=256, verbose=False, **kw)
