"""Test-side decode driver: replays a recorded llama.cpp decode scenario through ModelRunner.compute with a
plain numpy KV-cell bookkeeping (NOT ubatch.KVCache): tokens go to the lowest free cells of their stream,
the mask is built from each cell's sequences and positions. Attention does not depend on which cells a
token lands in, so the logits must match llama.cpp's. Supports decode, seq_rm, seq_cp, seq_keep, seq_add
(K-shift through ModelRunner.update) for unified and per-sequence-stream caches."""
from __future__ import annotations

import numpy as np

from ubatch import Batch, BatchAllocator
from ubatch.memory.placement import Placement
from ubatch.engine.model_runner import ModelRunner


class NumpyCells:
    """Cell metadata of n_stream streams of `size` cells: position (-1 = empty), seq membership, shift."""

    def __init__(self, n_stream: int, size: int, n_seq_max: int, unified: bool) -> None:
        self.n_stream, self.size, self.n_seq_max, self.unified = n_stream, size, n_seq_max, unified
        self.pos = np.full((n_stream, size), -1, np.int64)
        self.seqs = np.zeros((n_stream, size, n_seq_max), bool)
        self.shift = np.zeros((n_stream, size), np.int32)
        self.pending_copies: list = []

    def stream_of(self, s: int) -> int:
        return 0 if self.unified else s

    def _free_empty(self) -> None:
        empty = ~self.seqs.any(axis=2)
        self.pos[empty] = -1
        self.shift[empty] = 0

    def _range(self, st: int, p0: int, p1: int) -> np.ndarray:
        p = self.pos[st]
        lo = p0 if p0 >= 0 else -(2**62)
        hi = p1 if p1 >= 0 else 2**62
        return (p >= 0) & (p >= lo) & (p < hi)

    def seq_pos_min(self, s: int) -> int:
        p = self.pos[self.stream_of(s)][self.seqs[self.stream_of(s), :, s]]
        return int(p.min()) if p.size else -1

    def seq_pos_max(self, s: int) -> int:
        p = self.pos[self.stream_of(s)][self.seqs[self.stream_of(s), :, s]]
        return int(p.max()) if p.size else -1

    def seq_rm(self, s: int, p0: int, p1: int) -> None:
        for st in range(self.n_stream):
            sel = self._range(st, p0, p1)
            if s < 0:
                self.seqs[st, sel, :] = False
            else:
                self.seqs[st, sel, s] = False
        self._free_empty()

    def seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None:
        s0, s1 = self.stream_of(src), self.stream_of(dst)
        if s0 == s1:
            sel = self._range(s0, p0, p1) & self.seqs[s0, :, src]
            self.seqs[s0, sel, dst] = True
            return
        assert p0 < 0 and p1 < 0, "cross-stream seq_cp needs the full range"
        self.pos[s1] = -1
        self.seqs[s1] = False
        sel = self.seqs[s0, :, src]
        self.pos[s1, sel] = self.pos[s0, sel]
        self.seqs[s1, sel, dst] = True
        self.shift[s1] = np.where(sel, self.shift[s0], 0)
        self.pending_copies.append((s0, s1))

    def seq_keep(self, s: int) -> None:
        keep = self.seqs[:, :, s].copy()
        self.seqs[:] = False
        self.seqs[:, :, s] = keep
        self._free_empty()

    def seq_add(self, s: int, p0: int, p1: int, delta: int) -> None:
        st = self.stream_of(s)
        sel = self._range(st, p0, p1) & self.seqs[st, :, s]
        self.pos[st, sel] += delta
        self.shift[st, sel] += delta
        gone = sel & (self.pos[st] < 0)
        self.seqs[st, gone] = False
        self._free_empty()

    def place(self, ub) -> Placement:
        """Apply the ubatch (lowest free cells) and build its Placement."""
        n = ub.n_tokens
        prim = ub.primary_seq
        if self.unified:
            ns = 1
            streams = np.zeros(1, np.int32)
        else:
            ns = ub.n_seqs_unq
            per = n // ns
            streams = np.array([self.stream_of(int(prim[k * per])) for k in range(ns)], np.int32)
        per = n // ns
        cells = np.zeros((ns, per), np.int32)
        pos0 = ub.pos[0]
        for k in range(ns):
            st = int(streams[k])
            free = np.flatnonzero(self.pos[st] < 0)
            assert free.size >= per, "test cache full"
            cells[k] = free[:per]
            for r in range(per):
                row, c = k * per + r, int(free[r])
                self.pos[st, c] = pos0[row]
                self.seqs[st, c, :] = False
                self.seqs[st, c, ub.seq_ids(row)] = True
        n_kv = self.size
        mask = np.full((ns, per, n_kv), -np.inf, np.float32)
        for k in range(ns):
            st = int(streams[k])
            rows = np.arange(k * per, (k + 1) * per)
            vis = self.seqs[st][:, prim[rows]].T & (self.pos[st][None, :] <= pos0[rows][:, None]) \
                & (self.pos[st][None, :] >= 0)
            mask[k][vis] = 0.0
        return Placement(streams=streams, cells=cells, n_kv=n_kv, mask=mask)


