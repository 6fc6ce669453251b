"""The floors of the house (docs/architecture.md): every `import` in ubatch/ — at module level or inside a function —
goes from a room to a room on a lower floor, never sideways or up, so there is no import circle between the
subpackages and compute/ imports nothing but common and the compiled module. Read from the source with `ast`
(no import is executed), so a new upward import fails here by file and line."""
import ast
import os

import pytest

import ubatch

PKG = os.path.dirname(os.path.abspath(ubatch.__file__))

# floor of each room (a subpackage of ubatch, or a group of top-level modules); a room imports only lower floors
FLOORS = {
    "_ffi": 0,                      # the compiled CFFI module (_ffi, _native, _build_ffi)
    "common": 1,                    # errors, limits, params, validation
    "batch": 2, "compute": 2, "grammar": 2, "tokenizer": 2, "testing": 2,
    "memory": 3,                    # the KV caches plan on batch's ubatches
    "model": 3,                     # GGUF, hyperparameters, weights, archs, the fused forward (on compute)
    "models": 4,                    # the catalogue: ubatch.models.load / tiny_llama
    "chat": 5,                      # chat formats, templates, tool plans (llama-cpp-python's formatters)
    "engine": 6,                    # Context (the decode loop), model runner, K/V store, LLMEngine, LLM
    "ubatch": 7,                    # the package's facade: ubatch/__init__.py
    "llama_cpp": 8,                 # the llama-cpp-python drop-in
    "server": 9,                    # the OpenAI-compatible server
    "llama_cpp.server": 10, "ray": 10, "viz": 10,
    "bench": 11,
    "cli": 12,                      # ubatch/cli and ubatch/__main__
}

# upward imports still waiting for their move (each one a circle); this set must shrink to nothing, and the test
# fails as well when one of them is gone but still listed here
KNOWN_UPWARD = {
    ("tokenizer", "chat"),          # tokenizer/chat_encode.py, chat_template.py render through chat.jinja
    ("chat", "engine"),             # chat/tool_plan.py probes engine.sampling.SamplingParams
    ("chat", "llama_cpp"),          # chat/jinja_formatter.py returns llama_cpp's StoppingCriteriaList, handler
    ("engine", "llama_cpp"),        # engine/speculative.py: llama_cpp.llama_speculative.prompt_lookup_ngram
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
    upward, seen = [], set()
    for me, to, f, line in imports():
        a, b = room_of(me), room_of(to)
        if a == b or FLOORS[b] < FLOORS[a]:
            continue
        seen.add((a, b))
        if (a, b) not in KNOWN_UPWARD:
            upward.append(f"  {f}:{line} ({a}, floor {FLOORS[a]}) imports {to} ({b}, floor {FLOORS[b]})")
    assert not upward, "imports sideways or up the floors (docs/architecture.md):\n" + "\n".join(upward)
    stale = KNOWN_UPWARD - seen
    assert not stale, f"no longer imported, drop from KNOWN_UPWARD: {sorted(stale)}"


@pytest.mark.parametrize("module, room", [("ubatch", "ubatch"), ("ubatch.Batch", "ubatch"),
                                          ("ubatch._native", "_ffi"), ("ubatch.engine.context", "engine"),
                                          ("ubatch.llama_cpp.server.app", "llama_cpp.server"),
                                          ("ubatch.llama_cpp.llama", "llama_cpp")])
def test_room_of(module, room):
    assert room_of(module) == room
