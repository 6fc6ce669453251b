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

from ubatch.common.errors import UbatchError

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
    with c.kv.lock:
        parts = [_section("meta", _meta(c))]
        for i, kv in enumerate(_caches(c)):
            parts.append(_section(f"kv{i}", kv.state_bytes()))
        parts.append(_section("kvdata", b"".join(np.ascontiguousarray(a).tobytes() for a in _arrays(c))))
        parts.append(_section("logits", _logits_bytes(c)))
        return MAGIC + struct.pack("<II", VERSION, len(parts)) + b"".join(parts)


def state_size(c) -> int:
    """len(get_state(c)) without building it (the logits section sized from the live outputs)."""
    with c.kv.lock:
        n = 12 + 16 * (3 + len(_caches(c))) + len(_meta(c))
        n += sum(kv.state_nbytes() for kv in _caches(c))
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
    with c.kv.lock:
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
            try:
                kv.load_state(data)
            except (ValueError, MemoryError, UbatchError) as e:
                for k, s in zip(caches[:i], before):
                    k.restore(s)
                raise StateError(str(e)) from None
        off = 0
        for a in arrays:
            np.copyto(a, np.frombuffer(sec["kvdata"], a.dtype, a.size, off).reshape(a.shape))
            off += a.nbytes
        if c.ctx._runner is not None:
            c.ctx._runner.mark_written()
        c.outputs_changed()
        c.restored = outputs
    return len(memoryview(buf).cast("B"))


def fingerprint(c) -> Tuple[str, int]:
    return c.cmodel.arch, int(c.ctx.n_ctx)


# ------------------------------------------------------------------ one sequence (llama_state_seq_*)
# b"UBSQ", uint32 version 1, uint32 meta length, meta JSON (as the context's, without n_seq_max), uint32 number
# of stores; per store (the runner's K/V stores, each with its own cache: full, then sliding): int32 n cells,
# int32 pos[n] ascending, then per layer of the store K rows [n, n_head_kv, head_dim], then V rows, then the
# written-position rows int32[n].
SEQ_MAGIC = b"UBSQ"


def _seq_meta(c) -> bytes:
    m = json.loads(_meta(c))
    m.pop("n_seq_max")
    return json.dumps(m, sort_keys=True).encode()


def _stores(c):
    """(store, cache) pairs: each K/V store of the runner with the cache whose cells index it."""
    r = c.ctx._runner
    caches = _caches(c)
    if r is None:
        return []
    return [(st, caches[min(j, len(caches) - 1)]) for j, st in enumerate(r.stores)]


def _seq_cells(kv, s: int):
    """(stream, cell idx int32[n], pos int32[n]) of sequence s's cells in kv, by position; raises StateError
    for a pending K-shift (the K data would not match the positions)."""
    stream = 0 if kv.n_stream == 1 else s
    a = kv.cell_arrays(stream)
    word, bit = divmod(s, 64)
    has = (a["seq"][:, word] >> np.uint64(bit)) & np.uint64(1) == 1
    if np.any(a["shift"][has] != 0):
        raise StateError(f"sequence {s} has a pending position shift (decode once before saving it)")
    order = np.argsort(a["pos"][has], kind="stable")
    return stream, a["index"][has][order], a["pos"][has][order]


def _check_seq(c, s: int, name: str) -> None:
    if not 0 <= s < max(c.ctx.n_seq_max, 1):
        raise StateError(f"{name}: seq_id {s} is out of range [0, {c.ctx.n_seq_max})")


def seq_get_state(c, s: int) -> bytes:
    _check_seq(c, s, "seq_id")
    with c.kv.lock:
        meta = _seq_meta(c)
        parts = [SEQ_MAGIC, struct.pack("<II", VERSION, len(meta)), meta, struct.pack("<I", len(_stores(c)))]
        for st, kv in _stores(c):
            stream, cells, pos = _seq_cells(kv, s)
            parts += [struct.pack("<i", len(cells)), pos.astype(np.int32).tobytes()]
            for l in st.layers:
                parts.append(np.ascontiguousarray(st.k[l][stream, cells]).tobytes())
            for l in st.layers:
                parts.append(np.ascontiguousarray(st.v[l][stream, cells]).tobytes())
            parts.append(st.pos[stream, cells].astype(np.int32).tobytes())
        return b"".join(parts)


