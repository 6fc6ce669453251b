"""A context's state as bytes (ubatch's own format; llama.cpp's is not reproduced): what llama_state_get_data /
set_data, llama_state_save_file / load_file, the session-file aliases and Llama.save_state carry.

Layout (docs/compat.md "State format"): b"UBST", uint32 version (1), uint32 section count, then sections, each
an 8-byte ASCII name (NUL-padded), a uint64 length and the payload:
  meta    JSON: model fingerprint (arch, n_layer, n_embd, n_vocab), n_ctx, n_seq_max, the K/V arrays' dtypes and
          shapes, the number of KV caches (2 for a sliding-window model)
  kv0/kv1 a KV cache's cell metadata (C: ub_kv_state_write, csrc/memory/kv_state_io.c)
  kvdata  the K arrays of every layer, then the V arrays, then each store's written-position array, raw
  logits  int32 n_outputs, int32 n_rows, int32 n_vocab, int32[n_batch] output_ids, float32[n_rows, n_vocab]
All integers native byte order (little-endian on the supported targets). Restoring gives the context exactly
what it held (cells, K/V data bit for bit, last logits): decoding after a restore equals never having saved.
Loading checks everything (magic, version, fingerprint, every length, every cell) before it changes anything."""
from __future__ import annotations

import json
import struct
from typing import Dict, List, Tuple

import numpy as np

from ubatch._ffi import ffi, lib

MAGIC, VERSION = b"UBST", 1


class StateError(ValueError):
    pass


def _caches(c) -> List:
    kv = c.kv
    return [kv.base, kv.swa] if hasattr(kv, "swa") else [kv]


def _arrays(c) -> List[np.ndarray]:
    r = c.ctx._runner
    if r is None:
        return []
    return list(r.k) + list(r.v) + [st.pos for st in r.stores]


def _meta(c) -> bytes:
    m = c.cmodel
    return json.dumps({"arch": m.arch, "n_layer": int(m.hparam("n_layer")), "n_embd": int(m.hparam("n_embd")),
                       "n_vocab": int(c.cmodel.n_vocab), "n_ctx": int(c.ctx.n_ctx), "n_seq_max": int(c.ctx.n_seq_max),
                       "n_caches": len(_caches(c)),
                       "arrays": [[str(a.dtype), list(a.shape)] for a in _arrays(c)]}, sort_keys=True).encode()


def _kv_bytes(kv) -> bytes:
    h = kv._handle()
    n = int(lib.ub_kv_state_size(h))
    buf = bytearray(n)
    if int(lib.ub_kv_state_write(h, ffi.from_buffer(buf), n)) != n:
        raise StateError("the KV cache state could not be written")
    return bytes(buf)


def _logits_bytes(c) -> bytes:
    out = c.restored if c.restored is not None else c.snapshot_outputs()
    if out is None:
        return struct.pack("<iii", 0, 0, 0)
    rows, ids, n = out
    rows = np.ascontiguousarray(rows, np.float32).reshape(len(rows), -1) if len(rows) else \
        np.zeros((0, 0), np.float32)
    ids = np.ascontiguousarray(ids, np.int32)
    return struct.pack("<iiii", int(n), rows.shape[0], rows.shape[1], len(ids)) + ids.tobytes() + rows.tobytes()


def _section(name: str, payload: bytes) -> bytes:
    return name.encode().ljust(8, b"\0") + struct.pack("<Q", len(payload)) + payload


def get_state(c) -> bytes:
    """The whole context (c: a _context.CContext) as bytes."""
    with c.kv._lock:
        parts = [_section("meta", _meta(c))]
        for i, kv in enumerate(_caches(c)):
            parts.append(_section(f"kv{i}", _kv_bytes(kv)))
        parts.append(_section("kvdata", b"".join(np.ascontiguousarray(a).tobytes() for a in _arrays(c))))
        parts.append(_section("logits", _logits_bytes(c)))
        return MAGIC + struct.pack("<II", VERSION, len(parts)) + b"".join(parts)


