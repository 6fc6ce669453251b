"""`ubatch serve --type-k / --type-v` (and `python -m ubatch.llama_cpp.server --type_k / --type_v`, GGML_TYPE_*
ids): the served engine holds its K/V in those types — a real server on a small llama with head_dim 32
(tests/support/hd32_model.py: the blocks of 32 divide it) answers with the logprobs of an engine of the same types run alone in this process,
bitwise, and not those of the default f16 cache; bad values are refused naming them."""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the [server] extra (fastapi, uvicorn) is not installed")

import hd32_model  # noqa: E402
from server_util import ServerProcess  # noqa: E402

PROMPTS = [[5, 17, 33, 2, 90, 41, 7], [200, 3, 3, 18, 64]]


@pytest.fixture(scope="module")
def hd32(tmp_path_factory):
    return hd32_model.write(tmp_path_factory.mktemp("kvt") / "llama-hd32.gguf")


def _engine_logprobs(path, prompt, **kv):
    import ubatch
    from ubatch.engine.llm_engine import LLMEngine, SamplingParams
    eng = LLMEngine(ubatch.Model.from_gguf(str(path)), n_ctx=256, n_seq_max=1, **kv)
    eng.add_request(prompt, SamplingParams(max_tokens=6, temperature=0.0, logprobs=2), request_id="x")
    out = []
    while eng.has_unfinished_requests():
        for o in eng.step():
            out += [(d["token_id"], d["logprob"]) for d in o.outputs[0].logprobs_delta or []]
    return out


@pytest.mark.parametrize("tk, tv", [("q8_0", "q4_0"), ("iq4_nl", "f16")])
def test_served_kv_types_are_used(hd32, tk, tv):
    with ServerProcess("--parallel", "4", "--n-ctx", "1024", "--type-k", tk, "--type-v", tv, model=str(hd32)) as s:
        with s.client() as c:
            got = []
            for p in PROMPTS:
                r = c.post("/v1/completions", json={"model": "llama-hd32", "prompt": p, "max_tokens": 6,
                                                    "temperature": 0, "logprobs": 2, "return_token_ids": True})
                assert r.status_code == 200, r.text
                ch = r.json()["choices"][0]
                got.append(list(zip(ch["token_ids"], ch["logprobs"]["token_logprobs"])))
    for p, g in zip(PROMPTS, got):
        assert g == _engine_logprobs(hd32, p, type_k=tk, type_v=tv)
        assert g != _engine_logprobs(hd32, p)                     # the default f16 / f16 cache differs


def test_bad_kv_types_are_refused(hd32, capsys):
    from ubatch.cli import main
    with pytest.raises(SystemExit) as e:
        main(["serve", "--model", str(hd32), "--type-k", "q7_0"])
    assert e.value.code == 2 and "'q7_0' is not a K/V cache type" in capsys.readouterr().err
    assert main(["serve", "--model", "tiny-llama", "--port", "0", "--type-v", "q8_0"]) == 2   # head_dim 16
    assert "type_v='q8_0'" in capsys.readouterr().err


def test_llama_cpp_server_type_settings(monkeypatch, capsys):
    from ubatch.llama_cpp.server.__main__ import build_config, main
    monkeypatch.delenv("CONFIG_FILE", raising=False)
    cfg = build_config(["--model", "tiny-llama", "--type_k", "8", "--type_v", "20"])
    assert (cfg.type_k, cfg.type_v) == ("q8_0", "iq4_nl")
    cfg = build_config(["--model", "tiny-llama"])
    assert (cfg.type_k, cfg.type_v) == ("f16", "f16")           # llama.cpp's default (type_k None)
    assert main(["--model", "tiny-llama", "--type_v", "9"]) == 1
    assert "type_v=9: not a K/V cache type" in capsys.readouterr().err
    assert main(["--model", "tiny-llama", "--type_k", "30", "--type_v", "2", "--port", "0"]) == 1   # head_dim 16
    assert "type_v='q4_0'" in capsys.readouterr().err
