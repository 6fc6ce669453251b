"""Shared by every layer: the exception types and the size limits."""
from ubatch.common.errors import (BatchError, CallOrderError, KVCacheFullError, RewindError, SplitError,
                                  UbatchError)

__all__ = ["BatchError", "CallOrderError", "KVCacheFullError", "RewindError", "SplitError", "UbatchError"]
