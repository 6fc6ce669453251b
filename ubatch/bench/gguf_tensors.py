"""A minimal GGUF tensor-table reader for the kernel benchmark and tests: the tensors' names, types,
shapes and memory-mapped bytes, without decoding the metadata values (gguf.GGUFReader decodes every
tokenizer string, which takes most of a minute for a 150k vocabulary)."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Dict

import numpy as np

_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


@dataclass
class TensorInfo:
    name: str
    ggml_type: int
    ne: tuple           # GGUF order: ne[0] varies fastest (n_cols of a matrix)
    data: np.ndarray    # uint8 view of the bytes (memory-mapped)


def read_tensors(path: str) -> Dict[str, TensorInfo]:
    """name -> TensorInfo of every tensor of a GGUF file (v2/v3). ValueError on a malformed file."""
    from ubatch.compute.matmul import type_info
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    buf = memoryview(mm)
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("Q")
        s = bytes(buf[pos:pos + n]).decode("utf-8", "replace")
        pos += n
        return s

    def skip_value(t):
        nonlocal pos
        if t in _SCALAR:
            pos += _SCALAR[t]
        elif t == 8:
            n = take("Q")
            pos += n
        elif t == 9:
            et, n = take("I"), take("Q")
            if et in _SCALAR:
                pos += _SCALAR[et] * n
            else:
                for _ in range(n):
                    skip_value(et)
        else:
            raise ValueError(f"{path}: unknown GGUF value type {t}")

    if bytes(buf[:4]) != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file")
    pos = 4
    take("I")
    n_tensors, n_kv = take("Q"), take("Q")
    alignment = 32
    for _ in range(n_kv):
        key, t = string(), take("I")
        if key == "general.alignment" and t == 4:
            alignment = take("I")
        else:
            skip_value(t)
    infos = []
    for _ in range(n_tensors):
        name = string()
        nd = take("I")
        ne = tuple(take("Q") for _ in range(nd))
        infos.append((name, ne, take("I"), take("Q")))
    base = (pos + alignment - 1) // alignment * alignment
    out = {}
    for name, ne, t, off in infos:
        try:
            blck, bb = type_info(t)
        except ValueError:
            continue
        n = int(np.prod(ne)) // blck * bb
        if base + off + n > mm.size:
            raise ValueError(f"{path}: tensor {name} runs past the end of the file")
        out[name] = TensorInfo(name, t, ne, mm[base + off: base + off + n])
    return out
