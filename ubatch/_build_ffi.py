"""CFFI build script (out-of-line API mode): compiles every csrc/**/*.c into ubatch._native.

Sources are found recursively (csrc/common, csrc/batch, csrc/memory, csrc/compute, ...), so a new file
cannot be left out; every folder of csrc/ is an include directory, so a header is named by its file
name alone. The cdef is generated from the C headers themselves: starting at csrc/ubatch.h, every
`#include "x.h"` is followed in order and the text between `/* cdef:begin */` and `/* cdef:end */`
is taken. One source of truth: the headers.
"""
import glob
import os
import re

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(os.path.dirname(HERE), "csrc")
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
_BLOCK = re.compile(r"/\* cdef:begin \*/(.*?)/\* cdef:end \*/", re.S)


def _include_dirs() -> list:
    dirs = [CSRC]
    for root, subdirs, _files in os.walk(CSRC):
        subdirs.sort()
        dirs.extend(os.path.join(root, d) for d in subdirs)
    return dirs


def _find_header(name: str) -> str:
    hits = [os.path.join(d, name) for d in _include_dirs() if os.path.isfile(os.path.join(d, name))]
    if len(hits) != 1:
        raise RuntimeError(f"header {name!r}: {'not found' if not hits else 'found twice: ' + ', '.join(hits)}")
    return hits[0]


def _sources() -> list:
    found = glob.glob(os.path.join(CSRC, "**", "*.c"), recursive=True)
    return sorted(os.path.relpath(p, os.path.dirname(HERE)) for p in found)


def _headers() -> list:
    """Every csrc/**/*.h: the extension's dependencies, so that editing a header rebuilds it."""
    found = glob.glob(os.path.join(CSRC, "**", "*.h"), recursive=True)
    return sorted(os.path.relpath(p, os.path.dirname(HERE)) for p in found)


def cdef_from_headers(root: str = "ubatch.h") -> str:
    seen, parts = set(), []

    def visit(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        with open(_find_header(name)) as f:
            text = f.read()
        for line in text.splitlines():
            m = _INCLUDE.match(line)
            if m:
                visit(m.group(1))
        parts.extend(_BLOCK.findall(text))

    visit(root)
    return "\n".join(parts)


def _extra_compile_args() -> list:
    args = ["-O2", "-std=c99", "-Wall", "-Wextra", "-pthread"]
    args += os.environ.get("UBATCH_CFLAGS", "").split()
    return args


ffibuilder = FFI()
ffibuilder.cdef(cdef_from_headers())
ffibuilder.set_source(
    "ubatch._native",
    '#include "ubatch.h"',
    sources=_sources(),
    depends=_headers(),
    include_dirs=_include_dirs(),
    extra_compile_args=_extra_compile_args(),
    extra_link_args=["-pthread", "-lm"] + os.environ.get("UBATCH_LDFLAGS", "").split(),
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
