"""Context: llama.cpp's decode loop (llama_context::decode) on top of the allocator and a memory.

decode(batch) = allocator init (the memory answers the continuity checks and automatic positions) ->
memory.init_batch (the split this memory needs + a dry run of every ubatch; ubatch/memory/protocol.py) ->
memory.begin (one transaction; the pending update of stream copies / K-shift handed to the runner) ->
apply ubatch by ubatch (computing each when a model is attached) -> commit, or rollback on any failure ->
output bookkeeping. With model=None it is a planning-only context: everything but the compute.

The memory is a KVCache, or with a sliding window (the model's n_swa > 0, or Context(None, n_swa=...)) the
two-cache KVCacheISWA (full cache for the global layers, sliding cache for the others, sized as llama.cpp
with swa_full, default True as llama_context_default_params).

Deliberate differences from llama.cpp (0c1e570):
* a batch larger than n_batch raises BatchError (llama.cpp aborts);
* pooled embeddings (pooling mean/cls/last) split with split_seq so that every sequence is whole in one
  ubatch, and a sequence that does not fit in one ubatch raises BatchError (llama.cpp splits as usual
  and silently overwrites the pooled row of a sequence spanning several ubatches);
* a failed decode changes nothing: the KV cache is bit-identical (we restore the heads by the right
  stream and undo dry-run SWA purges, which llama.cpp does not), the pending K-shift / stream copies stay
  pending (llama.cpp applies them before planning; the update carries no content so only the has_shift
  flag differs), and the previous outputs remain readable (llama.cpp drops their pending reorder);
* a failure during compute (any ubatch, or the K-shift before it) rolls the whole batch back: cells,
  heads, the pending update and the K/V data of every cell written are as before the call (llama.cpp
  keeps the earlier ubatches and removes the failing ubatch's sequences from their first position on);
* with the two-cache memory, an operation that would leave a sequence needing positions the sliding
  cache already evicted (seq_rm back past the window, then decoding from there) raises RewindError and
  changes nothing; llama.cpp computes wrong logits there, or restarts automatic positions at 0.
"""
from __future__ import annotations

import inspect
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ubatch.batch.allocator import BatchAllocator
from ubatch.batch.container import Batch
from ubatch.batch.ubatch_view import UBatch
from ubatch.common.errors import BatchError, UbatchError
from ubatch.common.limits import KV_CELL_BYTES, LLAMA_MAX_SEQ, check_bytes
from ubatch.common.params import KV_TYPES, POOLING
from ubatch.common.validate import check_int
from ubatch.memory.iswa import KVCacheISWA, swa_cache_size
from ubatch.common.locking import locked as _locked
from ubatch.memory.kv_cache import SWA_TYPES, KVCache, plan_slots


def _pad(n: int, k: int) -> int:
    return (n + k - 1) // k * k


def _int(name: str, v, lo: int = 0) -> int:
    return check_int(name, v, lo)


def _accepts(fn, name: str) -> bool:
    """True when callable fn takes a parameter called `name` (runner capabilities, e.g. kv_size_swa)."""
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _swa_layers(n_swa: int, swa_layers, swa_pattern, n_layer: Optional[int]) -> Optional[Tuple[bool, ...]]:
    """The per-layer sliding flags: given, or from a pattern (layer il slides when il % pattern <
    pattern - 1, llama.cpp's set_swa_pattern) over n_layer layers."""
    if swa_layers is not None:
        return tuple(bool(x) for x in swa_layers)
    if swa_pattern is not None:
        pattern = _int("swa_pattern", swa_pattern, 1)
        if n_layer is None:
            return None
        return tuple(il % pattern < pattern - 1 for il in range(n_layer))
    return None