def replay(doc: dict, model, *, n_threads: int = 1):
    """Yields (step index, batch rows of the outputs, logits [R, n_vocab], embd [R, n_embd] | None) per
    decode step of the scenario, in ascending batch index like the recorded npz."""
    scen = doc["scenario"]
    c = scen["ctx"]
    n_seq_max = c["n_seq_max"]
    unified = c["kv_unified"]
    n_stream = 1 if unified else n_seq_max
    size = doc["result"]["ctx_effective"]["n_ctx_seq"]
    cells = NumpyCells(n_stream, size, n_seq_max, unified)
    runner = ModelRunner(model, n_stream=n_stream, kv_size=size, type_k=c["type_k"], type_v=c["type_v"],
                         n_threads=n_threads, embeddings=c["embeddings"], pooling="none")
    alloc = BatchAllocator()
    for si, st in enumerate(scen["steps"]):
        op = st["op"]
        if op == "seq_rm":
            cells.seq_rm(st["seq_id"], st["p0"], st["p1"])
        elif op == "seq_cp":
            cells.seq_cp(st["src"], st["dst"], st["p0"], st["p1"])
        elif op == "seq_keep":
            cells.seq_keep(st["seq_id"])
        elif op == "seq_add":
            cells.seq_add(st["seq_id"], st["p0"], st["p1"], st["delta"])
        elif op == "decode" and doc["result"]["steps"][si]["ret"] != 0:
            continue  # llama.cpp refused this batch (no slot / coupled seqs): nothing changed there either
        elif op == "decode":
            runner.update(cells.pending_copies, cells.shift if cells.shift.any() else None)
            cells.pending_copies = []
            cells.shift[:] = 0
            b = Batch.from_arrays(tokens=st["tokens"], pos=st["pos"], seq_ids=[set(s) for s in st["seq_ids"]],
                                  output=st["logits"])
            alloc.init(b, n_seq_max=n_seq_max, n_vocab=model.n_vocab, output_all=c["embeddings"], memory=cells)
            alloc.split_reset()
            rows, logits, embd = [], [], []
            while True:
                ub = (alloc.split_simple(c["n_ubatch"]) if unified
                      else alloc.split_equal(c["n_ubatch"], sequential=True))
                if ub is None or ub.n_tokens == 0:
                    break
                res = runner.compute(ub, cells.place(ub))
                out_rows = np.flatnonzero(ub.output)
                rows.append(ub.batch_idxs[out_rows])
                logits.append(res.logits)
                if res.embd is not None:
                    embd.append(res.embd)
            rows = np.concatenate(rows)
            order = np.argsort(rows)
            yield si, rows[order], np.concatenate(logits)[order], (np.concatenate(embd)[order] if embd else None)
        else:
            raise ValueError(f"unknown op {op}")
