"""`python -m ubatch.llama_cpp.server`: llama-cpp-python 0.3.36's server command line, environment variables and
config file (JSON / YAML, its settings names) mapped onto ubatch serve (ubatch/llama_cpp/server/), and a real
process serving /v1/completions and /v1/models with the model alias, also as `python -m llama_cpp.server` after
install_as_llama_cpp()."""
import json
import re
import subprocess
import sys
import time

import httpx
import pytest

from child_process import CHILD_CWD, child_env

from ubatch.llama_cpp.server.__main__ import build_config, main
from ubatch.llama_cpp.server.app import resolve
from ubatch.llama_cpp.server.settings import ConfigFileSettings, Settings


def test_command_line_maps_onto_ubatch_serve(monkeypatch):
    monkeypatch.delenv("CONFIG_FILE", raising=False)
    cfg = build_config(["--model", "tiny-llama", "--model_alias", "my-model", "--n_ctx", "1024", "--n_batch", "256",
                        "--host", "0.0.0.0", "--port", "8123", "--api_key", "k", "--chat_format", "chatml",
                        "--embedding", "true", "--n_gpu_layers", "-1", "--draft_model", "prompt-lookup-decoding",
                        "--draft_model_num_pred_tokens", "5", "--parallel", "2"])
    assert (cfg.model, cfg.model_id, cfg.host, cfg.port, cfg.api_key, cfg.chat_format) == \
        ("tiny-llama", "my-model", "0.0.0.0", 8123, "k", "chatml")
    assert (cfg.parallel, cfg.n_ctx, cfg.n_batch, cfg.n_ubatch) == (2, 2048, 256, 256)   # n_ctx is per request
    assert (cfg.draft, cfg.draft_max) == ("prompt-lookup", 5)
    monkeypatch.setenv("MODEL", "tiny-llama")
    monkeypatch.setenv("N_CTX", "512")
    monkeypatch.setenv("PORT", "9000")
    cfg = build_config([])
    assert (cfg.model, cfg.n_ctx // cfg.parallel, cfg.port) == ("tiny-llama", 512, 9000)
    with pytest.raises(SystemExit):
        build_config(["--model", "x", "--embedding", "maybe"])


def test_config_files_and_refusals(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("CONFIG_FILE", raising=False)
    j = tmp_path / "c.json"
    j.write_text(json.dumps({"host": "127.0.0.1", "port": 8001, "models": [
        {"model": "tiny-llama", "model_alias": "a", "n_ctx": 256, "chat_format": "chatml"}]}))
    y = tmp_path / "c.yaml"
    y.write_text("host: 127.0.0.1\nport: 8002\nmodels:\n  - model: tiny-llama\n    model_alias: b\n    n_ctx: 128\n")
    a = build_config(["--config_file", str(j)])
    b = build_config(["--config_file", str(y)])
    assert (a.port, a.model_id, a.n_ctx // a.parallel, a.chat_format) == (8001, "a", 256, "chatml")
    assert (b.port, b.model_id, b.n_ctx // b.parallel) == (8002, "b", 128)
    monkeypatch.setenv("CONFIG_FILE", str(y))
    assert build_config([]).model_id == "b"
    monkeypatch.delenv("CONFIG_FILE")
    two = tmp_path / "two.json"
    two.write_text(json.dumps({"models": [{"model": "tiny-llama"}, {"model": "gemma3-270m"}]}))
    for argv, needle in (([ "--config_file", str(two)], "one model per process"),
                         (["--model", "tiny-llama", "--lora_path", "x.gguf"], "lora_path"),
                         (["--model", "tiny-llama", "--rope_freq_base", "5e5"], "RoPE"),
                         (["--model", "tiny-llama", "--type_k", "9"], "type_k=9"),
                         (["--config_file", str(tmp_path / "none.json")], "not found")):
        assert main(argv) == 1
        assert needle in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown setting"):
        ConfigFileSettings(models=[{"model": "m", "n_ctxx": 1}])
    with pytest.raises(ValueError, match="'model'"):
        resolve(settings=Settings())


def _serve(args, module="ubatch.llama_cpp.server"):
    code = ("import sys, runpy, ubatch.llama_cpp as u; u.install_as_llama_cpp(); sys.argv = ['x'] + sys.argv[1:]; "
            f"runpy.run_module({module!r}, run_name='__main__')")
    proc = subprocess.Popen([sys.executable, "-c", code, *args], cwd=CHILD_CWD, env=child_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline, url, log = time.monotonic() + 120, None, []
    while url is None:
        line = proc.stderr.readline()
        log.append(line)
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        if m:
            url = m.group(1)
        elif (not line and proc.poll() is not None) or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("server did not start:\n" + "".join(log))
    return proc, url


@pytest.mark.parametrize("module", ["ubatch.llama_cpp.server", "llama_cpp.server"])
def test_serves_with_llama_cpp_server_arguments(module):
    proc, url = _serve(["--model", "tiny-llama", "--model_alias", "alias-1", "--n_ctx", "256", "--host",
                        "127.0.0.1", "--port", "0", "--parallel", "2"], module)
    try:
        with httpx.Client(base_url=url, timeout=60) as c:
            assert c.get("/v1/models").json()["data"][0]["id"] == "alias-1"
            r = c.post("/v1/completions", json={"model": "alias-1", "prompt": "hello", "max_tokens": 4,
                                                "temperature": 0})
            assert r.status_code == 200 and r.json()["object"] == "text_completion"
            assert r.json()["usage"]["completion_tokens"] <= 4
    finally:
        proc.terminate()
        proc.wait(30)