def _check_size(n_ctx: int, n_stream: int, n_ctx_seq: int, model, type_k: str, type_v: str) -> None:
    """Refuses, before allocating, a context whose cells overflow int32 or whose KV metadata plus (with a
    model) K/V data would exceed the machine's memory; the message gives the bytes needed."""
    cells = n_stream * n_ctx_seq
    if cells > 2**31 - 1:
        raise ValueError(f"n_ctx = {n_ctx} (padded to 256) gives {n_stream} x {n_ctx_seq} = {cells} KV cells, "
                         f"more than the {2**31 - 1} supported")
    need = cells * KV_CELL_BYTES
    if model is not None:   # the runner's K/V data: n_layer x [n_stream, size, n_head_kv, head_dim] each
        per_cell = 1
        for attr in ("n_layer", "n_head_kv", "head_dim"):
            per_cell *= int(getattr(model, attr, 0))
        need += int(cells * per_cell * (KV_TYPES[type_k] + KV_TYPES[type_v]))
    check_bytes(f"a context of n_ctx = {n_ctx} ({n_stream} stream(s) x {n_ctx_seq} cells"
                f"{', K/V ' + type_k + '/' + type_v if model is not None else ''})", need)



class Context:
    """The decode loop. See the module docstring and docs/api.md."""

    def __init__(self, model=None, *, n_ctx: int = 512, n_batch: int = 512, n_ubatch: int = 512,
                 n_seq_max: int = 1, kv_unified: bool = False, embeddings: bool = False, pooling: str = "none",
                 type_k: str = "f32", type_v: str = "f32", n_threads: Optional[int] = None,
                 causal_attn: bool = True, flash_attn: int = -1, n_swa: Optional[int] = None,
                 swa_type: str = "standard", swa_full: bool = True,
                 swa_layers: Optional[Sequence[bool]] = None, swa_pattern: Optional[int] = None,
                 n_layer: Optional[int] = None) -> None:
        n_ctx = _int("n_ctx", n_ctx)
        n_batch = _int("n_batch", n_batch, 1)
        n_ubatch = _int("n_ubatch", n_ubatch)
        n_seq_max = _int("n_seq_max", n_seq_max)
        if pooling not in POOLING:
            raise ValueError(f"pooling must be one of {POOLING}, got {pooling!r}")
        for name, t in (("type_k", type_k), ("type_v", type_v)):
            if t not in KV_TYPES:
                raise ValueError(f"{name} must be one of {tuple(KV_TYPES)}, got {t!r}")
        if n_threads is not None:
            n_threads = _int("n_threads", n_threads, 1)

        # llama.cpp's derivation (llama-context.cpp): clamps on the requested n_ctx, then padding
        n_seq_max = max(1, n_seq_max)
        if n_seq_max > LLAMA_MAX_SEQ:
            raise ValueError(f"n_seq_max must be <= {LLAMA_MAX_SEQ}, got {n_seq_max}")
        if n_ctx == 0:
            if model is None:
                raise ValueError("n_ctx = 0 (use the model's training context) needs a model")
            n_ctx = int(model.n_ctx_train)
        if causal_attn:
            n_batch = min(n_ctx, n_batch)              # llama.cpp clamps n_batch only for causal attention
        if n_batch < 1:
            raise ValueError("n_batch must be >= 1")
        n_ubatch = min(n_batch, n_ubatch or n_batch)
        n_ctx = _pad(n_ctx, 256)
        self.warnings: List[str] = []
        if kv_unified:
            n_ctx_seq = n_ctx
        else:
            n_ctx_seq = _pad(n_ctx // n_seq_max, 256)
            if n_ctx_seq * n_seq_max != n_ctx:
                n_ctx = n_ctx_seq * n_seq_max
                self.warnings.append(f"n_ctx is not divisible by n_seq_max - rounding down to {n_ctx}")

        self.n_ctx: int = n_ctx
        self.n_ctx_seq: int = n_ctx_seq
        self.n_batch: int = n_batch
        self.n_ubatch: int = n_ubatch
        self.n_seq_max: int = n_seq_max
        self.kv_unified: bool = bool(kv_unified)
        self.embeddings: bool = bool(embeddings)
        self.pooling: str = pooling
        self.type_k, self.type_v = type_k, type_v
        self.n_threads = n_threads
        self.causal_attn: bool = bool(causal_attn)
        # llama.cpp's flash_attn (-1 auto, 0 off, 1 on) is accepted for parameter parity; the C attention kernel
        # is always the exact online-softmax one (llama.cpp's FA differs from it by ~2e-3 in logits).
        if flash_attn not in (-1, 0, 1, True, False):
            raise ValueError(f"flash_attn must be -1 (auto), 0 or 1, got {flash_attn!r}")
        self.flash_attn: int = int(flash_attn)
        if int(flash_attn) == 0 and type_v not in ("f32", "f16", "bf16"):
            # llama.cpp (llama_init_from_model): "quantized V cache requires flash_attn to be enabled"
            raise ValueError(f"type_v={type_v!r}: a quantised V cache needs flash_attn (-1 auto or 1), as in "
                             f"llama.cpp; flash_attn=0 was given")
        self.model = model

        # the sliding window: the model's (n_swa > 0 -> the two-cache memory), or simulated without a model
        if model is not None:
            if n_swa is not None or swa_layers is not None or swa_pattern is not None:
                raise ValueError("n_swa / swa_layers / swa_pattern simulate a sliding window without a model; "
                                 "with a model they come from the model")
            n_swa = int(getattr(model, "n_swa", 0) or 0)
            swa_layers = getattr(model, "swa_layers", None)
            n_layer = getattr(model, "n_layer", None)
        n_swa = 0 if n_swa is None else _int("n_swa", n_swa)
        if n_swa > 0 and (swa_type not in SWA_TYPES or swa_type == "none"):
            raise ValueError(f"swa_type must be one of {sorted(t for t in SWA_TYPES if t != 'none')}, got {swa_type!r}")
        self.n_swa: int = n_swa
        self.swa_type: str = swa_type if n_swa > 0 else "none"
        self.swa_full: bool = bool(swa_full)
        self.swa_layers = _swa_layers(n_swa, swa_layers, swa_pattern, n_layer) if n_swa > 0 else None

        n_stream = 1 if kv_unified else n_seq_max
        n_ctx_swa = swa_cache_size(n_ctx_seq, n_swa, n_seq_max=n_seq_max, unified=self.kv_unified,
                                   n_ubatch=n_ubatch, swa_full=self.swa_full) if n_swa > 0 else 0
        self.n_ctx_swa: int = n_ctx_swa           # cells per stream of the sliding cache (0: none)
        _check_size(n_ctx, n_stream, n_ctx_seq + n_ctx_swa, model, type_k, type_v)
        if n_swa > 0:
            self._kv: Union[KVCache, KVCacheISWA] = KVCacheISWA(n_stream, n_ctx_seq, n_ctx_swa, n_swa=n_swa,
                                                                  swa_type=swa_type, swa_layers=self.swa_layers)
        else:
            self._kv = KVCache(n_stream, n_ctx_seq)
        self._lock = self._kv.lock       # one lock for the decode loop, its outputs and the memory
        self._runner = None
        self._runner_swa = False          # the runner keeps the sliding layers' K/V in their own cache
        self._runner_undo = False
        self._n_vocab: Optional[int] = None
        self._n_pos = 1
        if model is not None:
            from ubatch.engine.model_runner import ModelRunner   # only needed with a model

            extra = {}
            if n_swa > 0 and _accepts(ModelRunner.__init__, "kv_size_swa"):
                extra["kv_size_swa"] = n_ctx_swa
            self._runner = ModelRunner(model, n_stream=n_stream, kv_size=n_ctx_seq, type_k=type_k, type_v=type_v,
                                       n_threads=n_threads, embeddings=self.embeddings, pooling=pooling, **extra)
            self._runner_swa = bool(extra) and _accepts(self._runner.update, "swa_copies")
            # the runner journals what an update overwrites (else the Context snapshots its whole K/V data)
            self._runner_undo = _accepts(self._runner.update, "undo")
            self._n_vocab = int(self._runner.n_vocab)
            self._n_pos = int(getattr(model, "n_pos_per_embd", 1))
        self._allocs: Dict[int, BatchAllocator] = {}

        # outputs of the last successful decode
        self._out_ids = np.zeros(0, np.int32)           # batch indices, emission (ubatch) order
        self._output_ids: Optional[np.ndarray] = np.full(n_batch, -1, np.int32)
        self._n_outputs = 0
        self._rows_logits: Optional[np.ndarray] = None  # rows in emission order until reordered
        self._rows_embd: Optional[np.ndarray] = None
        self._reorder = None    # pending permutation (= the selection-sort swaps); False: not derived yet
        self._embd_seq: Dict[int, np.ndarray] = {}
        self._last_ubatches: List[UBatch] = []
        self._last_plan: tuple = ((), b"")             # memory.plan_record() of the last decode
        self._last_plan_swa: Optional[tuple] = None    # memory.swa_plan_record() (two-cache memory)
        self._last_split: Optional[str] = None         # the split the memory chose (protocol.SPLIT_NAMES)
        self._last_placements: Optional[List[Tuple[np.ndarray, np.ndarray]]] = []

    # ------------------------------------------------------------------ lifetime
    @_locked
    def close(self) -> None:
        """Frees the C state (KV cache, allocators) now; idempotent. UBatches and outputs already
        returned stay valid; decode afterwards raises UbatchError."""
        for a in self._allocs.values():
            a.close()
        self._allocs.clear()
        self._kv.close()

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ properties
    @property
    def memory(self) -> Union[KVCache, KVCacheISWA]:
        """The memory (KVCache; KVCacheISWA with a sliding window: .base and .swa, describe() reports both)."""
        return self._kv

    @property
    @_locked
    def last_ubatches(self) -> List[UBatch]:
        """The ubatches of the last successful decode, in order."""
        return list(self._last_ubatches)

    @property
    @_locked
    def last_placements(self) -> List[Tuple[np.ndarray, np.ndarray]]:
        """Where the ubatches of the last successful decode went, one (streams int32[ns], cells
        int32[ns, per]) per ubatch (read-only): ubatch row k*per + r was written to cell cells[k, r] of
        stream streams[k]; ns = 1 with one stream, else the ubatch's number of distinct sequences."""
        if self._last_placements is None:
            self._last_placements = plan_slots(self._last_plan)
        return list(self._last_placements)

    @property
    def last_split(self) -> Optional[str]:
        """The split the memory chose for the last successful decode ("simple", "equal",
        "equal_sequential" or "seq"; None before one)."""
        return self._last_split

    @property
    @_locked
    def last_placements_swa(self) -> Optional[List[Tuple[np.ndarray, np.ndarray]]]:
        """As last_placements, in the sliding cache of a two-cache memory (None without one)."""
        if self._last_plan_swa is None:
            return None
        return plan_slots(self._last_plan_swa)

    @property
    @_locked
    def n_outputs(self) -> int:
        return self._n_outputs

    @property
    @_locked
    def output_ids(self) -> np.ndarray:
        """int32[n_batch]: output row of each batch index (-1 = not an output), a copy."""
        return self._ids().copy()

    @property
    @_locked
    def output_swaps(self) -> List[tuple]:
        """llama.cpp's selection-sort swaps (i0, i1) that turn emission order into batch order."""
        ids = self._out_ids.copy()
        swaps = []
        for i in range(len(ids) - 1):
            m = i + int(np.argmin(ids[i:]))
            if m != i:
                ids[i], ids[m] = ids[m], ids[i]
                swaps.append((i, m))
        return swaps

    def _allocator(self, batch: Batch) -> BatchAllocator:
        n_pos = batch.n_pos_per_embd if self._runner is None else self._n_pos
        if self._runner is not None and batch.n_pos_per_embd != n_pos:
            raise BatchError(f"batch has {batch.n_pos_per_embd} positions per token, the model needs {n_pos}")
        a = self._allocs.get(n_pos)
        if a is None:
            a = self._allocs[n_pos] = BatchAllocator(n_pos)
        return a

    # ------------------------------------------------------------------ decode
    @_locked
    def decode(self, batch: Batch) -> int:
        """Decodes one batch; returns 0. Raises BatchError (-1), SplitError / KVCacheFullError (1); on
        failure the KV cache, the outputs and last_ubatches are exactly as before."""
        if not isinstance(batch, Batch):
            raise TypeError(f"batch must be a ubatch.Batch, got {type(batch).__name__}")
        if batch.n_tokens == 0:
            raise BatchError("n_tokens == 0")
        if self._kv.closed:
            raise UbatchError("the context is closed")
        alloc = self._allocator(batch)
        alloc.init(batch, n_seq_max=self.n_seq_max, n_vocab=self._n_vocab, output_all=self.embeddings,
                   memory=self._kv)
        if alloc.n_tokens > self.n_batch:
            raise BatchError(f"n_tokens = {alloc.n_tokens} > n_batch = {self.n_batch} (llama.cpp aborts here)")
        if not self.causal_attn and alloc.n_tokens > self.n_ubatch:
            raise BatchError(f"non-causal attention requires n_ubatch >= n_tokens: n_tokens = {alloc.n_tokens} > "
                             f"n_ubatch = {self.n_ubatch} (llama.cpp aborts here)")
        mem = self._kv
        pooled = self.embeddings and self.pooling != "none"
        plan = mem.init_batch(alloc, self.n_ubatch, self.embeddings, whole_seqs=pooled)   # memory unchanged on error
        ubs = plan.ubatches

        # One transaction from here on: a failure (K-shift, stream copies, any ubatch's compute) rolls the memory
        # back through its journal (the pending update included), and the runner's K/V data through the rows it
        # saved (and the records of the rows a pending update overwrites).
        runner = self._runner
        update = mem.begin(plan)
        results = []
        undo = []
        undo_update: list = []   # the rows the stream copies / K-shift overwrite (no whole-K/V snapshot)
        kv_snap = None
        try:
            if runner is not None and not update.empty:
                args = (update.copies, update.shift) + \
                    ((update.swa_copies, update.swa_shift) if self._runner_swa else ())
                if self._runner_undo:
                    runner.update(*args, undo=undo_update)
                else:
                    kv_snap = runner.snapshot_kv()
                    runner.update(*args)
            for i, ub in enumerate(ubs):
                mem.apply(plan, i)
                if runner is not None:
                    place = mem.placement(plan, i, self.causal_attn, swa=self._runner_swa)
                    saved = runner.save_cells(place)      # the one copy of the cells it writes
                    undo.append(saved)
                    results.append(runner.compute(ub, place, saved))
        except BaseException:
            mem.rollback(plan)
            for saved in reversed(undo):
                runner.restore_cells(saved)
            if undo_update:
                runner.undo_update(undo_update)
            if kv_snap is not None:
                runner.restore_kv(kv_snap)
            raise
        mem.commit(plan)
        self._last_plan = mem.plan_record()             # one copy of the slot arrays (no mask)
        self._last_plan_swa = mem.swa_plan_record()
        self._last_split = plan.split
        self._last_placements = None                    # unpacked on first use
        self._finish(alloc, ubs, results)
        return 0

    def _finish(self, alloc: BatchAllocator, ubs: List[UBatch], results: list) -> None:
        """Output bookkeeping (llama.cpp decode step 15). output_ids and the reorder permutation are
        derived lazily from out_ids on first use."""
        self._last_ubatches = ubs
        self._out_ids = alloc.out_ids
        self._n_outputs = len(self._out_ids)
        self._output_ids = None
        self._reorder = None if self._n_outputs < 2 else False     # False: not computed yet
        self._rows_logits = None
        self._rows_embd = None
        self._embd_seq = {}
        if self._runner is None:
            return
        logits = [r.logits for r in results if r.logits is not None]
        embd = [r.embd for r in results if r.embd is not None]
        # one ubatch (every decode step): its fresh arrays are kept as they are, not copied
        self._rows_logits = (logits[0] if len(logits) == 1 else np.concatenate(logits)) if logits else None
        self._rows_embd = (embd[0] if len(embd) == 1 else np.concatenate(embd)) if embd else None
        for r in results:
            if r.embd_seq:
                self._embd_seq.update(r.embd_seq)

    def _ids(self) -> np.ndarray:
        if self._output_ids is None:
            ids = np.full(self.n_batch, -1, np.int32)
            order = np.argsort(self._out_ids, kind="stable")
            ids[self._out_ids[order]] = np.arange(self._n_outputs, dtype=np.int32)
            self._output_ids = ids
        return self._output_ids

    # ------------------------------------------------------------------ outputs
    def _apply_reorder(self) -> None:
        """llama.cpp's output_reorder: the pending swaps, applied once to every row buffer."""
        if self._reorder is None:
            return
        if self._reorder is False:
            order = np.argsort(self._out_ids, kind="stable")
            self._reorder = None if np.array_equal(order, np.arange(self._n_outputs)) else order
            if self._reorder is None:
                return
        if self._rows_logits is not None:
            self._rows_logits = self._rows_logits[self._reorder]
        if self._rows_embd is not None:
            self._rows_embd = self._rows_embd[self._reorder]
        self._reorder = None

    def _resolve_row(self, i: int, what: str) -> int:
        i = _int("i", i, -(2**31))
        if i < 0:
            j = self._n_outputs + i
            if j < 0:
                raise IndexError(f"invalid {what} id {i}, reason: negative index out of range [0, {self._n_outputs})")
            return j
        ids = self._ids()
        if i >= len(ids):
            raise IndexError(f"invalid {what} id {i}, reason: out of range [0, {len(ids)})")
        j = int(ids[i])
        if j < 0:
            raise IndexError(f"invalid {what} id {i}, reason: batch.logits[{i}] != true")
        if j >= self._n_outputs:
            raise IndexError(f"invalid {what} id {i}, reason: corrupt output buffer (j={j}, n_outputs={self._n_outputs})")
        return j

    def _logits_rows(self) -> np.ndarray:
        if self._runner is None:
            raise UbatchError("no logits: this is a planning-only context (model=None)")
        self._apply_reorder()
        if self._rows_logits is None:
            raise UbatchError("no logits: the last decode produced none")
        return self._rows_logits

    @_locked
    def get_logits(self) -> np.ndarray:
        """float32[n_outputs, n_vocab]: the output rows in batch order."""
        return self._logits_rows()

    @_locked
    def get_logits_ith(self, i: int) -> np.ndarray:
        """float32[n_vocab] of batch index i (negative: counted from the last output)."""
        rows = self._logits_rows()
        return rows[self._resolve_row(i, "logits")]

    def _embd_rows(self) -> np.ndarray:
        if self._runner is None:
            raise UbatchError("no embeddings: this is a planning-only context (model=None)")
        if not self.embeddings:
            raise UbatchError("no embeddings: the context was created with embeddings=False")
        if self.pooling != "none":
            raise UbatchError(f"no per-token embeddings with pooling {self.pooling!r}: use get_embeddings_seq")
        self._apply_reorder()
        if self._rows_embd is None:
            raise UbatchError("no embeddings: the last decode produced none")
        return self._rows_embd

    @_locked
    def get_embeddings(self) -> np.ndarray:
        """float32[n_outputs, n_embd] (pooling "none"), rows in batch order."""
        return self._embd_rows()

    @_locked
    def get_embeddings_ith(self, i: int) -> np.ndarray:
        """float32[n_embd] of batch index i (pooling "none")."""
        rows = self._embd_rows()
        return rows[self._resolve_row(i, "embeddings")]

    @_locked
    def get_embeddings_seq(self, seq_id: int) -> np.ndarray:
        """float32[n_embd]: the pooled embedding of a sequence of the last decode."""
        if self._runner is None:
            raise UbatchError("no embeddings: this is a planning-only context (model=None)")
        seq_id = _int("seq_id", seq_id, -(2**31))
        if seq_id not in self._embd_seq:
            raise KeyError(f"no pooled embedding for seq_id {seq_id}")
        return self._embd_seq[seq_id]

    def __repr__(self) -> str:
        return (f"Context(n_ctx={self.n_ctx}, n_ctx_seq={self.n_ctx_seq}, n_batch={self.n_batch}, "
                f"n_ubatch={self.n_ubatch}, n_seq_max={self.n_seq_max}, kv_unified={self.kv_unified}, "
                f"model={'None' if self.model is None else type(self.model).__name__})")


__all__ = ["Context"]
