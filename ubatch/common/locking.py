"""`locked`: runs a method with its object's `_lock` (a threading.RLock) held."""
from __future__ import annotations

import functools


def locked(method):
    """Runs a method with the object's `_lock` (an RLock) held. CFFI releases the GIL inside C calls, so
    without it two threads could run C on one handle at once, or close() could free it mid-call."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return wrapper


__all__ = ["locked"]
