"""Up-front size checks: an object that would need more memory than this machine has is refused with a
ValueError naming the size it would need, before anything is allocated (instead of a MemoryError deep
inside numpy or C, or a lazily committed allocation that fails later)."""
from __future__ import annotations

import os

from ubatch._ffi import lib

# from the C header (csrc/common/ub_common.h), one definition
LLAMA_MAX_SEQ: int = int(lib.UB_MAX_SEQ)        # sequence ids 0..255; width of a sequence set
MAX_TOKENS: int = int(lib.UB_MAX_TOKENS)        # the most rows a batch may have
KV_CELL_BYTES: int = int(lib.ub_kv_cell_bytes())  # metadata bytes per KV cell (csrc/memory)


def physical_memory() -> int:
    """Bytes of RAM of this machine (1 TiB when unknown)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 2**40


def fmt_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024:
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def check_bytes(what: str, need: int) -> None:
    """Raises ValueError('<what> would need X (N bytes), more than this machine's RAM') when need exceeds
    the physical memory."""
    ram = physical_memory()
    if need > ram:
        raise ValueError(f"{what} would need {fmt_bytes(need)} ({need} bytes), more than this machine's "
                         f"{fmt_bytes(ram)} of memory")
