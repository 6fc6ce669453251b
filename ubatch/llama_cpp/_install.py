"""install_as_llama_cpp(): make `import llama_cpp` (and every `llama_cpp.<sub>` that ubatch.llama_cpp has) resolve
to ubatch.llama_cpp, for code that imports llama_cpp itself (LangChain, LlamaIndex, ...), the convention of
pymysql.install_as_MySQLdb(). The submodules are not listed here: a meta-path finder maps `llama_cpp.X.Y` to
`ubatch.llama_cpp.X.Y` whenever the latter exists, and imports it only when asked (so `llama_cpp.server` pulls
in FastAPI only if someone imports it). A name ubatch.llama_cpp lacks (llava_cpp, mtmd_cpp, ...) raises
ModuleNotFoundError as a missing module does."""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from typing import Dict, Optional

_ALIAS, _TARGET = "llama_cpp", "ubatch.llama_cpp"


def _target(fullname: str) -> Optional[str]:
    if fullname == _ALIAS:
        return _TARGET
    if fullname.startswith(_ALIAS + "."):
        return _TARGET + fullname[len(_ALIAS):]
    return None


class _AliasLoader(importlib.abc.Loader):
    """Returns the already-imported ubatch module itself (no copy, so `llama_cpp.llama.Llama is
    ubatch.llama_cpp.llama.Llama`); import machinery keeps the module's own __name__ / __spec__."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)

    def exec_module(self, module) -> None:
        pass

    # runpy (`python -m llama_cpp.server`) runs a module's code itself: hand it the ubatch module's
    def get_code(self, fullname):
        spec = importlib.util.find_spec(self.target)
        return spec.loader.get_code(self.target) if spec is not None and spec.loader is not None else None

    def is_package(self, fullname) -> bool:
        spec = importlib.util.find_spec(self.target)
        return spec is not None and spec.submodule_search_locations is not None


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        name = _target(fullname)
        if name is None:
            return None
        if name not in sys.modules:
            try:
                if importlib.util.find_spec(name) is None:
                    return None
            except ModuleNotFoundError:
                return None
        is_pkg = hasattr(importlib.import_module(name), "__path__")
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(name), is_package=is_pkg)


_FINDER = _AliasFinder()
_saved: Optional[Dict[str, object]] = None


def install_as_llama_cpp() -> None:
    """After this call `import llama_cpp`, `import llama_cpp.llama`, `from llama_cpp.llama_types import ...`,
    `python -c 'import llama_cpp.server'` ... give ubatch's modules. A llama_cpp already imported (the real
    llama-cpp-python) is taken out of sys.modules (uninstall_as_llama_cpp() puts it back); objects already taken
    from it stay what they are. Calling it twice is harmless."""
    global _saved
    if _saved is None:
        _saved = {k: v for k, v in sys.modules.items() if k == _ALIAS or k.startswith(_ALIAS + ".")}
    for k in list(sys.modules):
        if (k == _ALIAS or k.startswith(_ALIAS + ".")) and not _is_ours(sys.modules[k]):
            del sys.modules[k]
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    sys.modules[_ALIAS] = importlib.import_module(_TARGET)
    for k, mod in list(sys.modules.items()):     # submodules already imported: alias them now
        if k.startswith(_TARGET + ".") and mod is not None:
            sys.modules.setdefault(_ALIAS + k[len(_TARGET):], mod)


def uninstall_as_llama_cpp() -> None:
    """Undo install_as_llama_cpp(): the llama_cpp entries it made leave sys.modules and the ones it displaced
    (a real llama-cpp-python imported before) come back."""
    global _saved
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    for k in list(sys.modules):
        if k == _ALIAS or k.startswith(_ALIAS + "."):
            del sys.modules[k]
    if _saved:
        sys.modules.update(_saved)
    _saved = None


def _is_ours(mod) -> bool:
    name = getattr(mod, "__name__", "") or ""
    return name == _TARGET or name.startswith(_TARGET + ".")


def is_installed() -> bool:
    return _FINDER in sys.meta_path
