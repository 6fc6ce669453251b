"""The kernel back-ends: which ones this CPU can run, which one runs, and the UBATCH_KERNELS override.

    backends()          # e.g. ['generic', 'avx2', 'avxvnni', 'avx512'] (what this CPU and OS support)
    active_backend()    # the one in use, e.g. 'avx512'
    set_backend(name)   # 'generic' | 'avx2' | 'avxvnni' | 'avx512' | 'auto'; ValueError if the CPU lacks it

The CPU is probed once, in C (csrc/compute/mm_cpu.c: cpuid + xgetbv). The automatic choice is the widest
back-end the CPU has (avx512, avxvnni, avx2, generic). UBATCH_KERNELS=<name> forces one at start-up; an
unknown name or one this CPU lacks raises ValueError naming it when ubatch's kernels are imported.
Every back-end is batch-invariant on its own (bitwise); avx2, avxvnni and avx512 also give bitwise the same
matmul results as each other, generic differs from them in the last bits (docs/kernels.md).
"""
from __future__ import annotations

import os

from ubatch._ffi import lib

NAMES = ("generic", "avx2", "avxvnni", "avx512")
_IDS = {n: i for i, n in enumerate(NAMES)}


def backends() -> list:
    """The back-ends this CPU (and OS) can run, simplest first; 'generic' is always there."""
    m = lib.ub_mm_cpu_backends()
    return [n for i, n in enumerate(NAMES) if m & (1 << i)]


def active_backend() -> str:
    """The back-end the kernels use now."""
    return NAMES[lib.ub_mm_backend()]


def set_backend(name: str) -> str:
    """Use back-end ``name`` ('generic', 'avx2', 'avxvnni', 'avx512', or 'auto' = the automatic choice,
    UBATCH_KERNELS included) for later calls; returns the back-end now in use. ValueError naming the
    choice when it is unknown or this CPU lacks it (nothing changes then). Do not call while another
    thread runs a kernel."""
    if name == "auto":
        return NAMES[lib.ub_mm_set_backend(-1)]
    if name not in _IDS:
        raise ValueError(f"unknown kernel back-end {name!r} (choose from {', '.join(NAMES)} or auto)")
    if name not in backends():
        raise ValueError(f"kernel back-end {name!r} is not supported by this CPU (it has: {', '.join(backends())})")
    return NAMES[lib.ub_mm_set_backend(_IDS[name])]


def check_env() -> None:
    """ValueError when UBATCH_KERNELS names an unknown back-end or one this CPU lacks."""
    v = os.environ.get("UBATCH_KERNELS", "")
    if v in ("", "auto"):
        return
    if v not in _IDS:
        raise ValueError(f"UBATCH_KERNELS={v!r} is not a kernel back-end (choose from {', '.join(NAMES)} or auto)")
    if v not in backends():
        raise ValueError(f"UBATCH_KERNELS={v!r}: this CPU lacks that back-end (it has: {', '.join(backends())})")


check_env()

__all__ = ["NAMES", "backends", "active_backend", "set_backend", "check_env"]
