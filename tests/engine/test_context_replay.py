"""Replays every llama.cpp decode scenario through a planning-only Context: after every step the return
code, every sequence's position range, each stream's used count / used_max_p1 / has_shift and full
cell table (index, pos, seq ids), and the derived context parameters must equal the recording."""
import os

import pytest

from kv_replay import expected_memory, load, make_context, memory_state, run_step, scenario_files

FILES = scenario_files()


def test_all_scenarios_present():
    assert len(FILES) == 61, f"expected the 61 recorded decode scenarios in tests/data/decode, found {len(FILES)}"


@pytest.mark.parametrize("path", FILES, ids=[os.path.basename(p)[:-5] for p in FILES])
def test_replay(path):
    d = load(path)
    scen, res = d["scenario"], d["result"]
    c = make_context(scen["ctx"])
    eff = res["ctx_effective"]
    assert (c.n_ctx, c.n_ctx_seq, c.n_batch, c.n_ubatch, c.n_seq_max) == \
        (eff["n_ctx"], eff["n_ctx_seq"], eff["n_batch"], eff["n_ubatch"], eff["n_seq_max"])
    assert c.memory.n_stream == (1 if eff["kv_unified"] else eff["n_seq_max"])
    assert c.memory.size == eff["n_ctx_seq"]
    assert len(res["steps"]) == len(scen["steps"])
    for k, (rec, step) in enumerate(zip(res["steps"], scen["steps"])):
        assert rec["step"] == k and rec["op"] == step["op"]
        ret = run_step(c, step)
        if "ret" in rec and rec["ret"] is not None:
            assert ret == rec["ret"], f"step {rec['step']} ({step['op']}): ret {ret} != {rec['ret']}"
        if step["op"] == "decode" and rec["ret"] == 0:
            assert sorted(int(i) for i in (c.output_ids >= 0).nonzero()[0]) == [r["i"] for r in rec["rows"]]
            assert c.n_outputs == len(rec["rows"])
        got = memory_state(c, scen["ctx"]["n_seq_max"])
        want = expected_memory(rec["memory"])
        assert got["seq_pos"] == want["seq_pos"], f"step {rec['step']} ({step['op']}): seq_pos"
        for g, w in zip(got["kv"], want["kv"]):
            assert g == w, f"step {rec['step']} ({step['op']}): stream {w['stream']}"
        assert len(got["kv"]) == len(want["kv"])
