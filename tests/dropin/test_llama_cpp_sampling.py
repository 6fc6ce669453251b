"""The sampler chain of ubatch.llama_cpp against llama-cpp-python 0.3.36 on recorded logits: the same chains
(tests/data/llama_cpp_python/scripts.py), run on the same logits row of qwen2.5-0.5b, must draw the same tokens
with the same candidate sizes, seed for seed (std::mt19937 + libstdc++'s distributions re-created)."""
import ctypes
import json
import os
import sys

import numpy as np
import pytest

import ubatch.llama_cpp as L
from ubatch.llama_cpp._rng import MT19937

import suite_paths  # noqa: E402
DATA = os.path.join(suite_paths.DATA, "llama_cpp_python")
sys.path.insert(0, DATA)
import scripts  # noqa: E402

REF = json.load(open(os.path.join(DATA, "reference.json")))
LOGITS = np.load(os.path.join(DATA, "sampler_logits_qwen.npy"))


@pytest.mark.parametrize("chain", sorted(scripts.CHAINS))
def test_chain_matches_llama_cpp_python(chain):
    got = scripts.run_chain(L, chain, LOGITS, n_draws=24)
    assert got == REF["chains"][chain]


def test_recorded_chains_are_not_trivial():
    """The reference row is spread enough that seeded chains draw several different tokens."""
    distinct = {k: len({d["token"] for d in v}) for k, v in REF["chains"].items()}
    assert distinct["dist_seed_42"] >= 5 and distinct["dist_seed_default_chain"] >= 3
    assert distinct["greedy"] == 1


def test_mt19937_stream_is_std_mt19937():
    # std::mt19937 default seed 5489: the 10000th output is 4123659995 (C++11 [rand.predef])
    r = MT19937(5489)
    assert int(r.raw(10000)[-1]) == 4123659995
    # uniform_real_distribution<double> on mt19937(42): values printed by g++/libstdc++
    r = MT19937(42)
    assert r.uniform_double() == 0.79654298428784598 and r.uniform_double() == 0.18343478789336848


def test_sampler_sample_accepts_and_chain_api():
    chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    L.llama_sampler_chain_add(chain, L.llama_sampler_init_top_k(3))
    L.llama_sampler_chain_add(chain, L.llama_sampler_init_dist(L.LLAMA_DEFAULT_SEED))
    assert L.llama_sampler_chain_n(chain) == 2
    assert L.llama_sampler_name(L.llama_sampler_chain_get(chain, 0)) == b"top-k"
    assert not L.llama_sampler_chain_get(chain, 5)
    assert L.llama_sampler_get_seed(chain) != L.LLAMA_DEFAULT_SEED     # a random seed was drawn
    clone = L.llama_sampler_clone(chain)
    assert L.llama_sampler_chain_n(clone) == 2
    removed = L.llama_sampler_chain_remove(chain, 0)
    assert L.llama_sampler_name(removed) == b"top-k" and L.llama_sampler_chain_n(chain) == 1
    L.llama_sampler_free(removed)
    L.llama_sampler_free(chain)
    L.llama_sampler_free(clone)
    with pytest.raises(ValueError, match="freed"):
        L.llama_sampler_chain_n(chain)


def test_chain_without_selector_raises_instead_of_aborting():
    chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    L.llama_sampler_chain_add(chain, L.llama_sampler_init_top_k(3))
    from ubatch.llama_cpp._sampler_api import sample_row
    with pytest.raises(RuntimeError, match="greedy, dist or mirostat"):
        sample_row(chain, LOGITS)
    L.llama_sampler_free(chain)


def test_caller_owned_token_data_array_is_modified_in_place():
    n = LOGITS.shape[0]
    data = (L.llama_token_data * n)()
    view = np.frombuffer(data, dtype=np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")]))
    view["id"], view["logit"] = np.arange(n), LOGITS
    cur = L.llama_token_data_array(data, n, -1, False)
    smpl = L.llama_sampler_init_top_k(10)
    L.llama_sampler_apply(smpl, cur)                 # a Structure passed where a POINTER is declared
    assert cur.size == 10 and cur.sorted
    assert view["id"][:10].tolist() == np.argsort(-LOGITS, kind="stable")[:10].tolist()
    L.llama_sampler_apply(L.llama_sampler_init_greedy(), ctypes.pointer(cur))
    assert cur.data[cur.selected].id == int(np.argmax(LOGITS))


@pytest.mark.filterwarnings("ignore:memory leak in callback function")
def test_custom_sampler_from_python_callbacks():
    seen = []

    @L.llama_sampler_i_apply
    def apply(smpl, cur_p):
        seen.append(cur_p.contents.size)
        cur_p.contents.data[7].logit = 1e9

    @L.llama_sampler_i_name
    def name(smpl):
        return b"mine"

    iface = L.llama_sampler_i()
    iface.apply, iface.name = apply, name
    chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    L.llama_sampler_chain_add(chain, L.llama_sampler_init(ctypes.pointer(iface), None))
    L.llama_sampler_chain_add(chain, L.llama_sampler_init_greedy())
    from ubatch.llama_cpp._sampler_api import sample_row
    assert sample_row(chain, LOGITS) == 7 and seen == [LOGITS.shape[0]]
    assert L.llama_sampler_name(L.llama_sampler_chain_get(chain, 0)) == b"mine"
