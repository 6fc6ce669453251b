"""Small helpers third-party code imports from llama_cpp._utils."""
from __future__ import annotations

import os
import sys
from typing import Any, Dict  # noqa: F401  (llama_cpp._utils.Any / Dict, as in 0.3.36)

# opened once at import, as 0.3.36 does (so the context manager works inside __del__ at interpreter exit)
outnull_file = open(os.devnull, "w")
errnull_file = open(os.devnull, "w")
STDOUT_FILENO = 1
STDERR_FILENO = 2


class suppress_stdout_stderr:
    """Redirects the process's stdout/stderr file descriptors to /dev/null inside the block (C-level output
    included); does nothing when disable=True."""

    sys = sys
    os = os

    def __init__(self, disable: bool = True) -> None:
        self.disable = disable

    def __enter__(self):
        if self.disable:
            return self
        self.sys.stdout.flush()
        self.sys.stderr.flush()
        self._null = self.os.open(self.os.devnull, self.os.O_WRONLY)
        self._saved = (self.os.dup(1), self.os.dup(2))
        self.os.dup2(self._null, 1)
        self.os.dup2(self._null, 2)
        return self

    def __exit__(self, *exc) -> None:
        if self.disable:
            return
        self.sys.stdout.flush()
        self.sys.stderr.flush()
        self.os.dup2(self._saved[0], 1)
        self.os.dup2(self._saved[1], 2)
        for fd in (*self._saved, self._null):
            self.os.close(fd)


class MetaSingleton(type):
    """A metaclass whose classes have one instance (made by the first call)."""
    _instances: Dict[type, Any] = {}

    def __call__(cls, *args, **kwargs):
        if cls not in cls._instances:
            cls._instances[cls] = super().__call__(*args, **kwargs)
        return cls._instances[cls]


class Singleton(object, metaclass=MetaSingleton):
    """A base class for one-instance classes (0.3.36's `class X(Singleton)`)."""
