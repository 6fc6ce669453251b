"""Old path of ubatch.memory.placement (kept so existing imports work): the same module object."""
import sys

from ubatch.memory import placement as _m

sys.modules[__name__] = _m
