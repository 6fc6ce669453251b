"""Old path of ubatch.engine.serve (kept so existing imports work): the same module object."""
import sys

from ubatch.engine import serve as _m

sys.modules[__name__] = _m
