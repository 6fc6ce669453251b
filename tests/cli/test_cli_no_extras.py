"""Every `ubatch` command but `serve` works without the [server] extra; `serve` says which
extra it needs. The child process blocks fastapi / starlette / uvicorn / pydantic at import (as if they were
not installed) and runs the real CLI. (.ci/run also installs the package without extras in a fresh venv.)"""
import subprocess
import sys

from child_process import CHILD_CWD, child_env

BLOCK = r"""
import sys, importlib.abc
class _NoExtra(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("fastapi", "starlette", "uvicorn", "pydantic", "pydantic_core"):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None
sys.meta_path.insert(0, _NoExtra())
from ubatch.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _ubatch(*args: str, timeout: float = 240.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK, *args], cwd=CHILD_CWD, env=child_env(),
                          capture_output=True, text=True, timeout=timeout)


def test_plan_without_server_extra():
    r = _ubatch("plan", "--seqs", "4,4", "--n-ubatch", "3")
    assert r.returncode == 0, r.stderr
    assert "ubatch" in r.stdout.lower() or r.stdout.strip()


def test_run_without_server_extra():
    r = _ubatch("run", "--model", "tiny-llama", "--requests", "3", "--parallel", "2", "--prompt-len", "4-8",
                "--gen-len", "2-4", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "tok" in r.stdout.lower()


def test_serve_without_server_extra_names_the_extra():
    r = _ubatch("serve", "--model", "tiny-llama", "--port", "0")
    assert r.returncode == 2
    assert "ubatch[server]" in r.stderr and "Traceback" not in r.stderr


def test_bench_without_server_extra():
    r = _ubatch("bench", "--quick", "--families", "decode", "--n-ubatch", "8", "--reps", "3", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "timed plans" in r.stdout
