"""How a test starts a child Python process: it must import the same `ubatch` as the test process (the
installed package in CI, the in-place build in a development tree), so the child gets the parent's sys.path
and runs in tests/support (helper modules only), never the repository root (whose ubatch/ has no built extension
when the tests run against an install) nor the tests folder (whose room folders would pass for packages)."""
import os
import sys

CHILD_CWD = os.path.dirname(os.path.abspath(__file__))


def child_env(**extra: str) -> dict:
    """os.environ with PYTHONPATH = this process's sys.path (absolute), plus `extra`."""
    path = os.pathsep.join(os.path.abspath(p) for p in sys.path if p)
    return dict(os.environ, PYTHONPATH=path, **extra)
