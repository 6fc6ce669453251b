"""The kernel back-ends this machine can run (always the plain-C one; avx2, avxvnni, avx512 when the CPU has
them) and the `backend` fixture that runs a test once on each (imported by the kernel test files). A
back-end the CPU lacks is skipped with the reason (and named in pytest's header)."""
import pytest

from ubatch.compute import backends as _be
from ubatch.compute import matmul as mm

BACKENDS = _be.backends()
MISSING = [n for n in _be.NAMES if n not in BACKENDS]


def pytest_report_header(config):
    lines = [f"ubatch kernel back-ends on this CPU: {', '.join(BACKENDS)}"]
    if MISSING:
        lines.append(f"kernel back-ends not tested (this CPU lacks them): {', '.join(MISSING)}")
    return lines


@pytest.fixture(params=list(_be.NAMES))
def backend(request):
    if request.param not in BACKENDS:
        pytest.skip(f"kernel back-end {request.param} not tested: this CPU lacks it (it has {', '.join(BACKENDS)})")
    assert mm.set_backend(request.param) == request.param
    yield request.param
    mm.set_backend("auto")
