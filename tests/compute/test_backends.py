"""The kernel back-ends: the CPU probe, UBATCH_KERNELS, set_backend's errors, and the SIMD back-ends'
agreement (avx2, avxvnni and avx512 give bitwise the same matmul results; each is batch-invariant on its own,
test_matmul.py runs every kernel on every back-end this CPU has)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import ubatch.compute.kernels as K
from ubatch.compute import backends as be
from ubatch.compute import matmul as mm
from matmul_ref import ALL_TYPES, BLOCK, random_weight

from backends import BACKENDS
from child_process import CHILD_CWD, child_env

SIMD = [b for b in BACKENDS if b != "generic"]


def test_probe_and_public_api():
    assert K.backends() == be.backends() == BACKENDS
    assert BACKENDS[0] == "generic" and set(BACKENDS) <= set(be.NAMES)
    assert K.active_backend() in BACKENDS
    if "avx512" in BACKENDS or "avxvnni" in BACKENDS:
        assert "avx2" in BACKENDS  # both VNNI back-ends build on AVX2
    forced = os.environ.get("UBATCH_KERNELS", "")           # the tests may run under any UBATCH_KERNELS
    expect = forced if forced in BACKENDS else BACKENDS[-1]  # 'auto' honours it, else the widest one
    assert mm.set_backend("auto") == expect
    r = _run("", "import ubatch.compute.matmul as m; print(m.set_backend('auto'))")  # unset: the widest
    assert r.returncode == 0 and r.stdout.strip() == BACKENDS[-1], r.stderr


def test_set_backend_errors_name_the_choice(monkeypatch):
    with pytest.raises(ValueError, match="unknown kernel back-end 'avx9000'"):
        mm.set_backend("avx9000")
    before = K.active_backend()
    monkeypatch.setattr(be, "backends", lambda: ["generic"])
    with pytest.raises(ValueError, match="'avx512' is not supported by this CPU \\(it has: generic\\)"):
        be.set_backend("avx512")
    monkeypatch.undo()
    assert K.active_backend() == before
    from ubatch._ffi import lib
    assert lib.ub_mm_set_backend(99) == lib.UB_E_ARG and K.active_backend() == before


def _run(env_value, code):
    env = child_env(UBATCH_KERNELS=env_value)         # the same ubatch as this process (the install in CI)
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=CHILD_CWD, capture_output=True, text=True,
                          timeout=120)


def test_env_forces_a_backend_or_raises_naming_it():
    code = "import ubatch.compute.kernels as K; print(K.active_backend())"
    for name in BACKENDS:
        r = _run(name, code)
        assert r.returncode == 0 and r.stdout.strip() == name, r.stderr
    r = _run("avx9000", code)
    assert r.returncode != 0 and "UBATCH_KERNELS='avx9000' is not a kernel back-end" in r.stderr
    missing = [n for n in be.NAMES if n not in BACKENDS]
    if missing:
        r = _run(missing[0], code)
        assert r.returncode != 0 and f"UBATCH_KERNELS={missing[0]!r}: this CPU lacks" in r.stderr
    # the check itself, for a back-end the CPU has (so that importing ubatch succeeds) made to look missing
    widest = BACKENDS[-1]
    if widest != "generic":
        r = _run(widest, "import ubatch.compute.backends as b; b.backends = lambda: ['generic']; b.check_env()")
        assert r.returncode != 0 and f"UBATCH_KERNELS={widest!r}: this CPU lacks that back-end (it has: generic)" in r.stderr


@pytest.mark.skipif(len(SIMD) < 2, reason=f"fewer than two SIMD back-ends on this CPU ({', '.join(BACKENDS)})")
@pytest.mark.parametrize("t", ALL_TYPES, ids=lambda t: t.name)
def test_simd_backends_agree_bitwise(t):
    """avx2, avxvnni and avx512 compute every element by the same float operations (only the integer
    arithmetic inside a block differs, and it is exact): the same bits, at 1 row, a row tile and a GEMM tile."""
    rng = np.random.default_rng(int(t) + 500)
    blck = BLOCK[t][0]
    k = 77 if blck == 1 else (7 * 32 if blck == 32 else 768)
    n_rows = 45
    data = random_weight(t, n_rows, k, rng)
    x = rng.standard_normal((40, k)).astype(np.float32)
    x[3] *= 1e-3
    x[5, :7] = 30.0
    try:
        for repack in (False, True) if mm.repack_rows(int(t)) else (False,):  # GGUF layout, then panels + tail
            w = mm.QWeight(int(t), n_rows, k, data, repack=repack)
            outs = {}
            for b in SIMD:
                mm.set_backend(b)
                outs[b] = [mm.matmul(x[:1], w, n_threads=1), mm.matmul(x[:6], w, n_threads=2), mm.matmul(x, w, n_threads=2)]
            ref = outs[SIMD[0]]
            for b in SIMD[1:]:
                for got, want in zip(outs[b], ref):
                    assert np.array_equal(got, want), f"{t.name} (repack={repack}): {b} differs from {SIMD[0]}"
    finally:
        mm.set_backend("auto")
