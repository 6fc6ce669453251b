"""How a test starts a child Python process: it must import the same `ubatch` as the test process (the
installed package in CI, the in-place build in a development tree), so the child gets the parent's sys.path
and runs in tests/support (helper modules only), never the repository root (whose ubatch/ has no built extension
when the tests run against an install) nor the tests folder (whose room folders would pass for packages)."""
import os
import sys

CHILD_CWD = os.path.dirname(os.path.abspath(__file__))


def _other_ubatch(p: str) -> bool:
    """True when folder p holds a `ubatch` package other than the one this process imported (the repository
    root on sys.path by some script's insert while the tests run against the install): the child must not see it."""
    import ubatch
    mine = os.path.realpath(os.path.dirname(ubatch.__file__))
    there = os.path.join(p, "ubatch")
    return os.path.isdir(there) and os.path.realpath(there) != mine


def child_env(**extra: str) -> dict:
    """os.environ with PYTHONPATH = this process's sys.path (absolute, without folders that would shadow the
    imported ubatch), plus `extra`."""
    path = os.pathsep.join(a for a in (os.path.abspath(p) for p in sys.path if p) if not _other_ubatch(a))
    return dict(os.environ, PYTHONPATH=path, **extra)
