"""UBATCH_DEBUG: llama.cpp's LLAMA_BATCH_DEBUG dumps, to stderr.

    UBATCH_DEBUG=1   every successful BatchAllocator.init and every ubatch a split returns is summarised
                     (shapes, seq_id_unq, seq_idx, per-sequence position ranges and couplings)
    UBATCH_DEBUG=2   ... plus one line per row (token, positions, seq ids, output flag, batch index)

The variable is read once, when this module is imported (`LEVEL`); `reload()` reads it again (tests, or
a program that sets it late). When LEVEL is 0 the allocator only tests one module attribute per call: the
dump functions are never entered. The wording follows llama.cpp's (function name, a colon, the field);
pointers are the addresses of the C buffers. Differences: no token text (no vocabulary here), every
position section is shown for M-RoPE rows, and ubatch rows also name the batch row they came from.
"""
from __future__ import annotations

import os
import sys
import weakref
from typing import List, Optional

import numpy as np

from ubatch._ffi import ffi, lib
from ubatch.common.limits import LLAMA_MAX_SEQ as _MAX_SEQ

ENV = "UBATCH_DEBUG"


def _parse(text: Optional[str]) -> int:
    """atoi-like: the leading optional sign and digits of `text`, 0 when there are none."""
    if not text:
        return 0
    t = text.strip()
    k = 1 if t[:1] in "+-" else 0
    while k < len(t) and t[k].isdigit():
        k += 1
    try:
        return int(t[:k])
    except ValueError:
        return 0


LEVEL: int = _parse(os.environ.get(ENV))
_ubatch_index: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def reload() -> int:
    """Re-reads UBATCH_DEBUG from the environment; returns the new level."""
    global LEVEL
    LEVEL = _parse(os.environ.get(ENV))
    return LEVEL


def _addr(cptr) -> str:
    if cptr is None or cptr == ffi.NULL:
        return "(nil)"
    return hex(int(ffi.cast("uintptr_t", cptr)))


def _np_addr(arr: Optional[np.ndarray]) -> str:
    return "(nil)" if arr is None else hex(arr.ctypes.data)


def _seq_idx_text(seq_idx: np.ndarray) -> str:
    """256 characters: seq s shows its index in seq_id_unq (mod 10), '.' when absent."""
    chars = np.full(_MAX_SEQ, ord("."), np.uint8)
    present = seq_idx >= 0
    chars[present] = ord("0") + (seq_idx[present] % 10)
    return "[" + chars.tobytes().decode("ascii") + "]"


def _seq_mask(ids, width: int) -> str:
    """'.'/digit string over seq ids 0..width-1: id s shows s % 10 when the row carries it."""
    chars = ["."] * width
    for s in ids:
        chars[s] = str(s % 10)
    return "".join(chars)


def _pos_text(pos: np.ndarray, r: int) -> str:
    if pos.shape[0] == 1:
        return f"{int(pos[0, r]):4d}"
    return "[" + ", ".join(f"{int(p):4d}" for p in pos[:, r]) + "]"


def _header(lines: List[str], *, equal_seqs: bool, n_tokens: int, n_seq_tokens: int, n_seqs: int,
            seq_id_unq: np.ndarray, seq_idx: np.ndarray, addrs: dict, n_outputs: int) -> None:
    f = "ubatch_print"
    lines.append(f"{f}:   equal_seqs   = {int(equal_seqs)}")
    lines.append(f"{f}:   n_tokens     = {n_tokens}")
    lines.append(f"{f}:   n_seq_tokens = {n_seq_tokens}")
    lines.append(f"{f}:   n_seqs       = {n_seqs}")
    lines.append(f"{f}:   n_seqs_unq   = {len(seq_id_unq)}")
    for name in ("token", "embd", "pos", "n_seq_id", "seq_id"):
        lines.append(f"{f}:   {name:<10} = {addrs[name]}")
    lines.append(f"{f}:   seq_id_unq = [ " + "".join(f"{int(s)} " for s in seq_id_unq) + "]")
    lines.append(f"{f}:   seq_idx    = {_seq_idx_text(seq_idx)}")
    lines.append(f"{f}:   output     = {addrs['output']}")
    lines.append(f"{f}:   n_outputs  = {n_outputs}")


def _rows(lines: List[str], *, token, pos: np.ndarray, seq_off: np.ndarray, seq_id: np.ndarray,
          output: np.ndarray, batch_idxs: Optional[np.ndarray]) -> None:
    f = "ubatch_print"
    n = len(output)
    width = int(seq_id.max()) + 1 if len(seq_id) else 1
    lines.append(f"{f}:   token     = [")
    for r in range(n):
        ids = seq_id[seq_off[r]: seq_off[r + 1]]
        head = f"id = {int(token[r]):6d}" if token is not None else "[embd]"
        tail = "" if batch_idxs is None else f", batch = {int(batch_idxs[r]):4d}"
        lines.append(f"{f}:  {r:4d}: {head}, pos = {_pos_text(pos, r)}, n_seq_id = {len(ids):2d}, "
                     f"seq_id = [{_seq_mask(ids.tolist(), width)}], output = {int(output[r])}{tail}")
    lines.append(f"{f}:   ]")


