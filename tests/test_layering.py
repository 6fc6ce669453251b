"""The floors of the house (docs/architecture.md): every `import` in ubatch/ — at module level or inside a function —
goes from a room to a room on a lower floor, never sideways or up, so there is no import circle between the
subpackages and compute/ imports nothing but common and the compiled module. Read from the source with `ast`
(no import is executed), so a new upward import fails here by file and line."""
import ast
import importlib.metadata
import os
import sys

import pytest

import ubatch

PKG = os.path.dirname(os.path.abspath(ubatch.__file__))

# floor of each room (a subpackage of ubatch, or a group of top-level modules); a room imports only lower floors
FLOORS = {
    "_ffi": 0,                      # the compiled CFFI module (_ffi, _native, _build_ffi)
    "common": 1,                    # errors, limits, params, validation
    "batch": 2, "compute": 2, "grammar": 2, "testing": 2,
    "chat": 3,                      # chat formats, templates, tool plans: text in, text out (grammars for tools)
    "memory": 3,                    # the KV caches plan on batch's ubatches
    "tokenizer": 4,                 # vocabularies, pre-tokenizers; renders chat templates through chat
    "model": 5,                     # GGUF, hyperparameters, weights, archs, the fused forward (on compute)
    "models": 6,                    # the catalogue: ubatch.models.load / tiny_llama
    "engine": 7,                    # Context (the decode loop), model runner, K/V store, LLMEngine, LLM
    "ubatch": 8,                    # the package's facade: ubatch/__init__.py
    "llama_cpp": 9,                 # the llama-cpp-python drop-in
    "server": 10,                   # the OpenAI-compatible server
    "llama_cpp.server": 11, "ray": 11, "viz": 11,
    "bench": 12,
    "cli": 13,                      # ubatch/cli and ubatch/__main__
}


def _subpackages():
    return {n for n in os.listdir(PKG) if os.path.isfile(os.path.join(PKG, n, "__init__.py"))}


def room_of(module: str) -> str:
    """The room of a dotted module name inside ubatch ("ubatch.engine.context" -> "engine")."""
    parts = module.split(".")
    assert parts[0] == "ubatch", module
    if len(parts) == 1:
        return "ubatch"
    head = parts[1]
    if head in ("_ffi", "_native", "_build_ffi"):
        return "_ffi"
    if head == "__main__":
        return "cli"
    if head == "llama_cpp" and len(parts) > 2 and parts[2] == "server":
        return "llama_cpp.server"
    if head in _subpackages():
        return head
    return "ubatch"                 # `from ubatch import Batch`: a name of the facade


def _module_name(path: str) -> str:
    rel = os.path.relpath(path, os.path.dirname(PKG))[:-3].split(os.sep)
    if rel[-1] == "__init__":
        rel = rel[:-1]
    return ".".join(rel)


def imports():
    """(from_module, to_module, file, line) for every import of a ubatch module inside ubatch/."""
    out = []
    for dirpath, _, files in os.walk(PKG):
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            path = os.path.join(dirpath, f)
            me = _module_name(path)
            with open(path, encoding="utf-8") as fh:
                tree = ast.parse(fh.read(), path)
            for node in ast.walk(tree):
                targets = []
                if isinstance(node, ast.Import):
                    targets = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    if node.level:
                        base = me.split(".")
                        base = base[:len(base) - node.level + (1 if f == "__init__.py" else 0)]
                        mod = ".".join(base + ([node.module] if node.module else []))
                    else:
                        mod = node.module or ""
                    targets = [mod + "." + a.name for a in node.names] if mod == "ubatch" else [mod]
                for t in targets:
                    if t == "ubatch" or t.startswith("ubatch."):
                        out.append((me, t, os.path.relpath(path, os.path.dirname(PKG)), node.lineno))
    return out


