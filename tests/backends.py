"""The kernel back-ends this machine can run (always the plain-C one, AVX2 when the CPU has it) and the
`backend` fixture that runs a test once on each (imported by the kernel test files)."""
import pytest

from ubatch.compute import matmul as mm

BACKENDS = ["generic"] + (["avx2"] if mm.set_backend("auto") == "avx2" else [])


@pytest.fixture(params=BACKENDS)
def backend(request):
    assert mm.set_backend(request.param) == request.param
    yield request.param
    mm.set_backend("auto")
