"""The one argument validator: an int (numpy ints accepted, bool refused) within [lo, hi], else TypeError /
ValueError naming the argument and the value."""
from __future__ import annotations

from typing import Optional

import numpy as np

I32_MIN, I32_MAX = -(2**31), 2**31 - 1


def check_int(name: str, v, lo: Optional[int] = I32_MIN, hi: Optional[int] = I32_MAX) -> int:
    """Returns v as a Python int when it is an integer in [lo, hi] (None: no bound on that side)."""
    if type(v) is not int:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
        v = int(v)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError(f"{name} = {v} is outside [{lo}, {hi}]")
    return v


__all__ = ["I32_MAX", "I32_MIN", "check_int"]