def _alloc_array(cptr, n: int, dtype) -> np.ndarray:
    if n <= 0 or cptr == ffi.NULL:
        return np.zeros(0, dtype)
    return np.frombuffer(ffi.buffer(cptr, n * np.dtype(dtype).itemsize), dtype=dtype).copy()


def dump_init(alloc, batch) -> None:
    """The init dump: the whole normalised batch as one ubatch of n_tokens sets of one token, then each
    present sequence's position range in the batch and the primary sequences it is coupled to."""
    h = alloc._h
    n = lib.ub_alloc_n_tokens(h)
    n_pos = lib.ub_alloc_n_pos(h)
    seq_off = _alloc_array(lib.ub_alloc_seq_off(h), n + 1, np.int32)
    seq_id = _alloc_array(lib.ub_alloc_seq_id(h), int(seq_off[-1]) if n else 0, np.int32)
    pos = _alloc_array(lib.ub_alloc_pos(h), n * n_pos, np.int32).reshape(n_pos, n)
    output = _alloc_array(lib.ub_alloc_output(h), n, np.int8)
    present = np.zeros(_MAX_SEQ, bool)
    present[seq_id] = True
    seq_id_unq = np.flatnonzero(present).astype(np.int32)
    seq_idx = np.full(_MAX_SEQ, -1, np.int32)
    seq_idx[seq_id_unq] = np.arange(len(seq_id_unq), dtype=np.int32)
    token = batch.token
    embd = batch.embd
    addrs = {"token": _np_addr(token), "embd": _np_addr(embd), "pos": _addr(lib.ub_alloc_pos(h)),
             "n_seq_id": _addr(lib.ub_alloc_seq_off(h)), "seq_id": _addr(lib.ub_alloc_seq_id(h)), "output": _addr(lib.ub_alloc_output(h))}
    lines = ["init: input batch info:"]
    _header(lines, equal_seqs=False, n_tokens=n, n_seq_tokens=1, n_seqs=n, seq_id_unq=seq_id_unq,
            seq_idx=seq_idx, addrs=addrs, n_outputs=lib.ub_alloc_n_outputs(h))
    if LEVEL > 1:
        _rows(lines, token=token, pos=pos, seq_off=seq_off, seq_id=seq_id, output=output, batch_idxs=None)
    # coupling as llama.cpp records it: a row listing s at index > 0 couples s to the row's primary id
    cpl = {}
    counts = np.diff(seq_off)
    for r in np.flatnonzero(counts > 1):
        ids = seq_id[seq_off[r]: seq_off[r + 1]]
        for s in ids[1:]:
            cpl.setdefault(int(s), set()).add(int(ids[0]))
    lines.append("init:   seq       = [")
    for s in seq_id_unq.tolist():
        c = " ".join(str(x) for x in sorted(cpl.get(s, ()))) or "-"
        lines.append(f"init:  {s:4d}: pos = [{lib.ub_alloc_seq_pos_min(h, s):4d}, "
                     f"{lib.ub_alloc_seq_pos_max(h, s):4d}], cpl = {c}")
    lines.append("init:   ]")
    _ubatch_index[alloc] = -1
    sys.stderr.write("\n".join(lines) + "\n")


def dump_ubatch(alloc, ub) -> None:
    """The dump of one ubatch a split just produced (called with the allocator's lock held: it only
    reads lock-free allocator counters)."""
    h = alloc._h
    first = lib.ub_alloc_n_used(h) == ub.n_tokens        # the first ubatch since init / split_reset
    k = 0 if first else _ubatch_index.get(alloc, -1) + 1
    _ubatch_index[alloc] = k
    p = ub._ptr
    addrs = {"token": _addr(p.token), "embd": _addr(p.embd), "pos": _addr(p.pos), "n_seq_id": _addr(p.n_seq_id),
             "seq_id": _addr(p.seq_id), "output": _addr(p.output)}
    lines = [f"ubatch_add: added ubatch {k} to split:"]
    _header(lines, equal_seqs=ub.equal_seqs, n_tokens=ub.n_tokens, n_seq_tokens=ub.n_seq_tokens, n_seqs=ub.n_seqs,
            seq_id_unq=ub.seq_id_unq, seq_idx=ub.seq_idx, addrs=addrs, n_outputs=lib.ub_alloc_n_outputs(h))
    if LEVEL > 1:
        _rows(lines, token=ub.token, pos=ub.pos, seq_off=ub.seq_off, seq_id=ub.seq_id_flat, output=ub.output,
              batch_idxs=ub.batch_idxs)
    sys.stderr.write("\n".join(lines) + "\n")
