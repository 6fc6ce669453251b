"""Helpers shared by the decode-scenario replay tests: run llama.cpp's recorded scenarios
(tests/data/decode/*.json) through a planning-only Context and compare the memory after every step."""
from __future__ import annotations

import glob
import json
import os

import ubatch
from ubatch.engine.context import Context
from ubatch.common.errors import BatchError, KVCacheFullError, SplitError

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "decode")


def scenario_files() -> list:
    return sorted(glob.glob(os.path.join(DATA, "*__*.json")))


def load(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def make_context(ctx: dict) -> Context:
    return Context(None, n_ctx=ctx["n_ctx"], n_batch=ctx["n_batch"], n_ubatch=ctx["n_ubatch"],
                   n_seq_max=ctx["n_seq_max"], kv_unified=ctx["kv_unified"], embeddings=ctx["embeddings"],
                   type_k=ctx["type_k"], type_v=ctx["type_v"], n_threads=ctx["n_threads"])


def run_step(c: Context, step: dict):
    """Runs one scenario step; returns llama.cpp's return value for it."""
    kv = c.memory
    op = step["op"]
    if op == "decode":
        b = ubatch.Batch.from_arrays(tokens=step["tokens"], pos=step["pos"], seq_ids=step["seq_ids"],
                                     output=step["logits"])
        try:
            return c.decode(b)
        except (SplitError, KVCacheFullError) as e:
            assert e.code == 1
            return 1
        except BatchError as e:
            return e.code
    if op == "seq_rm":
        return kv.seq_rm(step["seq_id"], step["p0"], step["p1"])
    if op == "seq_cp":
        return kv.seq_cp(step["src"], step["dst"], step["p0"], step["p1"])
    if op == "seq_keep":
        return kv.seq_keep(step["seq_id"])
    if op == "seq_add":
        return kv.seq_add(step["seq_id"], step["p0"], step["p1"], step["delta"])
    raise AssertionError(f"unknown op {op}")


def memory_state(c: Context, n_seq_max: int) -> dict:
    """The memory in the vectors' format: seq_pos and per-stream kv records."""
    kv = c.memory
    seq_pos = [[s, kv.seq_pos_min(s), kv.seq_pos_max(s)] for s in range(n_seq_max)]
    streams = []
    for st in range(kv.n_stream):
        streams.append({"stream": st, "size": kv.size, "used": kv.used(st), "used_max_p1": kv.used_max_p1(st),
                        "has_shift": kv.has_shift(st),
                        "cells": [[i, p, list(ids)] for i, p, ids in kv.cells(st)]})
    return {"seq_pos": seq_pos, "kv": streams}


def expected_memory(rec: dict) -> dict:
    streams = []
    for s in rec["kv"]:
        streams.append({"stream": s["stream"], "size": s["size"], "used": s["used"], "used_max_p1": s["used_max_p1"],
                        "has_shift": s["has_shift"],
                        "cells": [[i, p, sorted(ids)] for i, p, ids in s["cells"]]})
    return {"seq_pos": rec["seq_pos"], "kv": streams}
