"""The batch path: llama_batch_init / free / get_one return genuine `llama_batch` structs whose pointer fields
point into numpy memory this module owns (filled in place by the caller, exactly as with llama-cpp-python),
and llama_decode reads them back (zero copy for the registered memory) into a ubatch.Batch for
ubatch.Context.decode, mapping its exceptions to llama.cpp's return codes. llama_decode never raises."""
from __future__ import annotations

import ctypes
import threading
import time
from typing import Dict

import numpy as np

from ubatch.common.errors import BatchError, KVCacheFullError, SplitError, UbatchError
from ubatch.llama_cpp import _llama_log
from ubatch.llama_cpp._cfunc import cfunc
from ubatch.llama_cpp._handles import REGISTRY, HandleError
from ubatch.llama_cpp._structs import llama_batch, llama_pos, llama_seq_id, llama_token, llama_token_p

_P = ctypes.POINTER


class _BatchMemory:
    """The arrays behind one llama_batch_init: token int32[n] | embd float32[n, embd], pos int32[n],
    n_seq_id int32[n], seq block int32[n, n_seq_max], the pointer table uint64[n + 1] (last = NULL), logits
    int8[n]."""

    def __init__(self, n: int, embd: int, n_seq_max: int) -> None:
        self.n, self.n_embd, self.n_seq_max = n, embd, n_seq_max
        self.token = np.zeros(n, np.int32) if embd == 0 else None
        self.embd = np.zeros((n, embd), np.float32) if embd > 0 else None
        self.pos = np.zeros(n, np.int32)
        self.n_seq_id = np.zeros(n, np.int32)
        self.block = np.zeros((n, n_seq_max), np.int32)
        self.table = np.zeros(n + 1, np.uint64)
        self.table[:n] = self.block.ctypes.data + np.arange(n, dtype=np.uint64) * np.uint64(4 * n_seq_max)
        self.table_orig = self.table.copy()
        self.logits = np.zeros(n, np.int8)

    def key(self) -> int:
        return (self.token if self.token is not None else self.embd).ctypes.data

    def arrays(self):
        """(field, array) of every per-row array of this batch."""
        return [(name, a) for name, a in (("token", self.token), ("embd", self.embd), ("pos", self.pos),
                                          ("n_seq_id", self.n_seq_id), ("seq_id", self.table),
                                          ("logits", self.logits)) if a is not None]


_BATCHES: Dict[int, _BatchMemory] = {}      # key address (token or embd) -> memory
_BY_TABLE: Dict[int, _BatchMemory] = {}     # seq_id table address -> memory
_ROWS: Dict[int, tuple] = {}                # address of any registered array -> (memory, field name)
_lock = threading.Lock()


def _ptr(arr: np.ndarray, ctype):
    return ctypes.cast(arr.ctypes.data, _P(ctype))


@cfunc([ctypes.c_int32, ctypes.c_int32, ctypes.c_int32], llama_batch)
def llama_batch_init(n_tokens, embd, n_seq_max):
    if n_tokens < 0 or embd < 0 or n_seq_max < 0:
        raise ValueError(f"llama_batch_init: n_tokens = {n_tokens}, embd = {embd}, n_seq_max = {n_seq_max} must be >= 0")
    mem = _BatchMemory(max(n_tokens, 1) if n_tokens == 0 else n_tokens, embd, max(n_seq_max, 1))
    b = llama_batch()
    b.n_tokens = 0
    if mem.token is not None:
        b.token = _ptr(mem.token, llama_token)
    else:
        b.embd = _ptr(mem.embd, ctypes.c_float)
    b.pos = _ptr(mem.pos, llama_pos)
    b.n_seq_id = _ptr(mem.n_seq_id, ctypes.c_int32)
    b.seq_id = ctypes.cast(mem.table.ctypes.data, _P(_P(llama_seq_id)))
    b.logits = _ptr(mem.logits, ctypes.c_int8)
    with _lock:
        _BATCHES[mem.key()] = mem
        _BY_TABLE[mem.table.ctypes.data] = mem
        for name, arr in mem.arrays():
            _ROWS[arr.ctypes.data] = (mem, name)
    return b


def _addr(p) -> int:
    return ctypes.cast(p, ctypes.c_void_p).value or 0


@cfunc([llama_batch])
def llama_batch_free(batch):
    key = _addr(batch.token) or _addr(batch.embd)
    with _lock:
        mem = _BATCHES.pop(key, None)
        if mem is not None:
            _BY_TABLE.pop(mem.table.ctypes.data, None)
            for _, arr in mem.arrays():
                _ROWS.pop(arr.ctypes.data, None)


@cfunc([llama_token_p, ctypes.c_int32], llama_batch)
def llama_batch_get_one(tokens, n_tokens):
    b = llama_batch()
    b.n_tokens = n_tokens
    b.token = ctypes.cast(tokens, llama_token_p) if tokens is not None else llama_token_p()
    return b


def _view(p, shape, dtype):
    addr = _addr(p)
    if not addr:
        return None
    n = int(np.prod(shape))
    buf = (ctypes.c_byte * (n * np.dtype(dtype).itemsize)).from_address(addr)
    return np.frombuffer(buf, dtype=dtype).reshape(shape)


