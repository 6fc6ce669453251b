"""Exceptions. `.code` is llama.cpp's return code for the same failure."""


class UbatchError(Exception):
    """Base class of every ubatch error."""

    code: int = -1

    def __init__(self, message: str, code: "int | None" = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class BatchError(UbatchError, ValueError):
    """The batch is invalid (llama.cpp: init failed, decode returns -1)."""

    code = -1


class SplitError(UbatchError):
    """The tokens cannot be cut into ubatches (llama.cpp: FAILED_PREPARE, decode returns 1)."""

    code = 1


class KVCacheFullError(UbatchError):
    """No KV slot for the batch; memory left unchanged (llama.cpp: decode returns 1)."""

    code = 1
