"""Old path of ubatch.engine.context (kept so existing imports work): the same module object."""
import sys

from ubatch.engine import context as _m

sys.modules[__name__] = _m