def _seq_ids(b, n: int, n_seq_max_ctx: int):
    """The per-row seq ids of a llama_batch: an int32[n] when every row has one id, else a list of lists.
    Registered memory is read as one block; a re-pointed or hand-built table is followed row by row."""
    tab = _addr(b.seq_id)
    if not tab:
        return None
    n_seq_id = _view(b.n_seq_id, (n,), np.int32)
    n_seq_id = np.ones(n, np.int32) if n_seq_id is None else n_seq_id
    if n_seq_id.min() < 1:
        i = int(np.argmin(n_seq_id))
        raise BatchError(f"invalid n_seq_id[{i}] = {int(n_seq_id[i])} < 1")
    mem = _BY_TABLE.get(tab)
    if mem is not None and n <= mem.n and np.array_equal(mem.table[:n], mem.table_orig[:n]):
        if n_seq_id.max() > mem.n_seq_max:
            i = int(np.argmax(n_seq_id))
            raise BatchError(f"n_seq_id[{i}] = {int(n_seq_id[i])} > the batch's n_seq_max = {mem.n_seq_max}")
        block = mem.block[:n]
        if n_seq_id.max() == 1:
            return block[:, 0]
        return [block[i, :k] for i, k in enumerate(n_seq_id.tolist())]
    if mem is not None and n > mem.n:
        raise BatchError(f"n_tokens = {n} > the {mem.n} rows allocated by llama_batch_init")
    rows = []
    table = ctypes.cast(b.seq_id, _P(ctypes.c_void_p))
    for i in range(n):            # hand-built tables only (not the llama_batch_init fast path)
        row = table[i]
        if not row:
            raise BatchError(f"seq_id[{i}] is NULL")
        rows.append(np.ctypeslib.as_array(ctypes.cast(row, _P(ctypes.c_int32)), (int(n_seq_id[i]),)).copy())
    if n_seq_id.max() == 1:
        return np.array([r[0] for r in rows], np.int32)
    return rows


def _check_rows(b, n: int) -> None:
    """Before anything is read: n_tokens against the rows behind every field that points at memory of
    llama_batch_init (pointers elsewhere -- llama_batch_get_one, hand-built batches -- are the caller's, as in
    llama.cpp)."""
    with _lock:
        for field in ("token", "embd", "pos", "n_seq_id", "seq_id", "logits"):
            hit = _ROWS.get(_addr(getattr(b, field)))
            if hit is not None and n > hit[0].n:
                raise BatchError(f"n_tokens = {n} > the {hit[0].n} rows allocated by llama_batch_init "
                                 f"(field {field})")


def to_ubatch(b, cctx) -> "object":
    """A ubatch.Batch with the content of llama_batch b (the arrays viewed in place, not copied)."""
    from ubatch.batch.container import Batch

    n = int(b.n_tokens)
    if n <= 0:
        raise BatchError("n_tokens == 0")
    _check_rows(b, n)
    tokens = _view(b.token, (n,), np.int32)
    embd = None
    if tokens is None:
        n_embd = int(cctx.cmodel.hparam("n_embd"))
        hit = _ROWS.get(_addr(b.embd))
        if hit is not None and hit[1] == "embd" and hit[0].n_embd < n_embd:
            raise BatchError(f"the batch's embeddings have {hit[0].n_embd} values per row (llama_batch_init embd), "
                             f"the model's n_embd is {n_embd}")
        embd = _view(b.embd, (n, n_embd), np.float32)
        if embd is None:
            raise BatchError("batch has neither token ids nor embeddings")
    pos = _view(b.pos, (n,), np.int32)
    output = _view(b.logits, (n,), np.int8)
    seq = _seq_ids(b, n, cctx.ctx.n_seq_max)
    return Batch.from_arrays(tokens=tokens, embd=embd, pos=pos, seq_ids=seq,
                             output=None if output is None else output != 0)


def decode(ctx_handle, b, fn: str = "llama_decode") -> int:
    try:
        cctx = REGISTRY.get(ctx_handle, "context")
    except HandleError as e:
        _llama_log.error(f"{fn}: {e}")
        return -1
    t0 = time.perf_counter()
    try:
        batch = to_ubatch(b, cctx)
        if cctx.abort_cb is not None and cctx.abort_cb[0](cctx.abort_cb[1]):
            return 2
        cctx.ctx.decode(batch)
    except BatchError as e:
        _llama_log.error(f"init: {e}")
        _llama_log.error("decode: failed to initialize batch")
        _llama_log.error(f"{fn}: failed to decode, ret = -1")
        return -1
    except (KVCacheFullError, SplitError) as e:
        _llama_log.warn(f"decode: failed to find a memory slot for batch of size {int(b.n_tokens)} ({e})")
        _llama_log.warn(f"{fn}: failed to decode, ret = 1")
        return 1
    except UbatchError as e:
        _llama_log.error(f"{fn}: failed to decode, ret = {e.code} ({e})")
        return int(e.code)
    except (ValueError, TypeError, IndexError, OverflowError) as e:
        _llama_log.error(f"init: {e}")
        _llama_log.error(f"{fn}: failed to decode, ret = -1")
        return -1
    except MemoryError as e:
        _llama_log.error(f"{fn}: failed to allocate ({e}), ret = -2")
        return -2
    except Exception as e:   # an internal failure is a compute failure, never an exception out of decode
        _llama_log.error(f"{fn}: compute failed ({type(e).__name__}: {e}), ret = -3")
        return -3
    cctx.outputs_changed()
    cctx.count(batch.n_tokens, time.perf_counter() - t0)
    return 0


@cfunc([ctypes.c_void_p, llama_batch], ctypes.c_int32)
def llama_decode(ctx, batch):
    return decode(ctx, batch)


@cfunc([ctypes.c_void_p, llama_batch], ctypes.c_int32)
def llama_encode(ctx, batch):
    # ubatch's architectures are decoder-only: llama_encode runs the batch through the context as llama_decode
    return decode(ctx, batch, "llama_encode")


__all__ = ["llama_batch_init", "llama_batch_free", "llama_batch_get_one", "llama_decode", "llama_encode"]
