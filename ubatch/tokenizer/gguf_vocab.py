"""Read the vocabulary keys of a GGUF file (header and key/value section only; no tensor is touched).

The file is memory-mapped; scalar keys become Python values, numeric arrays numpy copies, and string arrays
(tokens, merges: 100k+ entries) are not decoded in Python at all: they stay `StringArray` spans of the map,
which the C vocabulary reads in one call (`ub_gguf_skip_strings` finds their end without a Python loop).
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from typing import Any, Dict

import numpy as np

from ubatch._ffi import ffi, lib
from ubatch.tokenizer.errors import TokenizerError

GGUF_MAGIC = b"GGUF"
# GGUF value types
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 = range(13)
_SCALAR = {T_U8: "<B", T_I8: "<b", T_U16: "<H", T_I16: "<h", T_U32: "<I", T_I32: "<i", T_F32: "<f",
           T_BOOL: "<?", T_U64: "<Q", T_I64: "<q", T_F64: "<d"}
_NP = {T_U8: "<u1", T_I8: "<i1", T_U16: "<u2", T_I16: "<i2", T_U32: "<u4", T_I32: "<i4", T_F32: "<f4",
       T_BOOL: "<u1", T_U64: "<u8", T_I64: "<i8", T_F64: "<f8"}
TYPE_NAMES = {T_U8: "uint8", T_I8: "int8", T_U16: "uint16", T_I16: "int16", T_U32: "uint32", T_I32: "int32",
              T_F32: "float32", T_BOOL: "bool", T_STR: "string", T_ARR: "array", T_U64: "uint64",
              T_I64: "int64", T_F64: "float64"}


@dataclass
class StringArray:
    """`count` GGUF strings starting at byte `offset` of the mapped file."""
    offset: int
    count: int


@dataclass
class NumArray:
    """A numeric GGUF array: its element type and values."""
    elem_type: int
    values: np.ndarray


class GGUFMetadata:
    """Key/value section of a GGUF file. Keep it open while StringArray spans are used (`close()` after)."""

    def __init__(self, path: "str | os.PathLike[str]") -> None:
        self.path = os.fspath(path)
        try:
            self._f = open(self.path, "rb")
        except OSError as e:
            raise TokenizerError(f"{self.path}: cannot open: {e.strerror}") from e
        try:
            size = os.fstat(self._f.fileno()).st_size
            if size < 24:
                raise TokenizerError(f"{self.path}: not a GGUF file ({size} bytes)")
            self.buf = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_READ)
            self.kv: Dict[str, Any] = {}
            self.types: Dict[str, int] = {}
            self._parse()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        buf = getattr(self, "buf", None)
        if buf is not None:
            buf.close()
            self.buf = None
        if getattr(self, "_f", None) is not None:
            self._f.close()
            self._f = None

    def __enter__(self) -> "GGUFMetadata":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- parsing ---
    def _need(self, off: int, n: int, what: str) -> None:
        if n < 0 or off + n > len(self.buf):
            raise TokenizerError(f"{self.path}: truncated GGUF file while reading {what} at byte {off}")

    def _scalar(self, off: int, t: int, what: str):
        fmt = _SCALAR[t]
        n = struct.calcsize(fmt)
        self._need(off, n, what)
        return struct.unpack_from(fmt, self.buf, off)[0], off + n

    def _string(self, off: int, what: str):
        n, off = self._scalar(off, T_U64, what)
        self._need(off, n, what)
        raw = self.buf[off:off + n]
        try:
            return raw.decode("utf-8"), off + n
        except UnicodeDecodeError:
            return raw.decode("utf-8", "replace"), off + n

    def _parse(self) -> None:
        if self.buf[:4] != GGUF_MAGIC:
            raise TokenizerError(f"{self.path}: not a GGUF file (magic {bytes(self.buf[:4])!r})")
        version = struct.unpack_from("<I", self.buf, 4)[0]
        if version not in (2, 3):
            raise TokenizerError(f"{self.path}: unsupported GGUF version {version} (2 and 3 are read)")
        n_tensors, n_kv = struct.unpack_from("<QQ", self.buf, 8)
        off = 24
        for i in range(n_kv):
            key, off = self._string(off, f"key #{i}")
            t, off = self._scalar(off, T_U32, f"the type of {key}")
            self.types[key] = t
            if t == T_STR:
                val, off = self._string(off, key)
            elif t == T_ARR:
                et, off = self._scalar(off, T_U32, f"the element type of {key}")
                cnt, off = self._scalar(off, T_U64, f"the length of {key}")
                least = 8 if et == T_STR else np.dtype(_NP[et]).itemsize if et in _NP else 0
                if cnt * least > len(self.buf) - off:
                    raise TokenizerError(f"{self.path}: {key}: array of {cnt} elements does not fit in the "
                                         f"{len(self.buf) - off} bytes left in the file")
                if et == T_STR:
                    raw = ffi.from_buffer("uint8_t[]", self.buf)
                    try:
                        end = lib.ub_gguf_skip_strings(raw, len(self.buf), off, cnt)
                    finally:
                        ffi.release(raw)
                    if end < 0:
                        raise TokenizerError(f"{self.path}: {key}: string array runs past the end of the file")
                    val, off = StringArray(off, cnt), end
                elif et in _NP:
                    dt = np.dtype(_NP[et])
                    self._need(off, cnt * dt.itemsize, key)
                    val = NumArray(et, np.frombuffer(self.buf, dtype=dt, count=cnt, offset=off).copy())
                    off += cnt * dt.itemsize
                else:
                    raise TokenizerError(f"{self.path}: {key}: unsupported array element type {et}")
            elif t in _SCALAR:
                val, off = self._scalar(off, t, key)
            else:
                raise TokenizerError(f"{self.path}: {key}: unknown GGUF value type {t}")
            self.kv[key] = val

    # --- typed access ---
    def get(self, key: str, default: Any = None) -> Any:
        return self.kv.get(key, default)

    def type_name(self, key: str) -> str:
        t = self.types.get(key)
        if t == T_ARR:
            v = self.kv[key]
            et = T_STR if isinstance(v, StringArray) else v.elem_type
            return f"array of {TYPE_NAMES.get(et, et)}"
        return TYPE_NAMES.get(t, str(t))

    def string_list(self, key: str) -> list:
        """Decode a (small) string array to Python strings (chat template names etc.)."""
        v = self.kv[key]
        out, off = [], v.offset
        for _ in range(v.count):
            s, off = self._string(off, key)
            out.append(s)
        return out