def _parse_seq(c, buf):
    mv = memoryview(buf).cast("B")
    if len(mv) < 12 or bytes(mv[:4]) != SEQ_MAGIC:
        raise StateError("not a ubatch sequence state (bad magic)")
    version, n_meta = struct.unpack_from("<II", mv, 4)
    if version != VERSION:
        raise StateError(f"sequence state version {version}, this ubatch reads version {VERSION}")
    off = 12 + n_meta
    if off + 4 > len(mv) or bytes(mv[12:off]) != _seq_meta(c):
        raise StateError("sequence state saved from a different model or context geometry")
    (n_st,) = struct.unpack_from("<I", mv, off)
    off += 4
    stores = _stores(c)
    if n_st != len(stores):
        raise StateError(f"sequence state has {n_st} K/V stores, this context {len(stores)}")
    out = []
    for st, _ in stores:
        if off + 4 > len(mv):
            raise StateError("sequence state truncated")
        (n,) = struct.unpack_from("<i", mv, off)
        off += 4
        if n < 0 or off + 4 * n > len(mv):
            raise StateError("sequence state: bad cell count")
        pos = np.frombuffer(mv, np.int32, n, off).copy()
        off += 4 * n
        if n and (pos[0] < 0 or np.any(np.diff(pos) <= 0)):
            raise StateError("sequence state: positions are not ascending")
        ks, vs = [], []
        for arrs, src in ((ks, st.k), (vs, st.v)):
            for l in st.layers:
                a = src[l]
                size = n * int(np.prod(a.shape[2:])) * a.itemsize
                if off + size > len(mv):
                    raise StateError("sequence state truncated (K/V rows)")
                arrs.append(np.frombuffer(mv, a.dtype, size // a.itemsize, off).reshape((n,) + a.shape[2:]))
                off += size
        if off + 4 * n > len(mv):
            raise StateError("sequence state truncated (positions)")
        wpos = np.frombuffer(mv, np.int32, n, off).copy()
        off += 4 * n
        out.append((pos, ks, vs, wpos))
    if off != len(mv):
        raise StateError(f"{len(mv) - off} trailing bytes after the sequence state")
    if len(out) > 1 and not np.all(np.isin(out[1][0], out[0][0])):
        raise StateError("sequence state: the sliding cache holds positions the full cache does not")
    return out


def _runs(pos: np.ndarray):
    """Maximal runs of consecutive positions: [(start, stop), ...]."""
    if not pos.size:
        return []
    cut = np.flatnonzero(np.diff(pos) != 1) + 1
    return [(int(r[0]), int(r[-1]) + 1) for r in np.split(pos, cut)]


def seq_set_state(c, buf, dest: int) -> int:
    """Puts a sequence saved by seq_get_state into sequence dest (its previous cells removed); returns
    len(buf). Raises StateError, MemoryError or KVCacheFullError with the context unchanged."""
    from ubatch.batch.allocator import BatchAllocator
    import ubatch
    _check_seq(c, dest, "dest_seq_id")
    saved = _parse_seq(c, buf)
    mem, runner = c.kv, c.ctx._runner
    with mem.lock:
        kv_before = [kv.snapshot() for kv in _caches(c)]
        data_before = runner.snapshot_kv() if runner is not None else None
        try:
            mem.seq_rm(dest, -1, -1)
            full_pos = saved[0][0] if saved else np.zeros(0, np.int32)
            for p0, p1 in _runs(full_pos):
                _place_run(c, mem, runner, dest, np.arange(p0, p1, dtype=np.int32), saved)
            if len(saved) > 1:               # the sliding cache keeps only what it held when saved
                missing = full_pos[~np.isin(full_pos, saved[1][0])]
                for p0, p1 in _runs(missing):
                    _caches(c)[1].seq_rm(dest, p0, p1)
        except BaseException:
            for kv, snap in zip(_caches(c), kv_before):
                kv.restore(snap)
            if data_before is not None:
                runner.restore_kv(data_before)
            raise
    return len(memoryview(buf).cast("B"))


def _place_run(c, mem, runner, dest, pos, saved) -> None:
    """Places positions pos of sequence dest as a decode would (find_slot per ubatch), then writes the saved
    K/V rows into the cells each store got."""
    from ubatch.batch.allocator import BatchAllocator
    import ubatch
    b = ubatch.Batch.from_arrays(tokens=np.zeros(len(pos), np.int32), pos=pos,
                                 seq_ids=np.full(len(pos), dest, np.int32))
    alloc = BatchAllocator(1)
    alloc.init(b, n_seq_max=mem.n_seq)
    plan = mem.init_batch(alloc, c.ctx.n_ubatch)
    update = mem.begin(plan)
    try:
        if runner is not None and not update.empty:
            if c.ctx._runner_swa:
                runner.update(update.copies, update.shift, update.swa_copies, update.swa_shift)
            else:
                runner.update(update.copies, update.shift)
        for i, ub in enumerate(plan.ubatches):
            mem.apply(plan, i)
            if runner is None:
                continue
            place = mem.placement(plan, i, True, swa=c.ctx._runner_swa)
            places = [place] + ([place.swa] if place.swa is not None else [])
            ub_pos = np.asarray(ub.pos, np.int32).reshape(-1)[: ub.n_tokens]
            for (st, _), pl, (spos, ks, vs, wpos) in zip(_stores(c), places, saved):
                per = pl.cells.shape[1]
                streams = np.repeat(np.asarray(pl.streams, np.intp), per)
                cells = np.asarray(pl.cells, np.intp).reshape(-1)
                j = np.searchsorted(spos, ub_pos)
                hit = (j < len(spos)) & (spos[np.minimum(j, len(spos) - 1)] == ub_pos) if len(spos) else \
                    np.zeros(len(ub_pos), bool)
                rows = j[hit]
                st.mark_written(streams[hit].astype(np.int64) * st.kv_size + cells[hit])
                for n_l, l in enumerate(st.layers):
                    st.k[l][streams[hit], cells[hit]] = ks[n_l][rows]
                    st.v[l][streams[hit], cells[hit]] = vs[n_l][rows]
                st.pos[streams[hit], cells[hit]] = wpos[rows]
    except BaseException:
        mem.rollback(plan)
        raise
    mem.commit(plan)


def seq_state_size(c, s: int) -> int:
    return len(seq_get_state(c, s))
