"""GGUF file reading: the metadata and the tensor directory, with every tensor a memory-mapped uint8 view of
its bytes in their block layout (never expanded to float32, never copied).

A direct reader of the GGUF v2/v3 header (little-endian): the `gguf` package's GGUFReader builds one numpy
view per array element and takes ~15 s on a 150k-token vocabulary; this one reads numeric arrays with one
`np.frombuffer` and walks string arrays by their lengths. Every structural problem — bad magic or version, a
key or tensor record running past the end, an unknown value or tensor type, a tensor whose data lies beyond
the end of the file (a truncated download) — raises GGUFError naming the file and the culprit.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# ggml_type -> (name, block size in elements, bytes per block) for the types a model may hold
GGML_TYPES: Dict[int, Tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 30: ("BF16", 1, 2),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136),
    29: ("IQ1_M", 256, 56), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17),
    40: ("NVFP4", 64, 36), 41: ("Q1_0", 128, 18), 42: ("Q2_0", 64, 18),
}
SUPPORTED_TYPES = tuple(t[0] for t in GGML_TYPES.values())   # the weight types ubatch reads, by name
# types llama.cpp 0c1e570 knows that ubatch does not read (named in its errors)
_OTHER_TYPE_NAMES = {9: "Q8_1", 15: "Q8_K", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64"}

# GGUF metadata value types
_SCALARS = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?", 10: "<u8",
            11: "<i8", 12: "<f8"}
_STRING, _ARRAY = 8, 9
MAX_ARRAY_DEPTH = 16      # arrays of arrays nested deeper are refused (no model uses more than 2)


class GGUFError(ValueError):
    """A GGUF file that cannot be used; the message names the file and the key / tensor at fault."""


def type_name(ggml_type: int) -> str:
    if ggml_type in GGML_TYPES:
        return GGML_TYPES[ggml_type][0]
    return _OTHER_TYPE_NAMES.get(ggml_type, f"type {ggml_type}")


@dataclass(frozen=True)
class TensorInfo:
    """One tensor: ne = GGUF dims (ne[0] fastest); data = uint8 view of its bytes in the file map."""
    name: str
    ne: Tuple[int, ...]
    ggml_type: int
    offset: int          # absolute file offset of the first byte
    nbytes: int
    data: np.ndarray     # uint8[nbytes], a view of the file's memmap

    @property
    def type_name(self) -> str:
        return type_name(self.ggml_type)

    @property
    def n_rows(self) -> int:
        """Rows of the logical [n_rows, n_cols] matrix (product of ne[1:])."""
        n = 1
        for d in self.ne[1:]:
            n *= d
        return n

    @property
    def n_cols(self) -> int:
        return self.ne[0] if self.ne else 1


class _Cursor:
    def __init__(self, buf: memoryview, path: str) -> None:
        self.buf, self.off, self.path = buf, 0, path

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.off + n > len(self.buf):
            raise GGUFError(f"{self.path}: truncated GGUF header while reading {what} "
                            f"(needs {n} bytes at offset {self.off}, file has {len(self.buf)})")

    def unpack(self, fmt: str, what: str):
        n = struct.calcsize(fmt)
        self.need(n, what)
        v = struct.unpack_from(fmt, self.buf, self.off)
        self.off += n
        return v[0] if len(v) == 1 else v

    def string(self, what: str) -> str:
        n = self.unpack("<Q", what)
        self.need(n, what)
        s = bytes(self.buf[self.off:self.off + n])
        self.off += n
        try:
            return s.decode("utf-8")
        except UnicodeDecodeError:
            return s.decode("utf-8", errors="replace")

    def value(self, vtype: int, key: str, depth: int = 0) -> Any:
        if vtype in _SCALARS:
            dt = np.dtype(_SCALARS[vtype])
            self.need(dt.itemsize, key)
            v = np.frombuffer(self.buf, dt, 1, self.off)[0]
            self.off += dt.itemsize
            return v.item()
        if vtype == _STRING:
            return self.string(key)
        if vtype == _ARRAY:
            if depth >= MAX_ARRAY_DEPTH:
                raise GGUFError(f"{self.path}: metadata key {key!r} nests arrays deeper than {MAX_ARRAY_DEPTH}")
            etype, count = self.unpack("<IQ", key)
            # every element takes at least its minimal encoding: a count the rest of the file cannot hold is
            # refused before anything is allocated
            least = np.dtype(_SCALARS[etype]).itemsize if etype in _SCALARS else 8 if etype == _STRING else 12
            if count * least > len(self.buf) - self.off:
                raise GGUFError(f"{self.path}: metadata key {key!r}: array of {count} elements does not fit in the "
                                f"{len(self.buf) - self.off} bytes left in the file (offset {self.off})")
            if etype in _SCALARS:
                dt = np.dtype(_SCALARS[etype])
                self.need(count * dt.itemsize, key)
                arr = np.frombuffer(self.buf, dt, count, self.off).copy()
                self.off += count * dt.itemsize
                return arr
            if etype == _STRING:
                out: List[str] = []
                for _ in range(count):
                    out.append(self.string(key))
                return out
            if etype == _ARRAY:
                return [self.value(_ARRAY, key, depth + 1) for _ in range(count)]
            raise GGUFError(f"{self.path}: metadata key {key!r} is an array of unknown value type {etype}")
        raise GGUFError(f"{self.path}: metadata key {key!r} has unknown value type {vtype}")


class GGUFFile:
    """A parsed GGUF file: `metadata` (key -> value; arrays as numpy arrays or lists), `kv_spans` (key -> the
    byte range of its encoded pair), `tensors` (name -> TensorInfo in file order), `path`, `size`. The file stays memory-mapped read-only while this
    object (or any tensor view) lives."""

    def __init__(self, path: "str | os.PathLike") -> None:
        self.path = os.fspath(path)
        if not os.path.isfile(self.path):
            raise FileNotFoundError(f"GGUF file not found: {self.path}")
        self.size = os.path.getsize(self.path)
        if self.size < 24:
            raise GGUFError(f"{self.path}: not a GGUF file (only {self.size} bytes)")
        self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        cur = _Cursor(memoryview(self._map), self.path)
        if bytes(self._map[:4]) != GGUF_MAGIC:
            raise GGUFError(f"{self.path}: not a GGUF file (magic {bytes(self._map[:4])!r})")
        cur.off = 4
        self.version = cur.unpack("<I", "version")
        if self.version not in (2, 3):
            raise GGUFError(f"{self.path}: unsupported GGUF version {self.version} (supported: 2, 3)")
        n_tensors, n_kv = cur.unpack("<QQ", "tensor/kv counts")
        # a key/value pair takes at least 12 bytes, a tensor record 32: counts the file cannot hold are corrupt
        if n_tensors * 32 + n_kv * 12 > self.size - cur.off:
            raise GGUFError(f"{self.path}: corrupt header (tensor_count {n_tensors}, kv_count {n_kv} do not fit in "
                            f"a file of {self.size} bytes)")
        self.metadata: Dict[str, Any] = {}
        self.kv_spans: Dict[str, Tuple[int, int]] = {}   # key -> (start, end) of its encoded pair in the file
        for i in range(n_kv):
            start = cur.off
            key = cur.string(f"metadata key #{i}")
            vtype = cur.unpack("<I", key)
            self.metadata[key] = cur.value(vtype, key)
            self.kv_spans[key] = (start, cur.off)
        raw = []
        for i in range(n_tensors):
            name = cur.string(f"tensor record #{i}")
            n_dims = cur.unpack("<I", f"tensor {name!r}")
            if not 1 <= n_dims <= 4:
                raise GGUFError(f"{self.path}: tensor {name!r} has {n_dims} dimensions (1..4 supported)")
            ne = tuple(int(cur.unpack("<Q", f"tensor {name!r}")) for _ in range(n_dims))
            gtype, off = cur.unpack("<IQ", f"tensor {name!r}")
            raw.append((name, ne, gtype, off))
        align = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if isinstance(align, bool) or not isinstance(align, int):
            raise GGUFError(f"{self.path}: general.alignment must be an unsigned integer, got "
                            f"{type(align).__name__}")
        if align <= 0 or align & (align - 1):
            raise GGUFError(f"{self.path}: general.alignment = {align} is not a power of two")
        data_start = (cur.off + align - 1) // align * align
        self.tensors: Dict[str, TensorInfo] = {}
        for name, ne, gtype, off in raw:
            if name in self.tensors:
                raise GGUFError(f"{self.path}: tensor {name!r} appears twice")
            if gtype not in GGML_TYPES:
                raise GGUFError(f"{self.path}: tensor {name!r} has unsupported type {type_name(gtype)} "
                                f"(supported: {', '.join(t[0] for t in GGML_TYPES.values())})")
            tname, bs, ts = GGML_TYPES[gtype]
            if off % align:
                raise GGUFError(f"{self.path}: tensor {name!r} has offset {off}, not a multiple of the alignment "
                                f"{align}")
            if any(d <= 0 for d in ne) or ne[0] % bs:
                raise GGUFError(f"{self.path}: tensor {name!r} of type {tname} has dims {list(ne)}: ne[0] must be "
                                f"a positive multiple of the block size {bs}")
            n_el = 1
            for d in ne:
                n_el *= d
            nbytes = n_el // bs * ts
            start = data_start + off
            if start + nbytes > self.size:
                raise GGUFError(f"{self.path}: tensor {name!r} ({nbytes} bytes at offset {start}) extends past the "
                                f"end of the file ({self.size} bytes): the file is truncated")
            self.tensors[name] = TensorInfo(name, ne, gtype, start, nbytes, self._map[start:start + nbytes])

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    def tensor(self, name: str) -> Optional[TensorInfo]:
        return self.tensors.get(name)

    def data_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())


__all__ = ["GGUFFile", "GGUFError", "TensorInfo", "GGML_TYPES", "SUPPORTED_TYPES", "type_name"]
