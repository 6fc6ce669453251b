"""Resident memory: a loaded model costs about its file size, never an f32 expansion (4-7x). Measured in a
fresh interpreter: RSS after loading and after one decode (which touches every weight page), minus the RSS
before loading, against 1.2 x the file size plus the context's K/V buffers."""
import json
import subprocess
import sys

import pytest

from child_process import CHILD_CWD, child_env


PROBE = r"""
import json, sys
import numpy as np
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
import ubatch
from ubatch.model import fetch
path = fetch.path(sys.argv[1]) if sys.argv[1] != "tiny-llama" else ubatch.models.TINY_LLAMA_PATH
ubatch.Model.from_gguf(ubatch.models.TINY_LLAMA_PATH)   # warm the import paths
r0 = rss()
m = ubatch.Model.from_gguf(path)
r1 = rss()
ctx = ubatch.Context(m, n_ctx=256, n_batch=64, n_ubatch=64, n_threads=2)
kv = sum(a.nbytes for a in ctx._runner.k + ctx._runner.v)
ctx.decode(ubatch.Batch.from_arrays(tokens=list(range(10, 42)), pos=list(range(32)), seq_ids=[0] * 32,
                                    output=[0] * 31 + [1]))
r2 = rss()
import os
print(json.dumps(dict(file=os.path.getsize(path), loaded=r1 - r0, after_decode=r2 - r0, kv=kv)))
"""


def probe(name):
    out = subprocess.run([sys.executable, "-c", PROBE, name], capture_output=True, text=True, env=child_env(),
                         cwd=CHILD_CWD, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.realmodel
@pytest.mark.parametrize("name", ["qwen2.5-0.5b", "gemma3-270m"])
def test_resident_memory_real(name):
    r = probe(name)
    print(name, {k: f"{v / 2**20:.1f} MiB" for k, v in r.items()})
    assert r["loaded"] <= 0.2 * r["file"]                      # mapped, not read: pages come in on use
    assert r["after_decode"] <= 1.2 * r["file"] + r["kv"]
