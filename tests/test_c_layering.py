"""The C core's layering, read from the `#include "..."` lines of csrc/ (no build needed).

Every folder of csrc/ is a layer on a floor; a file may include headers of its own folder and of folders on
LOWER floors only, so no include can go up or sideways and the folders form no circle:

    floor 0  common/                         shared types, status codes, CPU detection, the thread pool
    floor 1  batch/ memory/ compute/ tokenizer/   the batch allocator, the KV cache metadata, the kernels,
                                                  the tokenizer: independent of each other
    floor 2  grammar/                        GBNF grammars (tokenizes <token> literals with tokenizer/)
    floor 3  engine/                         the generation engine's C (sampling, n-gram drafts)
    floor 4  compat/                         the llama-cpp-python drop-in's C entry points
    floor 5  csrc/ubatch.h                   the umbrella header the CFFI build starts from (includes all)

Also: every quoted include names exactly one header of csrc/ (the build puts every folder on the include path,
so a header is known by its file name alone), and the header graph itself has no cycle."""
import os
import re
import sys
from collections import defaultdict

import pytest

CSRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "csrc")
FLOORS = {"common": 0, "batch": 1, "memory": 1, "compute": 1, "tokenizer": 1, "grammar": 2, "engine": 3,
          "compat": 4, ".": 5}
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def _files():
    out = []
    for root, dirs, files in os.walk(CSRC):
        dirs.sort()
        out += [os.path.join(root, f) for f in sorted(files) if f.endswith((".c", ".h"))]
    return out


def _folder(path):
    rel = os.path.relpath(os.path.dirname(path), CSRC)
    return rel.split(os.sep)[0]


def _graph():
    files = _files()
    by_name = defaultdict(list)
    for f in files:
        if f.endswith(".h"):
            by_name[os.path.basename(f)].append(f)
    edges, errors = {}, []
    for f in files:
        with open(f, encoding="utf-8") as fh:
            names = _INCLUDE.findall(fh.read())
        targets = []
        for n in names:
            hits = by_name.get(os.path.basename(n), [])
            if len(hits) != 1 or os.path.dirname(n):
                errors.append(f"{os.path.relpath(f, CSRC)} includes {n!r}: "
                              f"{'no such header' if not hits else 'ambiguous: ' + str(hits)}")
                continue
            targets.append(hits[0])
        edges[f] = targets
    return edges, errors


def test_every_folder_has_a_floor():
    folders = {_folder(f) for f in _files()}
    assert folders - set(FLOORS) == set(), "a new csrc/ folder needs its floor in FLOORS (and the docstring)"


def test_includes_resolve_to_one_header():
    _, errors = _graph()
    assert not errors, "\n".join(errors)


def test_includes_go_down_the_floors_only():
    edges, _ = _graph()
    bad = []
    for src, targets in edges.items():
        fs = _folder(src)
        for t in targets:
            ft = _folder(t)
            if ft != fs and not FLOORS[ft] < FLOORS[fs]:
                bad.append(f"{os.path.relpath(src, CSRC)} (floor {FLOORS[fs]}, {fs}/) includes "
                           f"{os.path.relpath(t, CSRC)} (floor {FLOORS[ft]}, {ft}/)")
    assert not bad, "includes that go up or sideways:\n" + "\n".join(bad)


def test_no_include_cycle():
    edges, _ = _graph()
    state, stack, cycles = {}, [], []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for t in edges.get(n, []):
            if state.get(t) == 1:
                cycles.append(" -> ".join(os.path.relpath(x, CSRC) for x in stack[stack.index(t):] + [t]))
            elif t not in state:
                visit(t)
        stack.pop()
        state[n] = 2

    for n in sorted(edges):
        if n not in state:
            visit(n)
    assert not cycles, "include cycles:\n" + "\n".join(cycles)


@pytest.mark.parametrize("kind", ["up", "cycle"])
def test_the_checks_catch_a_violation(kind, monkeypatch):
    """The checks above are not vacuous: a planted upward include and a planted cycle are reported."""
    edges, _ = _graph()
    common_h = os.path.join(CSRC, "common", "ub_common.h")
    pool_h = os.path.join(CSRC, "common", "ub_pool.h")
    planted = {k: list(v) for k, v in edges.items()}
    if kind == "up":
        planted[common_h] = planted[common_h] + [os.path.join(CSRC, "engine", "ub_sampling.h")]
        monkeypatch.setattr(sys.modules[__name__], "_graph", lambda: (planted, []))
        with pytest.raises(AssertionError, match="go up or sideways"):
            test_includes_go_down_the_floors_only()
    else:
        planted[common_h] = planted[common_h] + [pool_h]
        planted[pool_h] = planted[pool_h] + [common_h]
        monkeypatch.setattr(sys.modules[__name__], "_graph", lambda: (planted, []))
        with pytest.raises(AssertionError, match="include cycles"):
            test_no_include_cycle()
