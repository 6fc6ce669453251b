"""A stand-in for ubatch.engine.model_runner.ModelRunner that checks what the Context hands it and returns
outputs that identify their token: logits row = one-hot of the token id (+ batch index in column 0 of
embd), so the Context's output bookkeeping can be verified exactly. Installed as `ubatch.engine.model_runner` by the
fixture in the tests that use it."""
from __future__ import annotations

import sys
import types

import numpy as np

from ubatch.memory.placement import ComputeResult, Placement


class FakeModel:
    n_vocab = 32
    n_embd = 4
    n_ctx_train = 512


class FakeRunner:
    instances: list = []

    def __init__(self, model, *, n_stream, kv_size, type_k, type_v, n_threads, embeddings, pooling):
        self.n_vocab, self.n_embd = model.n_vocab, model.n_embd
        self.embeddings, self.pooling = embeddings, pooling
        self.n_stream, self.kv_size = n_stream, kv_size
        self.updates: list = []
        self.placements: list = []
        self.fail_at = None          # raise on the n-th compute call
        self.calls = 0
        FakeRunner.instances.append(self)

    def update(self, copies, shift):
        self.updates.append((list(copies), None if shift is None else shift.copy()))

    def compute(self, ub, place: Placement, saved=None) -> ComputeResult:
        self.calls += 1
        if self.fail_at is not None and self.calls == self.fail_at:
            raise RuntimeError("compute failed (test)")
        ns = len(place.streams)
        assert place.cells.shape == (ns, ub.n_tokens // ns)
        assert place.mask.shape == (ns, ub.n_tokens // ns, place.n_kv) and place.mask.dtype == np.float32
        self.placements.append(place)
        out = np.nonzero(ub.output)[0]
        logits = np.zeros((len(out), self.n_vocab), np.float32)
        logits[np.arange(len(out)), ub.token[out]] = 1.0
        logits[:, -1] = ub.batch_idxs[out]
        embd = seq = None
        if self.embeddings and self.pooling == "none":
            embd = np.zeros((len(out), self.n_embd), np.float32)
            embd[:, 0] = ub.batch_idxs[out]
        elif self.embeddings:
            seq = {int(s): np.full(self.n_embd, float(s), np.float32) for s in ub.seq_id_unq}
        return ComputeResult(logits=logits, embd=embd, embd_seq=seq)

    def snapshot_kv(self):
        return None

    def save_cells(self, place: Placement):
        return (place.streams.copy(), place.cells.copy())

    def restore_cells(self, saved) -> None:
        self.restored = getattr(self, "restored", []) + [saved]

    def restore_kv(self, snap):
        pass

    def clear(self):
        pass


def install(monkeypatch):
    mod = types.ModuleType("ubatch.engine.model_runner")
    mod.ModelRunner = FakeRunner
    monkeypatch.setitem(sys.modules, "ubatch.engine.model_runner", mod)
    FakeRunner.instances.clear()
