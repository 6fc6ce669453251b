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


class RewindError(UbatchError, ValueError):
    """A sequence operation or decode would need positions the sliding-window cache has already evicted
    (e.g. seq_rm back past the window, then decoding from there). Nothing was changed. llama.cpp accepts
    it and computes wrong logits, or restarts automatic positions at 0.

    seq_id:          the sequence
    first_available: its first position still held by the sliding cache (-1: none left)
    rewind_min:      how far back it can be rewound (memory.seq_rewind_min(seq_id))
    """

    code = -1

    def __init__(self, message: str, seq_id: int = -1, first_available: int = -1, rewind_min: int = -1) -> None:
        super().__init__(message)
        self.seq_id = seq_id
        self.first_available = first_available
        self.rewind_min = rewind_min


class CallOrderError(UbatchError, ValueError):
    """A call made in the wrong order: a split before a successful init, a second transaction while one is
    open, applying a plan that is not the memory's current one, ... (one type everywhere)."""

    code = -1
