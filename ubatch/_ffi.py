"""The compiled CFFI module (built from csrc/ by ubatch/_build_ffi.py)."""
try:
    from ubatch._native import ffi, lib  # noqa: F401
except ImportError as e:  # pragma: no cover - only without a build
    raise ImportError(
        "ubatch's C extension is not built: install with `pip install .` "
        "(or `make build` for an in-place development build)"
    ) from e

__all__ = ["ffi", "lib"]