def test_every_room_has_a_floor():
    rooms = {room_of("ubatch." + n) for n in _subpackages()}
    assert rooms <= set(FLOORS), f"rooms without a floor in FLOORS: {sorted(rooms - set(FLOORS))}"


def test_compute_imports_only_common_and_ffi():
    bad = [(f, line, to) for me, to, f, line in imports()
           if room_of(me) == "compute" and room_of(to) not in ("compute", "common", "_ffi")]
    assert not bad, "compute/ must import only ubatch.common and ubatch._ffi:\n" + "\n".join(
        f"  {f}:{line} imports {to}" for f, line, to in bad)


def test_imports_go_down_the_floors():
    upward = []
    for me, to, f, line in imports():
        a, b = room_of(me), room_of(to)
        if a == b or FLOORS[b] < FLOORS[a]:
            continue
        upward.append(f"  {f}:{line} ({a}, floor {FLOORS[a]}) imports {to} ({b}, floor {FLOORS[b]})")
    assert not upward, "imports sideways or up the floors (docs/architecture.md):\n" + "\n".join(upward)


TESTS = os.path.dirname(os.path.abspath(__file__))


def test_tests_live_in_rooms():
    """At most 5 files directly in tests/; every other test sits in a room folder, and no room folder is named
    like an importable module (the tests folder is on sys.path, where such a folder would pass for it)."""
    top = [f for f in os.listdir(TESTS) if os.path.isfile(os.path.join(TESTS, f)) and not f.startswith(".")]
    assert len(top) <= 5, f"files directly in tests/: {sorted(top)}"
    rooms = [d for d in os.listdir(TESTS) if os.path.isdir(os.path.join(TESTS, d)) and not d.startswith((".", "__"))]
    taken = set(sys.stdlib_module_names) | set(importlib.metadata.packages_distributions()) | {"ubatch"}
    assert not taken & set(rooms), f"room folders named like importable modules: {sorted(taken & set(rooms))}"
    for d in rooms:
        if d not in ("data", "support"):
            assert any(f.startswith("test_") for f in os.listdir(os.path.join(TESTS, d))), f"tests/{d} holds no test"


def test_test_modules_import_only_their_room_and_support():
    """A test module imports helpers (and test modules) of its own room or of tests/support only: each room's folder
    is on sys.path only once pytest has collected it, so a reach into another room works in a whole run and fails
    when that room is run alone."""
    where = {}
    for dirpath, _, files in os.walk(TESTS):
        for f in files:
            if f.endswith(".py") and "data" not in os.path.relpath(dirpath, TESTS).split(os.sep):
                where[f[:-3]] = os.path.relpath(dirpath, TESTS).split(os.sep)[0]
    bad = []
    for dirpath, _, files in os.walk(TESTS):
        room = os.path.relpath(dirpath, TESTS).split(os.sep)[0]
        if room == "data":
            continue
        for f in files:
            if not f.endswith(".py"):
                continue
            path = os.path.join(dirpath, f)
            with open(path, encoding="utf-8") as fh:
                tree = ast.parse(fh.read(), path)
            for node in ast.walk(tree):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module] if isinstance(node, ast.ImportFrom) and not node.level and node.module
                         else [])
                for n in names:
                    home = where.get(n.split(".")[0])
                    if home is not None and home not in (room, "support", "."):
                        bad.append(f"  {os.path.relpath(path, TESTS)}:{node.lineno} imports {n} from tests/{home}")
    assert not bad, "imports across test rooms (move the helper to tests/support):\n" + "\n".join(bad)


@pytest.mark.parametrize("module, room", [("ubatch", "ubatch"), ("ubatch.Batch", "ubatch"),
                                          ("ubatch._native", "_ffi"), ("ubatch.engine.context", "engine"),
                                          ("ubatch.llama_cpp.server.app", "llama_cpp.server"),
                                          ("ubatch.llama_cpp.llama", "llama_cpp")])
def test_room_of(module, room):
    assert room_of(module) == room