def state_size(c) -> int:
    """len(get_state(c)) without building it (the logits section sized from the live outputs)."""
    with c.kv._lock:
        n = 12 + 16 * (3 + len(_caches(c))) + len(_meta(c))
        n += sum(int(lib.ub_kv_state_size(kv._handle())) for kv in _caches(c))
        n += sum(a.nbytes for a in _arrays(c))
        return n + len(_logits_bytes(c))


def _parse(buf) -> Dict[str, memoryview]:
    mv = memoryview(buf).cast("B")
    if len(mv) < 12 or bytes(mv[:4]) != MAGIC:
        raise StateError("not a ubatch context state (bad magic)")
    version, n = struct.unpack_from("<II", mv, 4)
    if version != VERSION:
        raise StateError(f"state version {version}, this ubatch reads version {VERSION}")
    off, out = 12, {}
    for _ in range(n):
        if off + 16 > len(mv):
            raise StateError("state truncated (section header)")
        name = bytes(mv[off:off + 8]).rstrip(b"\0").decode("ascii", "replace")
        (size,) = struct.unpack_from("<Q", mv, off + 8)
        off += 16
        if off + size > len(mv):
            raise StateError(f"state truncated (section {name!r})")
        out[name] = mv[off:off + size]
        off += size
    if off != len(mv):
        raise StateError(f"{len(mv) - off} trailing bytes after the state")
    return out


def _outputs(c, mv: memoryview):
    if len(mv) < 12:
        raise StateError("logits section truncated")
    if len(mv) == 12:
        return None
    n_out, n_rows, n_vocab, n_ids = struct.unpack_from("<iiii", mv, 0)
    if min(n_out, n_rows, n_vocab, n_ids) < 0 or n_out != n_rows or (n_rows and n_vocab != c.cmodel.n_vocab) or \
            len(mv) != 16 + 4 * n_ids + 4 * n_rows * n_vocab:
        raise StateError("logits section does not match its header")
    ids = np.frombuffer(mv, np.int32, n_ids, 16).copy()
    if ids.size and (ids.min() < -1 or ids.max() >= max(n_rows, 1)):
        raise StateError("logits section: output ids out of range")
    rows = np.frombuffer(mv, np.float32, n_rows * n_vocab, 16 + 4 * n_ids).reshape(n_rows, n_vocab).copy()
    return rows, ids, n_out


def set_state(c, buf) -> int:
    """Replaces c's whole state with buf's; returns len(buf). Raises StateError (context unchanged)."""
    sec = _parse(buf)
    for name in ["meta", "kvdata", "logits"] + [f"kv{i}" for i in range(len(_caches(c)))]:
        if name not in sec:
            raise StateError(f"state has no {name!r} section")
    with c.kv._lock:
        if bytes(sec["meta"]) != _meta(c):
            raise StateError("state saved from a different model or context geometry: "
                             f"{bytes(sec['meta'])[:200]!r} vs {_meta(c)[:200]!r}")
        arrays = _arrays(c)
        if len(sec["kvdata"]) != sum(a.nbytes for a in arrays):
            raise StateError("kvdata section has the wrong size")
        outputs = _outputs(c, sec["logits"])
        caches = _caches(c)
        before = [kv.snapshot() for kv in caches]
        for i, kv in enumerate(caches):
            data = sec[f"kv{i}"]
            st = lib.ub_kv_state_read(kv._handle(), ffi.from_buffer(data), len(data))
            if st != lib.UB_OK:
                msg = ffi.string(lib.ub_kv_error(kv._handle())).decode("utf-8", "replace")
                for k, s in zip(caches[:i], before):
                    k.restore(s)
                raise StateError(msg)
        off = 0
        for a in arrays:
            np.copyto(a, np.frombuffer(sec["kvdata"], a.dtype, a.size, off).reshape(a.shape))
            off += a.nbytes
        c.outputs_changed()
        c.restored = outputs
    return len(memoryview(buf).cast("B"))


def fingerprint(c) -> Tuple[str, int]:
    return c.cmodel.arch, int(c.ctx.n_ctx)
