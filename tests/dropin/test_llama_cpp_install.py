"""ubatch.llama_cpp.install_as_llama_cpp(): `import llama_cpp` and every submodule ubatch.llama_cpp has (found by
walking the package, not from a list) resolve to ubatch's module objects; names it lacks raise
ModuleNotFoundError; a llama_cpp imported before is displaced and uninstall_as_llama_cpp() restores it. Each
check runs in a fresh interpreter, so the test process's own imports stay untouched."""
import subprocess
import sys
import textwrap

from child_process import CHILD_CWD, child_env


def _run(code: str) -> str:
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       cwd=CHILD_CWD, env=child_env(), timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_every_submodule_resolves_to_ubatch():
    out = _run("""
        import importlib, pkgutil, sys
        import ubatch.llama_cpp as u
        u.install_as_llama_cpp()
        import llama_cpp
        assert llama_cpp is u and llama_cpp.Llama is u.Llama
        names = [m.name for m in pkgutil.walk_packages(u.__path__, "") if m.name != "server" and
                 not m.name.startswith("server.")]
        for n in names:
            mine = importlib.import_module("llama_cpp." + n)
            assert mine is importlib.import_module("ubatch.llama_cpp." + n), n
            assert sys.modules["llama_cpp." + n] is mine
        from llama_cpp.llama_cpp import llama_batch_init, llama_decode
        from llama_cpp.llama import Llama, LlamaState
        import llama_cpp.llama_types as t, llama_cpp._internals as i
        assert Llama is u.llama.Llama and llama_decode is u.llama_cpp.llama_decode
        assert llama_cpp.llama_cpp is u.llama_cpp and llama_cpp.llama is u.llama
        import llama_cpp.server.app as app, llama_cpp.server.settings as st
        assert app is importlib.import_module("ubatch.llama_cpp.server.app") and st.ModelSettings
        for missing in ("llama_cpp.llava_cpp", "llama_cpp.no_such_module", "llama_cpp.llama.sub"):
            try:
                importlib.import_module(missing)
            except ModuleNotFoundError:
                pass
            else:
                raise AssertionError(missing)
        print(len(names))
    """)
    assert int(out) >= 20


def test_displaces_and_restores_a_previous_llama_cpp():
    _run("""
        import sys, types
        fake = types.ModuleType("llama_cpp"); fake.__path__ = []
        sub = types.ModuleType("llama_cpp.llama")
        sys.modules["llama_cpp"], sys.modules["llama_cpp.llama"] = fake, sub
        import ubatch.llama_cpp as u
        u.install_as_llama_cpp()
        u.install_as_llama_cpp()                              # twice: harmless
        import llama_cpp, llama_cpp.llama
        assert llama_cpp is u and llama_cpp.llama is u.llama
        u.uninstall_as_llama_cpp()
        assert sys.modules["llama_cpp"] is fake and sys.modules["llama_cpp.llama"] is sub
        assert not any(k.startswith("llama_cpp.") and k != "llama_cpp.llama" for k in sys.modules)
    """)


def test_lazy_submodules_and_pickle_by_ubatch_name():
    _run("""
        import sys, pickle
        import ubatch.llama_cpp as u
        u.install_as_llama_cpp()
        assert "llama_cpp.llama_cache" in sys.modules            # already imported by ubatch.llama_cpp: aliased
        from llama_cpp import LlamaRAMCache
        assert type(pickle.loads(pickle.dumps(LlamaRAMCache(10)))) is LlamaRAMCache
    """)
