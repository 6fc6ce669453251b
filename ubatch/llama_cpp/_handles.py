"""Opaque handles: llama.cpp returns pointers, llama-cpp-python hands them to Python as ints (c_void_p), so
every model / context / vocab / memory / sampler of the layer is named by a real address: that of a small
CFFI allocation owned by the registry. Freed objects keep their address reserved (a tombstone), so a stale
handle is recognised as freed and an address is never reused while a caller may still hold it."""
from __future__ import annotations

import ctypes
import threading
from typing import Any, Dict, Tuple

from ubatch._ffi import ffi


class HandleError(ValueError):
    """A handle that is NULL, unknown, freed or of the wrong kind."""


class Registry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: Dict[int, Tuple[str, Any]] = {}
        self._cells: Dict[int, Any] = {}     # address -> the CFFI allocation that owns it (kept forever)
        self._dead: Dict[int, str] = {}

    def new(self, kind: str, obj: Any) -> int:
        cell = ffi.new("char[16]")
        addr = int(ffi.cast("uintptr_t", cell))
        with self._lock:
            self._cells[addr] = cell
            self._live[addr] = (kind, obj)
        return addr

    def get(self, h: Any, kind: str) -> Any:
        ent = self._live.get(h) if type(h) is int else None
        if ent is not None and ent[0] == kind:      # the common case: a live handle of that kind, as an int
            return ent[1]
        addr = address(h)
        if addr == 0:
            raise HandleError(f"{kind} handle is NULL")
        ent = self._live.get(addr)
        if ent is None:
            what = self._dead.get(addr)
            if what is not None:
                raise HandleError(f"{kind} handle 0x{addr:x} was freed")
            raise HandleError(f"0x{addr:x} is not a {kind} handle of ubatch.llama_cpp")
        if ent[0] != kind:
            raise HandleError(f"0x{addr:x} is a {ent[0]} handle, not a {kind}")
        return ent[1]

    def find(self, h: Any, kind: str) -> Any:
        """Like get but None instead of raising."""
        if type(h) is int:
            ent = self._live.get(h)
            if ent is not None:
                return ent[1] if ent[0] == kind else None
        try:
            return self.get(h, kind)
        except HandleError:
            return None

    def free(self, h: Any) -> Any:
        addr = address(h)
        with self._lock:
            ent = self._live.pop(addr, None)
            if ent is not None:
                self._dead[addr] = ent[0]
        return None if ent is None else ent[1]


def address(h: Any) -> int:
    """The integer address of a handle given as an int, a ctypes c_void_p / pointer, or an object carrying one."""
    if h is None:
        return 0
    if isinstance(h, bool):
        raise HandleError("a handle cannot be a bool")
    if isinstance(h, int):
        return h & (2**64 - 1)
    if isinstance(h, ctypes.c_void_p):
        return h.value or 0
    if isinstance(h, (ctypes.Array, ctypes.Structure)):
        return ctypes.addressof(h)
    if isinstance(h, ctypes.c_char_p):
        return ctypes.cast(h, ctypes.c_void_p).value or 0
    if isinstance(h, ctypes._Pointer):
        return ctypes.cast(h, ctypes.c_void_p).value or 0
    for attr in ("_handle", "ctx", "model", "sampler", "vocab", "memory"):
        v = getattr(h, attr, None)
        if isinstance(v, int):
            return v
    try:
        import numpy as np
        if isinstance(h, np.integer):
            return int(h) & (2**64 - 1)
    except ImportError:  # pragma: no cover
        pass
    raise HandleError(f"not a handle: {type(h).__name__}")


REGISTRY = Registry()
